package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Report is everything one fraudbench run measured; `--json` writes it and
// `--svg` draws it.
type Report struct {
	Tool    string  `json:"tool"`
	Date    string  `json:"date"`
	Machine Machine `json:"machine"`
	// Command is the command line that produced the report.
	Command string `json:"command"`
	// Target says what was measured: "fraudd started by fraudbench (PATH)"
	// or the --url.
	Target  string          `json:"target"`
	Results []Row           `json:"results"`
	Skipped []Skip          `json:"skipped"`
	Notes   []string        `json:"notes,omitempty"`
	Config  ReportRunConfig `json:"config"`
	// Interrupted is true when the run was stopped (SIGINT/SIGTERM) before
	// every scenario had run its full window.
	Interrupted bool `json:"interrupted"`
	// Thresholds are the --max-p99/--max-error-rate/--min-rps checks, one
	// per threshold and measured server row.
	Thresholds []ThresholdCheck `json:"thresholds,omitempty"`
}

// ReportRunConfig is the driver configuration in the report.
type ReportRunConfig struct {
	Connections int     `json:"connections"`
	DurationS   float64 `json:"duration_s"`
	Requests    int64   `json:"requests,omitempty"`
	WarmupS     float64 `json:"warmup_s"`
	Plan        string  `json:"plan"`
	Floor       bool    `json:"floor"`
}

// Machine is where the run happened.
type Machine struct {
	NProc    int    `json:"nproc"`
	CPUModel string `json:"cpu_model"`
	OS       string `json:"os"`
	Arch     string `json:"arch"`
	Go       string `json:"go"`
}

// Skip is a scenario that did not run, and why.
type Skip struct {
	Scenario string `json:"scenario"`
	Reason   string `json:"reason"`
}

// Row is one scenario in one mode, with its floor counterpart. Pointer
// fields are null when not measured (no floor, or a server fraudbench did not
// start and was not given a pid).
type Row struct {
	Scenario string `json:"scenario"`
	Mode     Mode   `json:"mode"`
	// Interrupted: the run was stopped before its window was complete; its
	// figures cover the part that ran.
	Interrupted    bool             `json:"interrupted"`
	Connections    int              `json:"connections"`
	Rate           *float64         `json:"rate"`
	DurationS      float64          `json:"duration_s"`
	Requests       int64            `json:"requests"`
	Errors         int64            `json:"errors"`
	ErrorsByStatus map[string]int64 `json:"errors_by_status"`
	RPS            float64          `json:"rps"`
	P50            float64          `json:"p50_ms"`
	P90            float64          `json:"p90_ms"`
	P99            float64          `json:"p99_ms"`
	P999           float64          `json:"p999_ms"`
	Max            float64          `json:"max_ms"`
	Mean           float64          `json:"mean_ms"`
	ServerCPU      *float64         `json:"server_cpu_us_per_req"`
	ServerPeakRSS  *float64         `json:"server_peak_rss_mb"`
	ClientCPU      *float64         `json:"client_cpu_us_per_req"`

	FloorRequests  *int64   `json:"floor_requests"`
	FloorErrors    *int64   `json:"floor_errors"`
	FloorRPS       *float64 `json:"floor_rps"`
	FloorP50       *float64 `json:"floor_p50_ms"`
	FloorP90       *float64 `json:"floor_p90_ms"`
	FloorP99       *float64 `json:"floor_p99_ms"`
	FloorP999      *float64 `json:"floor_p999_ms"`
	FloorMax       *float64 `json:"floor_max_ms"`
	FloorServerCPU *float64 `json:"floor_server_cpu_us_per_req"`
	FloorPeakRSS   *float64 `json:"floor_peak_rss_mb"`
	RatioRPS       *float64 `json:"ratio_rps"`
	RatioCPU       *float64 `json:"ratio_cpu"`
	RatioP99       *float64 `json:"ratio_p99"`

	// FloorRounds are every round's figures when the run was measured in
	// rounds alternating with the floor (Config.FloorRounds); the row's
	// own figures are those of the median round.
	FloorRounds []FloorRound `json:"floor_rounds,omitempty"`

	Parts []PartRow  `json:"parts,omitempty"`
	Notes []string   `json:"notes,omitempty"`
	Curve []Quantile `json:"latency_curve"`
	// FloorCurve is the floor's latency curve (null without a floor).
	FloorCurve    []Quantile `json:"floor_latency_curve"`
	Timeline      Series     `json:"timeline"`
	FloorTimeline *Series    `json:"floor_timeline"`
	// Cluster holds a local cluster run's per-node figures (--nodes).
	Cluster *ClusterRow `json:"cluster,omitempty"`
}

