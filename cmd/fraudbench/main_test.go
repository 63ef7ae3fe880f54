package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/bench"
)

// The test binary doubles as fraudbench for child processes.
func TestMain(m *testing.M) {
	if os.Getenv("FRAUDBENCH_TEST_MAIN") == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func TestHelp(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"-h"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"Usage:", "floor-server", "--scenario evaluate-live --floor", "-connections", "-json", "-svg", "evaluate-live"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("usage lacks %q", want)
		}
	}
}

func TestList(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"--list"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, s := range bench.Scenarios {
		if !strings.Contains(out.String(), s.Name) {
			t.Errorf("--list lacks %s", s.Name)
		}
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--mode", "open"},
		{"--nope"},
		{"--connections", "0"},
		{"--url", "http://127.0.0.1:1", "--fraudd", "/bin/true"},
		{"extra"},
		// Found before fraudd is built: these return at once.
		{"--scenario", "nope"},
		{"--mode", "sideways"},
		{"--plan", "free"},
		{"--max-error-rate", "5"},
		{"--max-p99", "-1ms"},
		{"--min-rps", "-3"},
		{"--compare", "/bin/true", "--floor"},
		{"--compare", "/bin/true", "--rounds", "0"},
		{"--rounds", "3"}, // neither --floor nor --compare
		{"--floor", "--rounds", "0"},
		{"--floor", "--rounds", "100"},
		{"--floor", "--rounds", "3", "--nodes", "3", "--kill-node-after", "2s"},
		{"--compare", "/bin/true", "--mode", "open", "--rate", "5"},
		{"--compare", "/bin/true", "--url", "http://127.0.0.1:1"},
	} {
		var out, errb bytes.Buffer
		start := time.Now()
		if code := run(args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
		if strings.Contains(errb.String(), "building fraudd") || time.Since(start) > 2*time.Second {
			t.Errorf("%v: a usage error built or ran something first:\n%s", args, errb.String())
		}
	}
}

// TestThresholdFailsLoudly: an overloaded run (every answer takes 3 ms)
// against --max-p99 1ms exits 1 and says which threshold failed, after a
// progress line a second.
func TestThresholdFailsLoudly(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		time.Sleep(3 * time.Millisecond)
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"status":"operational"}`)
	}}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Shutdown()
	var out, errb bytes.Buffer
	code := run([]string{"--url", "http://" + ln.Addr().String(), "--admin-token", "adm", "--scenario", "status",
		"--connections", "2", "--duration", "1500ms", "--warmup", "0", "--max-p99", "1ms", "--max-error-rate", "1%", "--min-rps", "1"}, &out, &errb)
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, out.String(), errb.String())
	}
	e := errb.String()
	if !strings.Contains(e, "fraudbench: threshold failed: status closed: p99 ") || !strings.Contains(e, "exceeds --max-p99 1ms") {
		t.Fatalf("stderr does not name the failed threshold:\n%s", e)
	}
	if strings.Contains(e, "max-error-rate") || strings.Contains(e, "min-rps") {
		t.Fatalf("a passing threshold reported as failed:\n%s", e)
	}
	if !strings.Contains(e, "req/s") || !strings.Contains(e, "p99 ") {
		t.Fatalf("no progress line:\n%s", e)
	}
	if !strings.Contains(out.String(), "threshold failed: status closed: p99") {
		t.Fatalf("table does not name the failed threshold:\n%s", out.String())
	}
}

func TestParse(t *testing.T) {
	o, err := parse([]string{"--scenario", "evaluate-test,lookup", "--floor", "--duration", "3s", "--warmup", "0",
		"--mode", "closed+open", "--fraudd-arg=--edge-block=false", "--json", "x.json"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	c := o.cfg
	if len(c.Scenarios) != 2 || !c.Floor || c.Run.Duration != 3*time.Second || c.Run.Warmup >= 0 ||
		c.Mode != "closed+open" || len(c.FrauddArgs) != 1 || o.jsonPath != "x.json" {
		t.Fatalf("parsed %+v", o)
	}
}

func TestCommandLineQuotes(t *testing.T) {
	if got := commandLine([]string{"--scenario", "a b"}); got != "fraudbench --scenario 'a b'" {
		t.Fatalf("got %s", got)
	}
}

// TestFloorServerChild starts `fraudbench floor-server` as a child process,
// as --floor does, and measures its CPU time and peak RSS from /proc.
func TestFloorServerChild(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "FRAUDBENCH_TEST_MAIN=1")
	p, err := bench.StartProc(context.Background(), "floor", exe,
		[]string{"floor-server", "--addr", "127.0.0.1:0", "--routes", "/v1/evaluate=321", "--default-size", "50"}, env)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	tg, err := bench.NewTarget(p.URL(), bench.TargetOptions{Conns: 2})
	if err != nil {
		t.Fatal(err)
	}
	w := bench.NewWorkload("t", bench.Part{Name: "evaluate", Weight: 1, Fill: func(req *fasthttp.Request, f *bench.Filler) {
		req.Header.SetMethod("POST")
		req.SetRequestURI("/v1/evaluate")
		req.SetBodyString(`{"token":"test_vpn"}`)
	}})
	m, err := bench.Measure(context.Background(), tg, w, bench.RunConfig{Conns: 2, Requests: 2000, Warmup: -1}, p.PID)
	if err != nil {
		t.Fatal(err)
	}
	if m.Result.Requests != 2000 || m.Result.Errors != 0 {
		t.Fatalf("requests %d errors %d %v", m.Result.Requests, m.Result.Errors, m.Result.ErrorsBy)
	}
	if !m.HasCPU || m.ServerRSSKB == 0 || !m.HasClient {
		t.Fatalf("process figures missing: %+v", m)
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if !p.Exited() {
		t.Fatal("floor still running after Stop")
	}
}

func TestRender(t *testing.T) {
	dir := t.TempDir()
	in, out := dir+"/r.json", dir+"/r.svg"
	if err := os.WriteFile(in, []byte(`{"date":"2026-11-22T06:00:00Z","results":[{"scenario":"status","mode":"closed","rps":10,`+
		`"latency_curve":[{"percentile":50,"ms":0.2},{"percentile":99,"ms":1}],"timeline":{"interval_s":0.5,"rps":[10,10],"errors":[0,0]}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var o, e bytes.Buffer
	if code := run([]string{"render", in, out}, &o, &e); code != 0 {
		t.Fatalf("exit %d: %s", code, e.String())
	}
	b, err := os.ReadFile(out)
	if err != nil || !bytes.Contains(b, []byte("<polyline")) {
		t.Fatalf("no chart drawn: %v", err)
	}
	if code := run([]string{"render", in}, &o, &e); code != 2 {
		t.Fatalf("missing argument: exit %d", code)
	}
}

// TestBadFlagValuesNotSilentlyReplaced: values the flags' own help rules
// out are usage errors, not quietly swapped for a default: an open
// fraction of 0 (the help says a fraction in (0, 1]) used to become 0.5,
// and a negative warm-up meant none.
func TestBadFlagValuesNotSilentlyReplaced(t *testing.T) {
	for _, args := range [][]string{
		{"--mode", "closed+open", "--open-fraction", "0"},
		{"--mode", "closed+open", "--open-fraction", "-0.5"},
		{"--warmup", "-1s"},
	} {
		// parse, not run: on a build that accepts them, run would go on
		// to build fraudd and load it.
		if _, err := parse(args, io.Discard); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
}

// TestNonFiniteFlagValues: Go's float flags take NaN and Inf, which pass
// every "< 0" and "> 1" check: --rate NaN or Inf scheduled no request at
// all (the open loop's schedule overflowed) and reported 0 req/s without a
// word, and --max-error-rate NaN was silently no threshold.
func TestNonFiniteFlagValues(t *testing.T) {
	for _, args := range [][]string{
		{"--mode", "open", "--rate", "NaN"},
		{"--mode", "open", "--rate", "Inf"},
		{"--mode", "closed+open", "--open-fraction", "NaN"},
		{"--max-error-rate", "NaN"},
		{"--max-error-rate", "NaN%"},
		{"--min-rps", "NaN"},
	} {
		if _, err := parse(args, io.Discard); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
}
