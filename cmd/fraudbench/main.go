// Command fraudbench load-tests fraudd over HTTP: it starts fraudd (or
// targets --url), sets up each scenario's accounts through the admin API,
// drives the scenario in a closed or open loop, measures the same requests
// against a bare fasthttp floor in the same run (--floor), and reports
// throughput, latency percentiles, the server's CPU time per request and the
// ratios to the floor. `fraudbench floor-server` is that floor.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fraudd/fraudd/bench"
	"github.com/fraudd/fraudd/cluster/embedetcd"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "floor-server" {
		return runFloor(args[1:], stderr)
	}
	if len(args) > 0 && args[0] == "render" {
		return runRender(args[1:], stdout, stderr)
	}
	o, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "fraudbench: %v\n", err)
		return 2
	}
	if o.list {
		for _, s := range bench.Scenarios {
			fmt.Fprintf(stdout, "%-14s %s\n", s.Name, s.Summary)
		}
		return 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	cfg := o.cfg
	cfg.Env = os.Environ()
	cfg.Command = commandLine(args)
	if !o.quiet {
		cfg.Log = stderr
	}
	if cfg.URL == "" && cfg.Fraudd == "" {
		bin, cleanup, err := buildFraudd(stderr)
		if err != nil {
			fmt.Fprintf(stderr, "fraudbench: %v\n", err)
			return 1
		}
		defer cleanup()
		cfg.Fraudd = bin
	}
	if o.compare != "" {
		return runCompare(ctx, o, cfg, stdout, stderr)
	}
	if cfg.Floor {
		exe, err := os.Executable()
		if err != nil {
			fmt.Fprintf(stderr, "fraudbench: %v (floor runs in-process)\n", err)
		} else {
			cfg.FloorCommand = []string{exe, "floor-server"}
		}
	}
	if cfg.Nodes > 1 {
		// The cluster's etcd runs here, so that any node can be killed.
		stopEtcd, err := startEtcd(ctx, &cfg)
		if err != nil {
			fmt.Fprintf(stderr, "fraudbench: etcd: %v\n", err)
			return 1
		}
		defer stopEtcd()
	}
	rep, runErr := bench.RunSuite(ctx, cfg)
	code := 0
	if runErr != nil {
		fmt.Fprintf(stderr, "fraudbench: %v\n", runErr)
		code = 1
	}
	if rep == nil {
		return code
	}
	var failed []bench.ThresholdCheck
	if o.thresholds.Any() {
		failed = o.thresholds.Check(rep)
	}
	fmt.Fprintln(stdout)
	rep.WriteTable(stdout)
	if o.jsonPath != "" {
		if err := writeFile(o.jsonPath, rep.WriteJSON); err != nil {
			fmt.Fprintf(stderr, "fraudbench: %v\n", err)
			code = 1
		} else {
			fmt.Fprintf(stdout, "wrote %s\n", o.jsonPath)
		}
	}
	if o.svgPath != "" {
		err := writeFile(o.svgPath, func(w io.Writer) error { _, err := w.Write(bench.RenderSVG(rep)); return err })
		if err != nil {
			fmt.Fprintf(stderr, "fraudbench: %v\n", err)
			code = 1
		} else {
			fmt.Fprintf(stdout, "wrote %s\n", o.svgPath)
		}
	}
	// Last, on stderr, so a CI log ends with why the run failed.
	for _, c := range failed {
		fmt.Fprintf(stderr, "fraudbench: threshold failed: %s\n", c)
	}
	if len(failed) > 0 {
		code = 1
	}
	return code
}