// FloorRound is one round of a run measured against the floor in rounds.
type FloorRound struct {
	RPS            float64  `json:"rps"`
	P99            float64  `json:"p99_ms"`
	ServerCPU      *float64 `json:"server_cpu_us_per_req"`
	FloorRPS       *float64 `json:"floor_rps"`
	FloorP99       *float64 `json:"floor_p99_ms"`
	FloorServerCPU *float64 `json:"floor_server_cpu_us_per_req"`
	RatioCPU       *float64 `json:"ratio_cpu"`
	// Interrupted: the run was stopped during this round (it is the last).
	Interrupted bool `json:"interrupted"`
}

// PartRow is one part of a mixed workload.
type PartRow struct {
	Name     string  `json:"name"`
	Requests int64   `json:"requests"`
	Errors   int64   `json:"errors"`
	P50      float64 `json:"p50_ms"`
	P99      float64 `json:"p99_ms"`
}

// Quantile is one point of a latency curve.
type Quantile struct {
	Percentile float64 `json:"percentile"`
	Ms         float64 `json:"ms"`
}

// Series is throughput over time.
type Series struct {
	IntervalS float64   `json:"interval_s"`
	RPS       []float64 `json:"rps"`
	Errors    []int64   `json:"errors"`
}

// Measured is one driver run plus the process figures around it.
type Measured struct {
	Result *Result
	// ServerCPU is the server's CPU time over the window; HasCPU says
	// whether it was measured.
	ServerCPU   time.Duration
	HasCPU      bool
	ServerRSSKB uint64
	ClientCPU   time.Duration
	HasClient   bool
}

// curvePercentiles are the points of the latency curves.
var curvePercentiles = []float64{
	0, 10, 20, 25, 30, 40, 50, 60, 70, 75, 80, 85, 90, 92.5, 95, 96.25, 97.5, 98.25, 99,
	99.375, 99.5, 99.75, 99.875, 99.9, 99.95, 99.975, 99.99, 99.995, 99.999, 100,
}

func ms(us int64) float64 { return round(float64(us)/1000, 3) }

func round(x float64, digits int) float64 {
	p := math.Pow10(digits)
	return math.Round(x*p) / p
}

func ptr[T any](v T) *T { return &v }

func curve(h *hdrhistogram.Histogram) []Quantile {
	out := make([]Quantile, 0, len(curvePercentiles))
	for _, p := range curvePercentiles {
		var v int64
		switch p {
		case 0:
			v = h.Min()
		case 100:
			v = h.Max()
		default:
			v = pct(h, p)
		}
		out = append(out, Quantile{Percentile: p, Ms: ms(v)})
	}
	return out
}

func series(tl Timeline, window time.Duration) Series {
	s := Series{IntervalS: tl.Interval.Seconds(), RPS: []float64{}, Errors: []int64{}}
	n := len(tl.Completed)
	// Trailing buckets past the window (in-flight answers) are dropped; a
	// partial last bucket is scaled by its length, or dropped when shorter
	// than half an interval.
	if want := int(math.Ceil(float64(window) / float64(tl.Interval))); want < n {
		n = want
	}
	for i := 0; i < n; i++ {
		span := tl.Interval
		if rest := window - time.Duration(i)*tl.Interval; rest < span {
			span = rest
		}
		if span <= 0 || (i > 0 && span < tl.Interval/2) {
			break // a sliver of a bucket gives a noisy rate
		}
		s.RPS = append(s.RPS, round(float64(tl.Completed[i])/span.Seconds(), 1))
		s.Errors = append(s.Errors, tl.Errors[i])
	}
	return s
}

func perReq(d time.Duration, n int64) *float64 {
	if n <= 0 {
		return nil
	}
	return ptr(round(float64(d.Microseconds())/float64(n), 2))
}

