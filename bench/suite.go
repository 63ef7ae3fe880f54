package bench

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Config is one fraudbench run: which scenarios, how to drive them, and
// which server. cmd/fraudbench fills it from flags.
type Config struct {
	// Scenarios to run, by name; "all" is every scenario but mixed, in order.
	Scenarios []string
	// Mode is "closed", "open" or "closed+open" (a closed loop to find the
	// most the server does, then an open loop at OpenFraction of that rate).
	Mode string
	// OpenFraction of the closed loop's req/s is the closed+open mode's
	// open-loop rate. Default 0.5.
	OpenFraction float64
	// Run is the driver configuration every run uses (Mode and Rate are set
	// per run from Mode above; Run.Rate is the open mode's rate).
	Run RunConfig

	// URL targets a running server instead of starting fraudd.
	URL string
	// AdminToken is the running server's operator token (scenarios create
	// their accounts with it).
	AdminToken string
	// ServerPID, with URL, is the running server's pid on this machine, to
	// read its CPU time and peak RSS from /proc.
	ServerPID int
	// AllowRemote lets URL name another machine.
	AllowRemote bool

	// Fraudd is the fraudd binary to start when URL is empty.
	Fraudd string
	// FrauddArgs are extra `fraudd serve` flags.
	FrauddArgs []string
	// Env is the environment of the processes fraudbench starts (FRAUDD_*
	// variables are dropped so that only the flags configure fraudd).
	Env []string

	// Floor also measures the floor server, with the same requests, before
	// each scenario run.
	Floor bool
	// FloorRounds > 1 measures each run that many times, the floor and
	// fraudd alternating (the floor first in even rounds, fraudd first in
	// odd ones), and reports the round whose CPU ratio is the median, with
	// every round's figures in the row (Row.FloorRounds): one pair of runs
	// on a shared VM moves by ±15%, the median of paired rounds much less.
	FloorRounds int
	// FloorCommand starts the floor as a child process (argv; fraudbench
	// appends --addr, --routes and --default-size), so its CPU time is its
	// own. Empty: an in-process floor whose CPU cannot be told apart.
	FloorCommand []string

	// Nodes > 1 starts a local cluster of that many fraudd nodes instead
	// of one (cluster.go); LeaseTTL is their --cluster-lease-ttl (3 s when
	// zero), and KillNodeAfter, when > 0, kills the last node that long
	// into each measured window.
	Nodes         int
	LeaseTTL      time.Duration
	KillNodeAfter time.Duration
	// EtcdEndpoints are the etcd the nodes use (cmd/fraudbench starts one
	// in its process); empty: node 1 runs an embedded etcd member, and is
	// never the one killed.
	EtcdEndpoints []string

	// Plan of the accounts scenarios create: "custom" or "public_interest".
	Plan string
	// LiveTokens is how many network tokens evaluate-live mints.
	LiveTokens int
	// Log receives progress lines; nil discards them.
	Log io.Writer
	// Command is the command line, recorded in the report.
	Command string
}