type options struct {
	cfg        bench.Config
	thresholds bench.Thresholds
	jsonPath   string
	svgPath    string
	quiet      bool
	list       bool
	compare    string
	rounds     int
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

const usageHead = `fraudbench load-tests fraudd over HTTP, with the floor (a bare fasthttp
server answering the same requests with a body of the same size) measured in
the same run.

Usage:
  fraudbench [flags]                  run scenarios (starts fraudd unless --url)
  fraudbench floor-server [flags]     the floor server (fraudbench starts it for --floor)
  fraudbench render IN.json OUT.svg   draw the charts of a saved --json report

Examples:
  go run ./cmd/fraudbench --scenario evaluate-live --floor --duration 20s --json out.json
  go run ./cmd/fraudbench --scenario all --floor --duration 3s --svg out.svg
  go run ./cmd/fraudbench --scenario evaluate-test --floor --mode closed+open
  go run ./cmd/fraudbench --scenario evaluate-test,lookup --floor --rounds 5 --duration 4s
  go run ./cmd/fraudbench --scenario status --mode open --rate 5000
  go run ./cmd/fraudbench --url http://127.0.0.1:8080 --admin-token T --pid 1234 --scenario lookup
  go run ./cmd/fraudbench --fraudd /tmp/fraudd-old --compare /tmp/fraudd-new --rounds 5 --duration 4s --scenario evaluate-test,lookup

Scenarios: %s, all (every one but mixed)

Flags:
`

func parse(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("fraudbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, usageHead, strings.Join(bench.ScenarioNames(), ", "))
		fs.PrintDefaults()
	}
	o := &options{}
	c := &o.cfg
	scenarios := fs.String("scenario", "evaluate-test", "comma-separated scenarios to run, or all (see --list)")
	fs.StringVar(&c.Mode, "mode", "closed", "closed (as fast as answers come), open (fixed --rate, latency from the intended send time), or closed+open (open at --open-fraction of the closed loop's req/s)")
	fs.IntVar(&c.Run.Conns, "connections", 16, "keep-alive connections: closed-loop workers, or the most requests in flight in an open loop")
	fs.Float64Var(&c.Run.Rate, "rate", 0, "open loop arrival rate, requests per second")
	fs.Float64Var(&c.OpenFraction, "open-fraction", 0.5, "closed+open: the open loop's rate as a fraction of the closed loop's req/s")
	fs.DurationVar(&c.Run.Duration, "duration", 5*time.Second, "measured window per run")
	fs.Int64Var(&c.Run.Requests, "requests", 0, "bound each run by this many measured requests instead of --duration")
	warmup := fs.Duration("warmup", time.Second, "warm-up before each measured window (not recorded); 0 for none")
	fs.DurationVar(&c.Run.Timeout, "timeout", 5*time.Second, "per-request timeout")
	seed := fs.Uint64("seed", 1, "seed of the request mix")
	fs.BoolVar(&c.Floor, "floor", false, "also measure the floor server with the same requests, and report the ratios")
	fs.StringVar(&c.Fraudd, "fraudd", "", "fraudd binary to start (default: go build ./cmd/fraudd into a temp dir)")
	var frauddArgs multiFlag
	fs.Var(&frauddArgs, "fraudd-arg", "extra `FLAG` for fraudd serve, e.g. --fraudd-arg=--edge-block=false (repeatable; keep --log-level at info: fraudbench reads the listening line)")
	fs.StringVar(&c.URL, "url", "", "target a running server instead of starting fraudd (loopback unless --allow-remote)")
	fs.StringVar(&c.AdminToken, "admin-token", "", "with --url: the server's admin token (scenarios create their own accounts)")
	fs.IntVar(&c.ServerPID, "pid", 0, "with --url: the server's pid on this machine, to report its CPU time per request and peak RSS")
	fs.BoolVar(&c.AllowRemote, "allow-remote", false, "let --url name a non-loopback host")
	fs.IntVar(&c.Nodes, "nodes", 1, "start a local cluster of this many fraudd nodes (on an etcd member fraudbench runs) and spread the load over them in turn; the report adds per-node figures and round trips to account owners per request")
	fs.DurationVar(&c.LeaseTTL, "lease-ttl", 3*time.Second, "with --nodes: the nodes' --cluster-lease-ttl")
	fs.DurationVar(&c.KillNodeAfter, "kill-node-after", 0, "with --nodes: SIGKILL a node (the one that owns the load's accounts) this long into each measured window (the load stops going to it at once, as a load balancer's would) and report the failover: the others' failed requests and for how long")
	fs.StringVar(&c.Plan, "plan", "custom", "plan of the scenario accounts: custom (null limits) or public_interest")
	fs.IntVar(&c.LiveTokens, "live-tokens", 1000, "evaluate-live: network tokens minted before the run")
	fs.StringVar(&o.jsonPath, "json", "", "write the report as JSON to this file")
	fs.StringVar(&o.svgPath, "svg", "", "write latency and throughput charts as SVG to this file")
	fs.BoolVar(&o.quiet, "quiet", false, "no progress lines on stderr")
	fs.BoolVar(&o.list, "list", false, "list the scenarios and exit")
	fs.StringVar(&o.compare, "compare", "", "a second fraudd `BINARY` to compare with --fraudd's (or the one built): both run side by side, and each scenario alternates closed-loop runs of each for --rounds rounds; the report gives medians and B's CPU per request over A's")
	fs.IntVar(&o.rounds, "rounds", 0, "with --compare: runs per scenario and binary (default 5); with --floor: runs of each per scenario and mode, alternating, the median round reported (default 1)")
	fs.DurationVar(&o.thresholds.MaxP99, "max-p99", 0, "threshold: fail (exit 1) when a server run's p99 latency exceeds this, e.g. 1ms")
	maxErr := fs.String("max-error-rate", "", "threshold: fail (exit 1) when a server run's errors exceed this share of its requests, e.g. 0.01 or 1%")
	fs.Float64Var(&o.thresholds.MinRPS, "min-rps", 0, "threshold: fail (exit 1) when a server run's req/s falls below this")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	c.Scenarios = strings.Split(*scenarios, ",")
	c.FrauddArgs = frauddArgs
	c.Run.Seed = *seed
	if *warmup < 0 {
		return nil, errors.New("--warmup cannot be negative (0 for none)")
	}
	// The library reads a zero fraction as its default; given here, 0 is
	// a mistake.
	if !(c.OpenFraction > 0 && c.OpenFraction <= 1) { // NaN too
		return nil, fmt.Errorf("--open-fraction %v: want a fraction of the closed loop's rate in (0, 1]", c.OpenFraction)
	}
	c.Run.Warmup = *warmup
	if *warmup == 0 {
		c.Run.Warmup = -1 // none
	}
	if c.Run.Conns <= 0 {
		return nil, errors.New("--connections must be > 0")
	}
	if c.Mode == "open" && c.Run.Rate <= 0 {
		return nil, errors.New("--mode open needs --rate")
	}
	if c.URL != "" && c.Fraudd != "" {
		return nil, errors.New("--url and --fraudd exclude each other")
	}
	o.thresholds.MaxErrorRate = bench.NoErrorRate
	if *maxErr != "" {
		r, err := bench.ParseErrorRate(*maxErr)
		if err != nil {
			return nil, fmt.Errorf("--max-error-rate: %v", err)
		}
		o.thresholds.MaxErrorRate = r
	}
	if o.thresholds.MaxP99 < 0 || !(o.thresholds.MinRPS >= 0) || math.IsInf(o.thresholds.MinRPS, 0) {
		return nil, errors.New("--max-p99 and --min-rps cannot be negative")
	}
	roundsSet := false
	fs.Visit(func(f *flag.Flag) { roundsSet = roundsSet || f.Name == "rounds" })
	if roundsSet && (o.rounds < 1 || (o.compare == "" && !c.Floor)) {
		return nil, errors.New("--rounds needs --compare or --floor, and at least 1")
	}
	if o.compare == "" {
		c.FloorRounds = o.rounds
	} else if o.rounds == 0 {
		o.rounds = 5
	}
	if o.compare != "" {
		switch {
		case c.URL != "" || c.Nodes > 1 || c.Floor:
			return nil, errors.New("--compare starts both binaries itself: it excludes --url, --nodes and --floor")
		case c.Mode != "closed":
			return nil, errors.New("--compare measures closed loops only")
		case o.rounds < 1:
			return nil, errors.New("--rounds must be at least 1")
		case o.svgPath != "" || o.thresholds.Any():
			return nil, errors.New("--compare writes a table and --json only: no --svg or thresholds")
		}
	}
	// Everything else that can be wrong with the flags is found now, before
	// fraudd is built or started.
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return o, nil
}

// buildFraudd compiles ./cmd/fraudd of this module into a temp dir.
func buildFraudd(stderr io.Writer) (string, func(), error) {
	dir, err := os.MkdirTemp("", "fraudbench-bin-")
	if err != nil {
		return "", nil, err
	}
	bin := filepath.Join(dir, "fraudd")
	fmt.Fprintf(stderr, "building fraudd (go build -o %s github.com/fraudd/fraudd/cmd/fraudd)\n", bin)
	cmd := exec.Command("go", "build", "-o", bin, "github.com/fraudd/fraudd/cmd/fraudd")
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Run(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("build fraudd (run fraudbench inside the repository, or pass --fraudd): %w", err)
	}
	return bin, func() { os.RemoveAll(dir) }, nil
}

func commandLine(args []string) string {
	parts := []string{"fraudbench"}
	for _, a := range args {
		if strings.ContainsAny(a, " \t\"'$") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// runRender is `fraudbench render IN.json OUT.svg`.
func runRender(args []string, stdout, stderr io.Writer) int {
	if len(args) != 2 {
		fmt.Fprintln(stderr, "usage: fraudbench render IN.json OUT.svg")
		return 2
	}
	b, err := os.ReadFile(args[0])
	if err != nil {
		fmt.Fprintf(stderr, "fraudbench render: %v\n", err)
		return 1
	}
	var rep bench.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		fmt.Fprintf(stderr, "fraudbench render: %s: %v\n", args[0], err)
		return 1
	}
	if err := os.WriteFile(args[1], bench.RenderSVG(&rep), 0o644); err != nil {
		fmt.Fprintf(stderr, "fraudbench render: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %s\n", args[1])
	return 0
}

// runFloor is `fraudbench floor-server`: the floor as its own process, so
// that its CPU time is measured apart from the load generator's.
func runFloor(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("fraudbench floor-server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	routes := fs.String("routes", "", "body size per path prefix: PREFIX=SIZE,PREFIX=SIZE (longest prefix wins)")
	def := fs.Int("default-size", 1024, "body size for paths no route matches")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	rs, err := bench.ParseFloorRoutes(*routes)
	if err != nil {
		fmt.Fprintf(stderr, "floor-server: %v\n", err)
		return 2
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintf(stderr, "floor-server: %v\n", err)
		return 1
	}
	srv := bench.NewFloorServer(rs, *def)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		_ = srv.Shutdown()
	}()
	fmt.Fprintf(stderr, "level=INFO msg=\"floor listening\" addr=%s routes=%q\n", ln.Addr(), *routes)
	if err := srv.Serve(ln); err != nil {
		fmt.Fprintf(stderr, "floor-server: %v\n", err)
		return 1
	}
	return 0
}

// startEtcd starts an etcd member in this process (temp dir, loopback
// ports) for a --nodes cluster and sets its endpoints in cfg.
func startEtcd(ctx context.Context, cfg *bench.Config) (stop func(), err error) {
	dir, err := os.MkdirTemp("", "fraudbench-etcd-")
	if err != nil {
		return nil, err
	}
	// A 10 ms tick lets etcd keep leases as short as --lease-ttl gives (it
	// raises any lease below 1.5 election timeouts).
	srv, err := embedetcd.Start(ctx, embedetcd.Config{Dir: dir, Tick: 10 * time.Millisecond, Election: 100 * time.Millisecond})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cfg.EtcdEndpoints = srv.Endpoints()
	return func() { srv.Close(); os.RemoveAll(dir) }, nil
}

// runCompare runs --compare: cfg.Fraudd as A, the --compare binary as B.
func runCompare(ctx context.Context, o *options, cfg bench.Config, stdout, stderr io.Writer) int {
	rep, err := bench.Compare(ctx, bench.CompareConfig{
		Scenarios: cfg.Scenarios,
		A:         bench.Side{Name: cfg.Fraudd, Fraudd: cfg.Fraudd},
		B:         bench.Side{Name: o.compare, Fraudd: o.compare},
		Rounds:    o.rounds, Run: cfg.Run, FrauddArgs: cfg.FrauddArgs, Env: cfg.Env,
		Plan: cfg.Plan, LiveTokens: cfg.LiveTokens, Log: cfg.Log, Command: cfg.Command,
	})
	code := 0
	if err != nil {
		fmt.Fprintf(stderr, "fraudbench: %v\n", err)
		code = 1
	}
	if rep == nil {
		return code
	}
	fmt.Fprintln(stdout)
	bench.WriteCompare(stdout, rep)
	if o.jsonPath != "" {
		err := writeFile(o.jsonPath, func(w io.Writer) error {
			e := json.NewEncoder(w)
			e.SetIndent("", "  ")
			return e.Encode(rep)
		})
		if err != nil {
			fmt.Fprintf(stderr, "fraudbench: %v\n", err)
			code = 1
		} else {
			fmt.Fprintf(stdout, "wrote %s\n", o.jsonPath)
		}
	}
	return code
}