// BuildRow turns a measured run (and its floor run, if any) into a report row.
func BuildRow(scenario string, m Measured, floor *Measured) Row {
	r := m.Result
	h := r.Latency
	row := Row{
		Scenario:       scenario,
		Mode:           r.Mode,
		Connections:    r.Conns,
		DurationS:      round(r.Window.Seconds(), 3),
		Requests:       r.Requests,
		Errors:         r.Errors,
		ErrorsByStatus: map[string]int64{},
		RPS:            round(r.RPS(), 1),
		P50:            ms(pct(h, 50)),
		P90:            ms(pct(h, 90)),
		P99:            ms(pct(h, 99)),
		P999:           ms(pct(h, 99.9)),
		Max:            ms(h.Max()),
		Mean:           round(h.Mean()/1000, 3),
		Curve:          curve(h),
		Timeline:       series(r.Timeline, r.Window),
		Interrupted:    r.Interrupted,
	}
	if r.Mode == Open {
		row.Rate = ptr(round(r.Rate, 1))
	}
	for k, v := range r.ErrorsBy {
		row.ErrorsByStatus[k] = v
	}
	if m.HasCPU {
		row.ServerCPU = perReq(m.ServerCPU, r.Requests)
		row.ServerPeakRSS = ptr(round(float64(m.ServerRSSKB)/1024, 1))
	}
	if m.HasClient {
		row.ClientCPU = perReq(m.ClientCPU, r.Requests)
	}
	if len(r.Parts) > 1 {
		for _, p := range r.Parts {
			row.Parts = append(row.Parts, PartRow{
				Name: p.Name, Requests: p.Requests, Errors: p.Errors,
				P50: ms(pct(p.Latency, 50)), P99: ms(pct(p.Latency, 99)),
			})
		}
	}
	if floor != nil {
		f := floor.Result
		fh := f.Latency
		row.FloorRequests = ptr(f.Requests)
		row.FloorErrors = ptr(f.Errors)
		row.FloorRPS = ptr(round(f.RPS(), 1))
		row.FloorP50 = ptr(ms(pct(fh, 50)))
		row.FloorP90 = ptr(ms(pct(fh, 90)))
		row.FloorP99 = ptr(ms(pct(fh, 99)))
		row.FloorP999 = ptr(ms(pct(fh, 99.9)))
		row.FloorMax = ptr(ms(fh.Max()))
		row.FloorCurve = curve(fh)
		ft := series(f.Timeline, f.Window)
		row.FloorTimeline = &ft
		if floor.HasCPU {
			row.FloorServerCPU = perReq(floor.ServerCPU, f.Requests)
			row.FloorPeakRSS = ptr(round(float64(floor.ServerRSSKB)/1024, 1))
		}
		if *row.FloorRPS > 0 {
			row.RatioRPS = ptr(round(row.RPS / *row.FloorRPS, 3))
		}
		if row.ServerCPU != nil && row.FloorServerCPU != nil && *row.FloorServerCPU > 0 {
			row.RatioCPU = ptr(round(*row.ServerCPU / *row.FloorServerCPU, 2))
		}
		if *row.FloorP99 > 0 {
			row.RatioP99 = ptr(round(row.P99 / *row.FloorP99, 2))
		}
	}
	return row
}

// ThisMachine describes the machine the report is made on.
func ThisMachine() Machine {
	m := Machine{NProc: runtime.NumCPU(), OS: runtime.GOOS, Arch: runtime.GOARCH, Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}

// WriteJSON writes the report as indented JSON.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

func fmtOpt(p *float64, format string) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf(format, *p)
}

func fmtErrors(n int64, by map[string]int64) string {
	if n == 0 {
		return "0"
	}
	keys := make([]string, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s:%d", k, by[k]))
	}
	return fmt.Sprintf("%d (%s)", n, strings.Join(parts, " "))
}