// Validate checks the configuration without starting or building anything,
// so a usage error is reported before any work.
func (c *Config) Validate() error {
	if _, err := expandScenarios(c.Scenarios); err != nil {
		return err
	}
	if _, err := parseModes(c.Mode, c.Run.Rate); err != nil {
		return err
	}
	if c.Plan != "" && c.Plan != "custom" && c.Plan != "public_interest" {
		return fmt.Errorf("plan %q: want custom or public_interest (plans that throttle would measure the limiter)", c.Plan)
	}
	if !(c.OpenFraction >= 0 && c.OpenFraction <= 1) { // NaN too
		return fmt.Errorf("open fraction %v: want a fraction of the closed loop's rate in (0, 1]", c.OpenFraction)
	}
	// Float flags take NaN and Inf, which pass every comparison above and
	// give the open loop a schedule that overflows: no request at all.
	if math.IsNaN(c.Run.Rate) || math.IsInf(c.Run.Rate, 0) {
		return fmt.Errorf("rate %v: want a finite number of requests per second", c.Run.Rate)
	}
	if c.Run.Conns < 0 || c.Run.Duration < 0 || c.Run.Requests < 0 || c.Run.Timeout < 0 {
		return errors.New("connections, duration, requests and timeout cannot be negative")
	}
	if c.URL != "" && c.Fraudd != "" {
		return errors.New("a URL and a fraudd binary exclude each other")
	}
	if c.Nodes < 0 || c.Nodes > 9 {
		return fmt.Errorf("nodes %d: want 1 to 9 local nodes", c.Nodes)
	}
	if c.Nodes > 1 && c.URL != "" {
		return errors.New("--nodes starts a local cluster: it excludes --url")
	}
	if c.KillNodeAfter < 0 || (c.KillNodeAfter > 0 && c.Nodes < 2) {
		return errors.New("--kill-node-after needs --nodes 2 or more")
	}
	if c.FloorRounds < 0 || c.FloorRounds > 99 || (c.FloorRounds > 1 && !c.Floor) {
		return fmt.Errorf("floor rounds %d: 1 to 99, and only with the floor", c.FloorRounds)
	}
	if c.FloorRounds > 1 && c.KillNodeAfter > 0 {
		return errors.New("--kill-node-after kills a node in each run: one round only")
	}
	if c.LeaseTTL != 0 && (c.LeaseTTL < time.Second || c.LeaseTTL%time.Second != 0) {
		return fmt.Errorf("lease TTL %v: whole seconds, at least 1s", c.LeaseTTL)
	}
	return nil
}

// ErrInterrupted is RunSuite's error when ctx ended before every scenario
// ran its full window; the report marks what was cut short.
var ErrInterrupted = errors.New("interrupted")

// ErrSetup is wrapped by RunSuite's error when some scenario failed for a
// reason other than a missing endpoint (the report still has the others).
var ErrSetup = errors.New("scenario failed")

// suite is one RunSuite call's state.
type suite struct {
	cfg     Config
	log     io.Writer
	fraudd  *Proc
	srvURL  string
	srvPID  int
	admin   *Admin
	rep     *Report
	failed  []string
	cleanup []func()
	// nodes of a local cluster (Config.Nodes > 1).
	nodes []clusterNode
}

// env is what scenario set-ups use against the started server: a target,
// the admin API (accounts get a fresh tag) and rnd for the request mix.
func (s *suite) env(rnd *mrand.Rand) (*Env, error) {
	t, err := NewTarget(s.srvURL, TargetOptions{Conns: 4, AllowRemote: s.cfg.AllowRemote})
	if err != nil {
		return nil, err
	}
	s.admin = &Admin{Target: t, Token: s.cfg.AdminToken, Tag: randomHex(4)}
	return &Env{Target: t, Admin: s.admin, Plan: s.cfg.Plan, Log: s.log, Rand: rnd, LiveTokens: s.cfg.LiveTokens}, nil
}

// close undoes what the suite started, last first.
func (s *suite) close() {
	for i := len(s.cleanup) - 1; i >= 0; i-- {
		s.cleanup[i]()
	}
}

func (s *suite) logf(format string, args ...any) {
	fmt.Fprintf(s.log, format+"\n", args...)
}

