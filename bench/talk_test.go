package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

func statusWorkload() *Workload {
	return NewWorkload("t", Part{Name: "status", Weight: 1, Fill: func(req *fasthttp.Request, _ *Filler) {
		req.Header.SetMethod("GET")
		req.SetRequestURI("/api/status")
	}})
}

func TestProgressEverySecond(t *testing.T) {
	url := testServer(t, func(ctx *fasthttp.RequestCtx) {
		if ctx.Request.Header.Peek("X-Fail") != nil {
			ctx.SetStatusCode(500)
		}
	})
	var mu sync.Mutex
	var got []Progress
	_, err := Run(context.Background(), testTarget(t, url, 2), statusWorkload(), RunConfig{
		Conns: 2, Duration: 2500 * time.Millisecond, Warmup: 600 * time.Millisecond,
		Progress: func(p Progress) { mu.Lock(); got = append(got, p); mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) < 2 {
		t.Fatalf("%d progress calls in a 3.1 s run, want one a second", len(got))
	}
	last := got[len(got)-1]
	if !last.Measuring || last.Requests == 0 || last.RPS <= 0 || last.P99 <= 0 {
		t.Fatalf("last progress %+v", last)
	}
	line := FormatProgress("status", last)
	for _, w := range []string{"status:", "req/s", "errors 0 (0.00%)", "p99 "} {
		if !strings.Contains(line, w) {
			t.Errorf("progress line %q lacks %q", line, w)
		}
	}
	if l := FormatProgress("x", Progress{Elapsed: time.Second}); !strings.Contains(l, "warm-up") {
		t.Errorf("warm-up line %q", l)
	}
}

func TestThresholds(t *testing.T) {
	rep := &Report{Results: []Row{
		{Scenario: "fast", Mode: Closed, Requests: 1000, Errors: 0, RPS: 5000, P99: 0.4},
		{Scenario: "slow", Mode: Closed, Requests: 1000, Errors: 20, ErrorsByStatus: map[string]int64{"429": 20}, RPS: 90, P99: 12.5},
	}}
	th := Thresholds{MaxP99: time.Millisecond, MaxErrorRate: 0.01, MinRPS: 100}
	failed := th.Check(rep)
	if len(rep.Thresholds) != 6 || len(failed) != 3 {
		t.Fatalf("checks %v, failed %v", rep.Thresholds, failed)
	}
	var names []string
	for _, f := range failed {
		if f.Scenario != "slow" {
			t.Errorf("fast row failed %s", f)
		}
		names = append(names, f.Name)
	}
	if strings.Join(names, ",") != "max-p99,max-error-rate,min-rps" {
		t.Fatalf("failed %v", names)
	}
	if s := failed[0].String(); s != "slow closed: p99 12.5ms exceeds --max-p99 1ms" {
		t.Errorf("message %q", s)
	}
	if s := failed[1].String(); s != "slow closed: error rate 2% exceeds --max-error-rate 1%" {
		t.Errorf("message %q", s)
	}
	var tbl bytes.Buffer
	rep.WriteTable(&tbl)
	if s := failed[2].String(); s != "slow closed: throughput 90.0 req/s below --min-rps 100.0 req/s" {
		t.Errorf("message %q", s)
	}
	if !strings.Contains(tbl.String(), "threshold failed: slow closed: p99 12.5ms exceeds --max-p99 1ms") {
		t.Errorf("table does not name the failed threshold:\n%s", tbl.String())
	}
	// No error rate given: an erroring run passes; 0 is a real limit.
	if f := (Thresholds{MaxErrorRate: NoErrorRate}).Check(&Report{Results: rep.Results}); len(f) != 0 {
		t.Errorf("unset thresholds failed: %v", f)
	}
	if f := (Thresholds{MaxErrorRate: 0}).Check(&Report{Results: rep.Results}); len(f) != 1 {
		t.Errorf("--max-error-rate 0: %v", f)
	}
	// Exchanges that got no answer are errors beside the answered requests:
	// 100 answered and 100 refused dials is a 50% error rate.
	down := &Report{Results: []Row{{Scenario: "down", Mode: Closed, Requests: 100, Errors: 100, ErrorsByStatus: map[string]int64{"conn": 100}, RPS: 1000, P99: 0.1}}}
	if f := (Thresholds{MaxErrorRate: 0.4}).Check(down); len(f) != 1 || f[0].Name != "max-error-rate" || !strings.Contains(f[0].String(), "50%") {
		t.Errorf("transport errors: %v", f)
	}
	for in, want := range map[string]float64{"0.01": 0.01, "1%": 0.01, "0": 0, "100%": 1} {
		if got, err := ParseErrorRate(in); err != nil || got != want {
			t.Errorf("ParseErrorRate(%q) = %v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"5", "-1%", "x"} {
		if _, err := ParseErrorRate(bad); err == nil {
			t.Errorf("ParseErrorRate(%q) accepted", bad)
		}
	}
}

// TestMost429Explained: most answers 429 are explained by their likely
// cause, in the log and in the row's notes.
func TestMost429Explained(t *testing.T) {
	var n atomic.Int64
	url := testServer(t, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		// The readiness wait passes; the measured run is refused.
		if n.Add(1) > 4 { // readiness wait and three set-up probes
			ctx.Response.Header.Set("Retry-After", "60")
			ctx.SetStatusCode(429)
			ctx.SetBodyString(`{"error":"Too many requests."}`)
			return
		}
		ctx.SetBodyString(`{"status":"operational"}`)
	})
	var log bytes.Buffer
	rep, err := RunSuite(context.Background(), Config{Scenarios: []string{"status"},
		Run: RunConfig{Conns: 2, Duration: 300 * time.Millisecond, Warmup: -1}, URL: url, AdminToken: "adm", Log: &log})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if len(rep.Results) != 1 || !strings.Contains(strings.Join(rep.Results[0].Notes, "\n"), "--trusted-proxies") ||
		!strings.Contains(log.String(), "were 429: a per-address limit refused them") {
		t.Fatalf("no explanation of the 429s:\nrows %+v\nlog %s", rep.Results, log.String())
	}

	r := &Result{Requests: 100, ErrorsBy: map[string]int64{"429": 90}, First429: &Refusal{Body: []byte(`{"error":"x","code":"monthly_quota_exceeded"}`)}}
	if why := Explain429(r, true); !strings.Contains(why, "90 of 100") || !strings.Contains(why, "monthly allowance") {
		t.Fatalf("monthly 429s: %q", why)
	}
	r.First429 = &Refusal{Body: []byte(`{"error":"x"}`), RateLimited: true}
	if why := Explain429(r, true); !strings.Contains(why, "hourly cap") {
		t.Fatalf("hourly 429s: %q", why)
	}
	r.ErrorsBy["429"] = 40
	if why := Explain429(r, true); why != "" {
		t.Fatalf("a minority of 429s explained: %q", why)
	}
}

func TestInterruptedRunIsMarked(t *testing.T) {
	url := testServer(t, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"status":"operational"}`)
	})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(700*time.Millisecond, cancel)
	var log bytes.Buffer
	rep, err := RunSuite(ctx, Config{
		Scenarios: []string{"status", "free-lookup"}, Run: RunConfig{Conns: 2, Duration: 20 * time.Second, Warmup: -1},
		URL: url, AdminToken: "adm", Log: &log,
	})
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("err %v, want ErrInterrupted\n%s", err, log.String())
	}
	if !rep.Interrupted || len(rep.Results) != 1 || !rep.Results[0].Interrupted || rep.Results[0].Requests == 0 {
		t.Fatalf("report %+v", rep)
	}
	if len(rep.Skipped) != 1 || rep.Skipped[0].Reason != "interrupted before it ran" {
		t.Fatalf("skipped %+v", rep.Skipped)
	}
	var tbl, js bytes.Buffer
	rep.WriteTable(&tbl)
	if !strings.Contains(tbl.String(), "closed interrupted") || !strings.Contains(tbl.String(), "interrupted: the run was stopped early") {
		t.Errorf("table:\n%s", tbl.String())
	}
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back struct {
		Interrupted bool `json:"interrupted"`
		Results     []struct {
			Interrupted bool `json:"interrupted"`
		} `json:"results"`
	}
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || !back.Interrupted || !back.Results[0].Interrupted {
		t.Fatalf("JSON does not mark the interruption: %v %s", err, js.String())
	}
}
