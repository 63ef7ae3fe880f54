package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Comparing two builds. On a shared VM the same binary's CPU per request
// moves by ±15–30% between runs minutes apart, more than most changes
// worth measuring; the floor ratio removes part of that, not all. Compare
// keeps both servers running side by side and alternates short closed-loop
// runs of each (A B B A A B …), so that both see the same machine over the
// same minutes, and reports per-scenario medians and the ratio of B's to
// A's. Paired this way, five 4 s rounds told two builds apart within ±5%.

// Side is one of the two servers Compare measures: a fraudd binary it
// starts (Fraudd), or a running server (URL with its AdminToken and, for
// CPU figures, its ServerPID).
type Side struct {
	Name       string
	Fraudd     string
	URL        string
	AdminToken string
	ServerPID  int
}

// CompareConfig configures Compare. Rounds runs of Run.Duration each, per
// scenario and side, closed loop only.
type CompareConfig struct {
	Scenarios  []string
	A, B       Side
	Rounds     int
	Run        RunConfig
	FrauddArgs []string
	Env        []string
	Plan       string
	LiveTokens int
	Log        io.Writer
	Command    string
}

// CompareRow is one scenario's figures: every round's server CPU µs per
// request and req/s for each side, their medians, and B's median over A's.
type CompareRow struct {
	Scenario string    `json:"scenario"`
	CPUA     []float64 `json:"cpu_us_per_req_a"`
	CPUB     []float64 `json:"cpu_us_per_req_b"`
	RPSA     []float64 `json:"rps_a"`
	RPSB     []float64 `json:"rps_b"`
	MedCPUA  float64   `json:"median_cpu_a"`
	MedCPUB  float64   `json:"median_cpu_b"`
	MedRPSA  float64   `json:"median_rps_a"`
	MedRPSB  float64   `json:"median_rps_b"`
	// RatioCPU is MedCPUB / MedCPUA: below 1, B costs less per request.
	RatioCPU float64 `json:"ratio_cpu_b_to_a"`
	// PairedRatioCPU is the median over rounds of the round's B over its
	// A, the two measured back to back: a slow stretch of the machine
	// that takes in a whole round moves both, where the two medians can
	// come from different stretches.
	PairedRatioCPU float64 `json:"paired_ratio_cpu_b_to_a"`
	Errors         int64   `json:"errors"`
}

// CompareReport is Compare's result.
type CompareReport struct {
	Tool    string       `json:"tool"`
	Date    string       `json:"date"`
	Machine Machine      `json:"machine"`
	Command string       `json:"command,omitempty"`
	A       string       `json:"a"`
	B       string       `json:"b"`
	Rounds  int          `json:"rounds"`
	Rows    []CompareRow `json:"results"`
	Skipped []Skip       `json:"skipped"`
}

// roundOrder is the order of round r's two runs: A first on even rounds, B
// first on odd ones, so neither side is always the one that runs second.
func roundOrder(r int) [2]int {
	if r%2 == 0 {
		return [2]int{0, 1}
	}
	return [2]int{1, 0}
}