// RunSuite runs every configured scenario and returns the report. The error
// is non-nil when a scenario failed (not merely skipped) or when nothing
// could run; the report has whatever was measured.
func RunSuite(ctx context.Context, cfg Config) (*Report, error) {
	s := &suite{cfg: cfg, log: cfg.Log}
	if s.log == nil {
		s.log = io.Discard
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	defer s.close()
	names, err := expandScenarios(cfg.Scenarios)
	if err != nil {
		return nil, err
	}
	modes, err := parseModes(cfg.Mode, cfg.Run.Rate)
	if err != nil {
		return nil, err
	}
	if cfg.OpenFraction <= 0 {
		s.cfg.OpenFraction = 0.5
	}
	if cfg.Plan == "" {
		s.cfg.Plan = "custom"
	}
	if s.cfg.Plan != "custom" && s.cfg.Plan != "public_interest" {
		return nil, fmt.Errorf("plan %q: want custom or public_interest (plans that throttle would measure the limiter)", s.cfg.Plan)
	}
	rc := cfg.Run
	rc.defaults()
	s.rep = &Report{
		Tool:    UserAgent,
		Date:    time.Now().UTC().Format(time.RFC3339),
		Machine: ThisMachine(),
		Command: cfg.Command,
		Results: []Row{},
		Skipped: []Skip{},
		Config: ReportRunConfig{
			Connections: rc.Conns, DurationS: rc.Duration.Seconds(), Requests: cfg.Run.Requests,
			WarmupS: rc.warmup().Seconds(), Plan: s.cfg.Plan, Floor: cfg.Floor,
		},
	}
	if err := s.startServer(ctx); err != nil {
		return s.rep, err
	}
	env, err := s.env(mrand.New(mrand.NewPCG(rc.Seed, uint64(time.Now().UnixNano()))))
	if err != nil {
		return s.rep, err
	}
	for _, name := range names {
		if ctx.Err() != nil {
			s.rep.Interrupted = true
			s.rep.Skipped = append(s.rep.Skipped, Skip{Scenario: name, Reason: "interrupted before it ran"})
			continue
		}
		if err := s.scenario(ctx, name, env, modes, rc); err != nil {
			s.failed = append(s.failed, name)
			s.rep.Skipped = append(s.rep.Skipped, Skip{Scenario: name, Reason: "failed: " + err.Error()})
			s.logf("%s: FAILED: %v", name, err)
		}
	}
	if len(s.failed) > 0 {
		return s.rep, fmt.Errorf("%w: %s", ErrSetup, strings.Join(s.failed, ", "))
	}
	if ctx.Err() != nil {
		s.rep.Interrupted = true
		return s.rep, ErrInterrupted
	}
	if len(s.rep.Results) == 0 {
		return s.rep, errors.New("no scenario could run")
	}
	return s.rep, nil
}

func expandScenarios(names []string) ([]string, error) {
	var out []string
	for _, n := range names {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if n == "all" {
			for _, sc := range Scenarios {
				if sc.Name != "mixed" {
					out = append(out, sc.Name)
				}
			}
			continue
		}
		if _, ok := ScenarioByName(n); !ok {
			return nil, fmt.Errorf("unknown scenario %q (have: %s, all)", n, strings.Join(ScenarioNames(), ", "))
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("no scenario given")
	}
	return out, nil
}

func parseModes(mode string, rate float64) ([]Mode, error) {
	switch mode {
	case "", "closed":
		return []Mode{Closed}, nil
	case "open":
		if rate <= 0 {
			return nil, errors.New("open mode needs a rate (req/s)")
		}
		return []Mode{Open}, nil
	case "closed+open":
		return []Mode{Closed, Open}, nil
	}
	return nil, fmt.Errorf("mode %q: want closed, open or closed+open", mode)
}

// startServer starts fraudd (or checks the --url server) and waits until it
// answers /api/status.
func (s *suite) startServer(ctx context.Context) error {
	if s.cfg.Nodes > 1 {
		if s.cfg.LeaseTTL == 0 {
			s.cfg.LeaseTTL = 3 * time.Second
		}
		return s.startCluster(ctx)
	}
	if s.cfg.URL != "" {
		s.srvURL = strings.TrimRight(s.cfg.URL, "/")
		s.srvPID = s.cfg.ServerPID
		s.rep.Target = s.srvURL
		if s.srvPID > 0 {
			s.rep.Target += " (pid " + strconv.Itoa(s.srvPID) + ")"
		}
		if s.cfg.AdminToken == "" {
			return errors.New("a --url server needs its admin token: scenarios create their own accounts")
		}
		return s.waitReady(ctx, s.srvURL)
	}
	if s.cfg.Fraudd == "" {
		return errors.New("no fraudd binary to start and no URL to target")
	}
	dir, err := os.MkdirTemp("", "fraudbench-data-")
	if err != nil {
		return err
	}
	s.cleanup = append(s.cleanup, func() { os.RemoveAll(dir) })
	s.cfg.AdminToken = "bench_" + randomHex(16)
	args := append([]string{"serve", "--addr", "127.0.0.1:0", "--data-dir", dir,
		"--admin-token", s.cfg.AdminToken, "--trusted-proxies", "127.0.0.0/8", "--log-level", "info"},
		s.cfg.FrauddArgs...)
	s.logf("starting %s %s", s.cfg.Fraudd, strings.Join(redact(args, s.cfg.AdminToken), " "))
	p, err := StartProc(ctx, "fraudd", s.cfg.Fraudd, args, childEnv(s.cfg.Env))
	if err != nil {
		return err
	}
	s.fraudd = p
	s.cleanup = append(s.cleanup, func() {
		if err := p.Stop(); err != nil {
			s.logf("%v", err)
		}
	})
	s.srvURL, s.srvPID = p.URL(), p.PID
	s.rep.Target = fmt.Sprintf("fraudd started by fraudbench (%s, pid %d, temp data dir, --trusted-proxies 127.0.0.0/8)", s.cfg.Fraudd, p.PID)
	return s.waitReady(ctx, s.srvURL)
}

func redact(args []string, secret string) []string {
	out := append([]string(nil), args...)
	for i, a := range out {
		if a == secret {
			out[i] = "…"
		}
	}
	return out
}

// childEnv is env without FRAUDD_* variables.
func childEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "FRAUDD_") {
			out = append(out, kv)
		}
	}
	return out
}

