package bench

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

var update = flag.Bool("update", false, "rewrite golden files")

// fixedResult is a deterministic driver result: n answers with latencies
// base, 2·base, … µs spread over a 2-second window.
func fixedResult(mode Mode, n int64, baseUS int64, errs map[string]int64) *Result {
	h := hdrhistogram.New(1, maxLatencyUS, sigFigs)
	for i := int64(1); i <= n; i++ {
		_ = h.RecordValue(baseUS * (1 + i%50))
	}
	var nerr int64
	for _, v := range errs {
		nerr += v
	}
	tl := Timeline{Interval: 500 * time.Millisecond, Completed: []int64{n / 4, n / 4, n / 4, n - 3*(n/4)}, Errors: []int64{0, nerr, 0, 0}}
	return &Result{
		Mode: mode, Conns: 16, Window: 2 * time.Second, Requests: n, Errors: nerr, ErrorsBy: errs,
		Latency: h, Parts: []PartResult{{Name: "evaluate-test", Requests: n, Errors: nerr, Latency: h}}, Timeline: tl,
	}
}

func fixedReport() *Report {
	srv := Measured{Result: fixedResult(Closed, 40000, 120, map[string]int64{"429": 3, "timeout": 1}),
		ServerCPU: 800 * time.Millisecond, HasCPU: true, ServerRSSKB: 150 * 1024, ClientCPU: 400 * time.Millisecond, HasClient: true}
	floor := Measured{Result: fixedResult(Closed, 100000, 50, map[string]int64{}),
		ServerCPU: 1000 * time.Millisecond, HasCPU: true, ServerRSSKB: 9 * 1024}
	row := BuildRow("evaluate-test", srv, &floor)
	row.Notes = []string{"floor answers /v1/evaluate=482 (body bytes by path)"}
	open := fixedResult(Open, 20000, 100, map[string]int64{})
	open.Rate = 10000
	row2 := BuildRow("evaluate-test", Measured{Result: open}, nil)
	return &Report{
		Tool:    UserAgent,
		Date:    "2026-11-22T06:00:00Z",
		Machine: Machine{NProc: 2, CPUModel: "Test CPU", OS: "linux", Arch: "amd64", Go: "go1.26"},
		Command: "fraudbench --scenario evaluate-test --floor",
		Target:  "fraudd started by fraudbench",
		Config:  ReportRunConfig{Connections: 16, DurationS: 2, WarmupS: 1, Plan: "custom", Floor: true},
		Results: []Row{row, row2},
		Skipped: []Skip{{Scenario: "evaluate-live", Reason: "endpoint not available (404): POST /v1/collect/network"}},
	}
}

func TestReportJSONGolden(t *testing.T) {
	var b bytes.Buffer
	if err := fixedReport().WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "report.golden.json")
	if *update {
		if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./bench -run Golden -update)", err)
	}
	if !bytes.Equal(b.Bytes(), want) {
		t.Fatalf("report JSON differs from %s (go test ./bench -run Golden -update rewrites it):\n%s", golden, b.String())
	}
}

// TestReportJSONFields pins the fields users script against (issue 6): they
// may gain company, never go away.
func TestReportJSONFields(t *testing.T) {
	var b bytes.Buffer
	if err := fixedReport().WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Results []map[string]json.RawMessage `json:"results"`
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	required := []string{"scenario", "requests", "errors", "rps", "p50_ms", "p90_ms", "p99_ms", "p999_ms",
		"server_cpu_us_per_req", "floor_rps", "floor_server_cpu_us_per_req", "ratio_rps", "ratio_cpu"}
	for i, r := range doc.Results {
		for _, k := range required {
			if _, ok := r[k]; !ok {
				t.Errorf("result %d has no %q", i, k)
			}
		}
	}
	first := fixedReport().Results[0]
	// 0.8 s over 40,000 requests = 20 µs; the floor 1 s over 100,000 = 10 µs.
	if *first.ServerCPU != 20 || *first.FloorServerCPU != 10 || *first.RatioCPU != 2 {
		t.Fatalf("cpu %v floor %v ratio %v, want 20 10 2", *first.ServerCPU, *first.FloorServerCPU, *first.RatioCPU)
	}
	if first.RPS != 20000 || *first.FloorRPS != 50000 || *first.RatioRPS != 0.4 {
		t.Fatalf("rps %v floor %v ratio %v", first.RPS, *first.FloorRPS, *first.RatioRPS)
	}
	// Without a floor the floor fields are null, not missing.
	if string(doc.Results[1]["floor_rps"]) != "null" || string(doc.Results[1]["ratio_cpu"]) != "null" {
		t.Fatalf("open row: floor_rps %s ratio_cpu %s, want null", doc.Results[1]["floor_rps"], doc.Results[1]["ratio_cpu"])
	}
}

func TestReportTable(t *testing.T) {
	var b bytes.Buffer
	fixedReport().WriteTable(&b)
	out := b.String()
	for _, want := range []string{"evaluate-test", "ratio to floor", "2.00×", "0.40×", "4 (429:3 timeout:1)", "skipped: evaluate-live: endpoint not available (404)", "10000/s"} {
		if !bytes.Contains(b.Bytes(), []byte(want)) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestSeriesScalesAndTrims(t *testing.T) {
	tl := Timeline{Interval: time.Second, Completed: []int64{100, 100, 50, 7}, Errors: []int64{0, 1, 0, 0}}
	s := series(tl, 2500*time.Millisecond)
	if len(s.RPS) != 3 || s.RPS[0] != 100 || s.RPS[2] != 100 {
		t.Fatalf("series %+v: want 3 points, the half-second last one scaled to 100/s", s)
	}
	if s := series(tl, 2100*time.Millisecond); len(s.RPS) != 2 {
		t.Fatalf("series %+v: a 0.1 s sliver of a last bucket should be dropped", s)
	}
	keys := []string{}
	for k := range fixedReport().Results[0].ErrorsByStatus {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) != 2 {
		t.Fatalf("errors_by_status keys %v", keys)
	}
}

// TestPercentileIsNearestRank: the q-th percentile is the ceil(q/100·n)-th
// smallest sample; with few samples the histogram's own rounding gave the
// rank below (p99.9 of 999 samples was the second largest).
func TestPercentileIsNearestRank(t *testing.T) {
	for _, c := range []struct {
		n    int64
		q    float64
		want int64
	}{{999, 99.9, 999}, {999, 50, 500}, {999, 99, 990}, {7, 90, 7}, {7, 50, 4}, {1, 99.9, 1}, {1600, 99.9, 1599}, {1000, 99.9, 999}} {
		h := hdrhistogram.New(1, maxLatencyUS, 3)
		for v := int64(1); v <= c.n; v++ {
			_ = h.RecordValue(v)
		}
		if got := pct(h, c.q); got != c.want {
			t.Errorf("n=%d p%v = %d, want %d", c.n, c.q, got, c.want)
		}
	}
	if got := pct(hdrhistogram.New(1, maxLatencyUS, 3), 99); got != 0 {
		t.Errorf("empty: %d", got)
	}
}