// WriteTable prints the human-readable report.
func (rep *Report) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "%s  %s  %d× %s\n", rep.Tool, rep.Date, rep.Machine.NProc, rep.Machine.CPUModel)
	fmt.Fprintf(w, "target: %s\n\n", rep.Target)
	width := len("ratio to floor") + 2
	for _, r := range rep.Results {
		width = max(width, len(r.Scenario))
		for _, p := range r.Parts {
			width = max(width, len(p.Name)+4)
		}
	}
	pad := func(s string) string { return s + strings.Repeat(" ", max(0, width-len([]rune(s)))) }
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, pad("scenario")+"\tmode\tconns\trate\trequests\terrors\treq/s\tp50 ms\tp90 ms\tp99 ms\tp99.9 ms\tmax ms\tsrv µs/req\tpeak RSS MB\tcli µs/req\t")
	for _, r := range rep.Results {
		rate := "max"
		if r.Rate != nil {
			rate = fmt.Sprintf("%.0f/s", *r.Rate)
		}
		mode := string(r.Mode)
		if r.Interrupted {
			mode += " interrupted"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\t%.0f\t%.3f\t%.3f\t%.3f\t%.3f\t%.2f\t%s\t%s\t%s\t\n",
			pad(r.Scenario), mode, r.Connections, rate, r.Requests, fmtErrors(r.Errors, r.ErrorsByStatus), r.RPS,
			r.P50, r.P90, r.P99, r.P999, r.Max, fmtOpt(r.ServerCPU, "%.1f"), fmtOpt(r.ServerPeakRSS, "%.0f"), fmtOpt(r.ClientCPU, "%.1f"))
		if r.FloorRPS != nil {
			fmt.Fprintf(tw, pad("  floor")+"\t%s\t%d\t%s\t%d\t%d\t%.0f\t%.3f\t%.3f\t%.3f\t%.3f\t%.2f\t%s\t%s\t\t\n",
				r.Mode, r.Connections, rate, *r.FloorRequests, *r.FloorErrors, *r.FloorRPS,
				*r.FloorP50, *r.FloorP90, *r.FloorP99, *r.FloorP999, *r.FloorMax, fmtOpt(r.FloorServerCPU, "%.1f"), fmtOpt(r.FloorPeakRSS, "%.0f"))
			fmt.Fprintf(tw, pad("  ratio to floor")+"\t\t\t\t\t\t%s\t\t\t%s\t\t\t%s\t\t\t\n",
				fmtOpt(r.RatioRPS, "%.2f×"), fmtOpt(r.RatioP99, "%.2f×"), fmtOpt(r.RatioCPU, "%.2f×"))
		}
		for _, p := range r.Parts {
			fmt.Fprintf(tw, "%s\t\t\t\t%d\t%d\t\t%.3f\t\t%.3f\t\t\t\t\t\t\n", pad("  · "+p.Name), p.Requests, p.Errors, p.P50, p.P99)
		}
	}
	tw.Flush()
	for _, r := range rep.Results {
		if r.Cluster != nil {
			writeCluster(w, &r)
		}
	}
	for _, r := range rep.Results {
		for _, n := range r.Notes {
			fmt.Fprintf(w, "note: %s %s: %s\n", r.Scenario, r.Mode, n)
		}
	}
	for _, s := range rep.Skipped {
		fmt.Fprintf(w, "skipped: %s: %s\n", s.Scenario, s.Reason)
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	if rep.Interrupted {
		fmt.Fprintln(w, "interrupted: the run was stopped early; rows marked interrupted cover the part that ran")
	}
	for _, c := range rep.Thresholds {
		if !c.Pass {
			fmt.Fprintf(w, "threshold failed: %s\n", c)
		}
	}
}

// writeCluster prints a cluster row's per-node figures, its round trips
// per request and its failover.
func writeCluster(w io.Writer, r *Row) {
	c := r.Cluster
	fmt.Fprintf(w, "\n%s %s over %d nodes: %.4f owner round trips, %.4f lease calls per request; %.1f%% charged from lent slices, %.1f%% completed at the owner after a leased charge, %.1f%% from a mirror of its history; %.2f calls per pipe frame\n",
		r.Scenario, r.Mode, len(c.Nodes), c.OwnerCallsPerRequest, c.LeaseCallsPerRequest, 100*c.LeasedShare, 100*c.LeasedRestsPerRequest, 100*c.MirroredPerRequest, c.PipeCallsPerFrame)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  node\tpid\trequests\tfailed\tsrv µs/req\tpeak RSS MB\towner calls\tlease calls\tleased\tleased rests\tmirrored\tpipe calls\tpipe frames\t")
	for _, n := range c.Nodes {
		name := n.Node
		if n.Killed {
			name += " (killed)"
		}
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", name, n.PID, n.Requests, n.Failed,
			fmtOpt(n.ServerCPU, "%.1f"), fmtOpt(n.ServerPeakRSS, "%.0f"), n.OwnerCalls, n.LeaseCalls, n.Leased, n.LeasedRests, n.Mirrored, n.PipeCalls, n.PipeFrames)
	}
	tw.Flush()
	if f := c.Failover; f != nil {
		fmt.Fprintf(w, "failover: %s killed %.1fs into the window (lease TTL %gs): the others failed %d requests over %.3fs after it; %d lost in flight on %s\n",
			f.Node, f.KilledAtS, f.LeaseTTLS, f.Failed, f.WindowS, f.LostInFlight, f.Node)
	}
}