func (s *suite) waitReady(ctx context.Context, url string) error {
	t, err := NewTarget(url, TargetOptions{AllowRemote: s.cfg.AllowRemote, Timeout: 2 * time.Second})
	if err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for time.Now().Before(deadline) && ctx.Err() == nil {
		status, body, err := call(t, "GET", "/api/status", nil, nil)
		if err == nil && status == 200 {
			return nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("HTTP %d %s", status, snippet(body))
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s/api/status not ready: %s", url, last)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// scenario sets up one scenario and runs it in every mode, each run after
// its floor run.
func (s *suite) scenario(ctx context.Context, name string, env *Env, modes []Mode, rc RunConfig) error {
	sc, _ := ScenarioByName(name)
	s.logf("%s: set-up", name)
	w, err := sc.Setup(env)
	if IsUnavailable(err) {
		s.logf("%s: skipped: %v", name, err)
		s.rep.Skipped = append(s.rep.Skipped, Skip{Scenario: name, Reason: err.Error()})
		return nil
	}
	if err != nil {
		return err
	}
	for _, n := range w.Notes {
		s.logf("%s: %s", name, n)
	}
	var floorURL string
	var floorPID int
	var notes []string
	if s.cfg.Floor {
		routes := w.FloorSizes()
		var stop func()
		floorURL, floorPID, stop, err = s.startFloor(ctx, routes)
		if err != nil {
			return fmt.Errorf("floor: %w", err)
		}
		defer stop()
		if floorPID == 0 {
			notes = append(notes, "in-process floor: its CPU is not measured apart from fraudbench's")
		}
		notes = append(notes, "floor answers "+FormatFloorRoutes(routes)+" (body bytes by path)")
	}
	var closedRPS float64
	for _, mode := range modes {
		run := rc
		run.Mode = mode
		if mode == Open && len(modes) > 1 {
			run.Rate = math.Max(1, math.Round(closedRPS*s.cfg.OpenFraction))
		}
		rounds := max(1, s.cfg.FloorRounds)
		if floorURL == "" {
			rounds = 1
		}
		var pairs []floorPair
		for r := range rounds {
			var p floorPair
			for _, side := range roundOrder(r) {
				if ctx.Err() != nil {
					break // interrupted during the other side's run
				}
				if side == 0 && floorURL != "" {
					s.logf("%s: %s", name, describe(run, "floor"))
					fm, err := s.measure(ctx, name+" floor", floorURL, w, run, floorPID)
					if err != nil {
						return fmt.Errorf("floor run: %w", err)
					}
					p.floor = &fm
					s.logf("%s:   floor %.0f req/s, %d errors", name, fm.Result.RPS(), fm.Result.Errors)
				}
				if side == 1 {
					s.logf("%s: %s", name, describe(run, "server"))
					if p.server, p.cluster, err = s.measureServer(ctx, name, w, run); err != nil {
						return err
					}
					p.ran = true
				}
			}
			if !p.ran {
				break
			}
			pairs = append(pairs, p)
			if p.interrupted() {
				break
			}
		}
		if len(pairs) == 0 {
			break // interrupted before fraudd's first run
		}
		mid, measured := medianPair(pairs)
		m := pairs[mid].server
		if mode == Closed {
			// The open loop's rate comes from the round reported.
			closedRPS = m.Result.RPS()
		}
		row := BuildRow(name, m, pairs[mid].floor)
		row.Cluster = pairs[mid].cluster
		if len(pairs) > 1 {
			row.FloorRounds = roundRows(pairs)
			switch {
			case measured:
				row.Notes = append(row.Notes, fmt.Sprintf("%d rounds alternating with the floor; the figures are round %d's, whose CPU ratio is the median", len(pairs), mid+1))
			default:
				row.Notes = append(row.Notes, fmt.Sprintf("%d rounds alternating with the floor; no round's CPU ratio was measured, so the figures are round 1's", len(pairs)))
			}
		}
		last := pairs[len(pairs)-1]
		if last.interrupted() {
			row.Interrupted = true // the last round was cut short
		}
		row.Notes = append(append(row.Notes, w.Notes...), notes...)
		if why := Explain429(m.Result, s.cfg.URL != ""); why != "" {
			s.logf("%s: %s", name, why)
			row.Notes = append(row.Notes, why)
		}
		s.rep.Results = append(s.rep.Results, row)
		if row.Interrupted {
			s.rep.Interrupted = true
			cut := last.server.Result
			if last.floor != nil && last.floor.Result.Interrupted {
				cut = last.floor.Result
			}
			s.logf("%s: interrupted after %.1fs of its window", name, cut.Window.Seconds())
			break
		}
	}
	return nil
}

// floorPair is one round of a run: fraudd's measurement and the floor's.
type floorPair struct {
	server  Measured
	cluster *ClusterRow
	floor   *Measured
	ran     bool // fraudd's run happened (not interrupted before it)
}

// interrupted reports whether either run of the round was cut short.
func (p floorPair) interrupted() bool {
	return p.server.Result.Interrupted || (p.floor != nil && p.floor.Result.Interrupted)
}

// measureServer measures one run of fraudd (or the local cluster).
func (s *suite) measureServer(ctx context.Context, name string, w *Workload, run RunConfig) (Measured, *ClusterRow, error) {
	var m Measured
	var cr *ClusterRow
	var err error
	if s.nodes != nil {
		m, cr, err = s.measureCluster(ctx, name, w, run)
	} else {
		m, err = s.measure(ctx, name, s.srvURL, w, run, s.srvPID)
	}
	if err != nil {
		return m, nil, err
	}
	if s.fraudd != nil && s.fraudd.Exited() {
		return m, nil, fmt.Errorf("fraudd exited during the run:\n%s", s.fraudd.Tail())
	}
	s.logf("%s:   server %.0f req/s, %d errors", name, m.Result.RPS(), m.Result.Errors)
	return m, cr, nil
}

// pairRatio is a round's server CPU per request over the floor's (0 when
// either was not measured).
func pairRatio(p floorPair) float64 {
	if p.floor == nil || !p.server.HasCPU || !p.floor.HasCPU || p.server.Result.Requests == 0 || p.floor.Result.Requests == 0 {
		return 0
	}
	f := p.floor.ServerCPU.Seconds() / float64(p.floor.Result.Requests)
	if f == 0 {
		return 0
	}
	return p.server.ServerCPU.Seconds() / float64(p.server.Result.Requests) / f
}

// medianPair is the index of the round whose CPU ratio is the median among
// the complete rounds that have one (the lower middle one for an even
// count), and true; the first round and false when none has one.
func medianPair(pairs []floorPair) (int, bool) {
	var idx []int
	for i, p := range pairs {
		if pairRatio(p) > 0 && !p.interrupted() {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return 0, false
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(pairRatio(pairs[a]), pairRatio(pairs[b])) })
	return idx[(len(idx)-1)/2], true
}

// roundRows are every round's figures, in the order they ran.
func roundRows(pairs []floorPair) []FloorRound {
	out := make([]FloorRound, len(pairs))
	for i, p := range pairs {
		row := BuildRow("", p.server, p.floor)
		out[i] = FloorRound{RPS: row.RPS, P99: row.P99, ServerCPU: row.ServerCPU, FloorRPS: row.FloorRPS, FloorP99: row.FloorP99, FloorServerCPU: row.FloorServerCPU, RatioCPU: row.RatioCPU,
			Interrupted: p.interrupted()}
	}
	return out
}

// Explain429 says why most answers of a run were 429, or "" when they were
// not: a per-address limit (the usual cause: the target does not believe the
// X-Forwarded-For addresses fraudbench spreads its requests over), an
// account's hourly cap, or its monthly allowance.
func Explain429(r *Result, external bool) string {
	n429 := r.ErrorsBy["429"]
	if r.Requests == 0 || n429*2 <= r.Requests {
		return ""
	}
	share := fmt.Sprintf("%d of %d answers (%.0f%%) were 429", n429, r.Requests, 100*float64(n429)/float64(r.Requests))
	return share + ": " + cause429(r.First429, external)
}

// cause429 names the likely cause of a 429 answer.
func cause429(ref *Refusal, external bool) string {
	switch {
	case ref != nil && strings.Contains(string(ref.Body), "monthly_quota_exceeded"):
		return "the scenario account's monthly allowance ran out; run with --plan public_interest, or give the account a custom plan with null limits"
	case ref != nil && ref.RateLimited:
		return "the scenario account's hourly cap refused them (the answers carry X-RateLimit-*); run with --plan public_interest or custom with null limits"
	case external:
		return "a per-address limit refused them, so the target counts every request as one caller; start it with --trusted-proxies covering this machine (e.g. --trusted-proxies 127.0.0.0/8) so that the X-Forwarded-For addresses fraudbench sends are believed"
	default:
		return "a per-address limit refused them although fraudbench started fraudd with --trusted-proxies 127.0.0.0/8; check the --fraudd-arg flags"
	}
}

func describe(rc RunConfig, who string) string {
	what := fmt.Sprintf("closed loop, %d conns", rc.Conns)
	if rc.Mode == Open {
		what = fmt.Sprintf("open loop at %.0f req/s, up to %d in flight", rc.Rate, rc.Conns)
	}
	bound := rc.Duration.String()
	if rc.Requests > 0 {
		bound = fmt.Sprintf("%d requests", rc.Requests)
	}
	return fmt.Sprintf("%s, %s measured (+%v warm-up) against the %s", what, bound, rc.warmup(), who)
}

// startFloor starts the floor server for routes: a child process when
// FloorCommand is set, else in-process (pid 0). stop ends it.
func (s *suite) startFloor(ctx context.Context, routes []FloorRoute) (url string, pid int, stop func(), err error) {
	def := 0
	for _, r := range routes {
		def = max(def, r.Size)
	}
	if len(s.cfg.FloorCommand) > 0 {
		args := append(append([]string(nil), s.cfg.FloorCommand[1:]...),
			"--addr", "127.0.0.1:0", "--routes", FormatFloorRoutes(routes), "--default-size", strconv.Itoa(def))
		p, err := StartProc(ctx, "floor", s.cfg.FloorCommand[0], args, childEnv(s.cfg.Env))
		if err != nil {
			return "", 0, nil, err
		}
		stop := func() { _ = p.Stop() }
		if err := s.waitFloor(ctx, p.URL()); err != nil {
			stop()
			return "", 0, nil, err
		}
		return p.URL(), p.PID, stop, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", 0, nil, err
	}
	srv := NewFloorServer(routes, def)
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), 0, func() { _ = srv.Shutdown() }, nil
}

func (s *suite) waitFloor(ctx context.Context, url string) error {
	t, err := NewTarget(url, TargetOptions{Timeout: 2 * time.Second})
	if err != nil {
		return err
	}
	for i := 0; i < 100 && ctx.Err() == nil; i++ {
		if status, _, err := call(t, "GET", "/", nil, nil); err == nil && status == 200 {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("floor server not answering")
}

// measure runs w against url, sampling pid's CPU (pid > 0) and this
// process's around the measured window, with a progress line a second.
func (s *suite) measure(ctx context.Context, label, url string, w *Workload, rc RunConfig, pid int) (Measured, error) {
	t, err := NewTarget(url, TargetOptions{Conns: rc.Conns, Timeout: rc.Timeout, AllowRemote: s.cfg.AllowRemote})
	if err != nil {
		return Measured{}, err
	}
	rc.Progress = func(p Progress) { s.logf("%s", FormatProgress(label, p)) }
	defer t.CloseIdle()
	return Measure(ctx, t, w, rc, pid)
}

// Measure runs w against t and samples the CPU time of pid (when > 0) and of
// this process over the measured window.
func Measure(ctx context.Context, t *Target, w *Workload, rc RunConfig, pid int) (Measured, error) {
	srv := &CPUWatch{PID: pid}
	self := &CPUWatch{}
	rc.OnMeasureStart = func() {
		if pid > 0 {
			srv.Start()
		}
		self.Start()
	}
	rc.OnMeasureEnd = func() {
		self.End()
		if pid > 0 {
			srv.End()
		}
	}
	res, err := Run(ctx, t, w, rc)
	if err != nil {
		return Measured{}, err
	}
	m := Measured{Result: res}
	if pid > 0 {
		if cpu, err := srv.CPU(); err == nil {
			m.ServerCPU, m.HasCPU, m.ServerRSSKB = cpu, true, srv.PeakRSSKB()
		}
	}
	if cpu, err := self.CPU(); err == nil {
		m.ClientCPU, m.HasClient = cpu, true
	}
	return m, nil
}

// FormatProgress is the once-a-second line: elapsed time, req/s, errors and
// p99 of the measured window so far.
func FormatProgress(label string, p Progress) string {
	if !p.Measuring {
		return fmt.Sprintf("%s: %4.0fs  warm-up", label, p.Elapsed.Seconds())
	}
	rate := 0.0
	if p.Requests > 0 {
		rate = 100 * float64(p.Errors) / float64(p.Requests)
	}
	return fmt.Sprintf("%s: %4.0fs  %8.0f req/s  errors %d (%.2f%%)  p99 %s",
		label, p.Elapsed.Seconds(), p.RPS, p.Errors, rate, p.P99.Round(time.Microsecond))
}