// median of xs (0 for none); xs is not changed.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Compare measures cfg's scenarios on both sides in alternating rounds.
func Compare(ctx context.Context, cfg CompareConfig) (*CompareReport, error) {
	if cfg.Rounds < 1 {
		return nil, errors.New("compare: rounds must be at least 1")
	}
	names, err := expandScenarios(cfg.Scenarios)
	if err != nil {
		return nil, err
	}
	for _, sd := range []Side{cfg.A, cfg.B} {
		if (sd.Fraudd == "") == (sd.URL == "") {
			return nil, fmt.Errorf("compare: side %q needs either a fraudd binary or a URL", sd.Name)
		}
	}
	log := cfg.Log
	if log == nil {
		log = io.Discard
	}
	rc := cfg.Run
	rc.Mode = Closed
	rc.defaults()
	rep := &CompareReport{Tool: UserAgent, Date: time.Now().UTC().Format(time.RFC3339), Machine: ThisMachine(),
		Command: cfg.Command, A: cfg.A.Name, B: cfg.B.Name, Rounds: cfg.Rounds, Rows: []CompareRow{}, Skipped: []Skip{}}
	var suites [2]*suite
	for i, sd := range []Side{cfg.A, cfg.B} {
		s := &suite{log: log, rep: &Report{}, cfg: Config{
			URL: sd.URL, AdminToken: sd.AdminToken, ServerPID: sd.ServerPID, Fraudd: sd.Fraudd,
			FrauddArgs: cfg.FrauddArgs, Env: cfg.Env, Plan: cfg.Plan, LiveTokens: cfg.LiveTokens,
		}}
		if s.cfg.Plan == "" {
			s.cfg.Plan = "custom"
		}
		suites[i] = s
		defer s.close()
		if err := s.startServer(ctx); err != nil {
			return nil, fmt.Errorf("compare: start %s: %w", sd.Name, err)
		}
	}
	for _, name := range names {
		sc, _ := ScenarioByName(name)
		// The same workload on both sides: set up with the same seed.
		var ws [2]*Workload
		var skip error
		for i, s := range suites {
			env, err := s.env(mrand.New(mrand.NewPCG(rc.Seed, 1)))
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(log, "%s: set-up on %s\n", name, []string{cfg.A.Name, cfg.B.Name}[i])
			if ws[i], err = sc.Setup(env); err != nil {
				skip = err
				break
			}
		}
		if skip != nil {
			if !IsUnavailable(skip) {
				return rep, fmt.Errorf("compare: %s: %w", name, skip)
			}
			rep.Skipped = append(rep.Skipped, Skip{Scenario: name, Reason: skip.Error()})
			continue
		}
		row := CompareRow{Scenario: name}
		for r := range cfg.Rounds {
			for _, i := range roundOrder(r) {
				s := suites[i]
				fmt.Fprintf(log, "%s: round %d, %s\n", name, r+1, []string{cfg.A.Name, cfg.B.Name}[i])
				m, err := s.measure(ctx, name+" "+[]string{cfg.A.Name, cfg.B.Name}[i], s.srvURL, ws[i], rc, s.srvPID)
				if err != nil {
					return rep, fmt.Errorf("compare: %s: %w", name, err)
				}
				if s.fraudd != nil && s.fraudd.Exited() {
					return rep, fmt.Errorf("compare: fraudd exited during the run:\n%s", s.fraudd.Tail())
				}
				br := BuildRow(name, m, nil)
				row.Errors += br.Errors
				cpu := 0.0
				if br.ServerCPU != nil {
					cpu = *br.ServerCPU
				}
				if i == 0 {
					row.CPUA, row.RPSA = append(row.CPUA, cpu), append(row.RPSA, br.RPS)
				} else {
					row.CPUB, row.RPSB = append(row.CPUB, cpu), append(row.RPSB, br.RPS)
				}
				if ctx.Err() != nil {
					return rep, ErrInterrupted
				}
			}
		}
		row.MedCPUA, row.MedCPUB = median(row.CPUA), median(row.CPUB)
		row.MedRPSA, row.MedRPSB = median(row.RPSA), median(row.RPSB)
		if row.MedCPUA > 0 {
			row.RatioCPU = round(row.MedCPUB/row.MedCPUA, 3)
		}
		row.PairedRatioCPU = round(pairedRatio(row.CPUA, row.CPUB), 3)
		rep.Rows = append(rep.Rows, row)
	}
	return rep, nil
}

// pairedRatio is the median of b[r]/a[r] over the rounds where both were
// measured (0 when none was).
func pairedRatio(a, b []float64) float64 {
	var rs []float64
	for r := range min(len(a), len(b)) {
		if a[r] > 0 && b[r] > 0 {
			rs = append(rs, b[r]/a[r])
		}
	}
	return median(rs)
}

// WriteCompare prints the report as a table.
func WriteCompare(w io.Writer, rep *CompareReport) {
	fmt.Fprintf(w, "%s  %s  %d× %s\nA: %s\nB: %s\n%d alternating rounds per scenario (closed loop)\n\n",
		rep.Tool, rep.Date, rep.Machine.NProc, rep.Machine.CPUModel, rep.A, rep.B, rep.Rounds)
	fmt.Fprintf(w, "  %-14s %12s %12s %10s %10s %10s %10s %7s  %s\n", "scenario", "A µs/req", "B µs/req", "B/A", "paired", "A req/s", "B req/s", "errors", "rounds A | B (µs/req)")
	for _, r := range rep.Rows {
		runs := func(xs []float64) string {
			var b strings.Builder
			for i, x := range xs {
				if i > 0 {
					b.WriteByte(' ')
				}
				fmt.Fprintf(&b, "%.1f", x)
			}
			return b.String()
		}
		fmt.Fprintf(w, "  %-14s %12.1f %12.1f %9.3f× %9.3f× %10.0f %10.0f %7d  %s | %s\n", r.Scenario, r.MedCPUA, r.MedCPUB, r.RatioCPU, r.PairedRatioCPU,
			r.MedRPSA, r.MedRPSB, r.Errors, runs(r.CPUA), runs(r.CPUB))
	}
	for _, s := range rep.Skipped {
		fmt.Fprintf(w, "  skipped %s: %s\n", s.Scenario, s.Reason)
	}
	fmt.Fprintf(w, "\nB/A is B's median over A's; paired, the median of each round's B over its A, measured back to back.\nA ratio inside the spread of the rounds is noise: compare A with itself (--compare %s) to see this machine's.\n", rep.A)
}
