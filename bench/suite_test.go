package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// fakeFraudd answers like fraudd for status, account creation, collect and
// evaluate, and 404 for everything else (the endpoints not built yet).
type fakeFraudd struct {
	accounts  atomic.Int64
	noXFF     atomic.Int64
	badAuth   atomic.Int64
	evaluates atomic.Int64
}

func (f *fakeFraudd) handle(ctx *fasthttp.RequestCtx) {
	path, method := string(ctx.Path()), string(ctx.Method())
	ctx.SetContentType("application/json")
	switch {
	case method == "GET" && path == "/api/status":
		ctx.SetBodyString(`{"status":"operational","version":"test"}`)
	case method == "POST" && path == "/admin/v1/accounts":
		if string(ctx.Request.Header.Peek("Authorization")) != "Bearer adm" {
			ctx.SetStatusCode(401)
			return
		}
		var body map[string]any
		_ = json.Unmarshal(ctx.PostBody(), &body)
		if v, ok := body["hourly_limit"]; body["plan"] == "custom" && (!ok || v != nil) {
			ctx.SetStatusCode(400)
			return
		}
		f.accounts.Add(1)
		ctx.SetStatusCode(201)
		b, _ := json.Marshal(map[string]any{"id": "acc_1", "email": body["email"], "plan": body["plan"],
			"live_key": "sk_live_x", "test_key": "sk_test_x", "publishable_key": "pk_live_x"})
		ctx.SetBody(b)
	case method == "POST" && path == "/v1/collect/network":
		xff := string(ctx.Request.Header.Peek("X-Forwarded-For"))
		if _, err := netip.ParseAddr(xff); err != nil || string(ctx.Request.Header.Peek("X-Publishable-Key")) != "pk_live_x" {
			ctx.SetStatusCode(400)
			return
		}
		ctx.SetBodyString(`{"token":"nt_` + xff + `","expires_in":300}`)
	case method == "POST" && path == "/v1/evaluate":
		if string(ctx.Request.Header.Peek("Authorization")) != "Bearer sk_live_x" {
			f.badAuth.Add(1)
		}
		if _, err := netip.ParseAddr(string(ctx.Request.Header.Peek("X-Forwarded-For"))); err != nil {
			f.noXFF.Add(1)
		}
		f.evaluates.Add(1)
		var body map[string]any
		if json.Unmarshal(ctx.PostBody(), &body) != nil || body["token"] == nil {
			ctx.SetStatusCode(400)
			return
		}
		ctx.SetBodyString(`{"status":"success","decision":"allow","risk_score":0,"reasons":[]}`)
	default:
		ctx.SetStatusCode(404)
		ctx.SetBodyString(`{"error":"Not found."}`)
	}
}

func TestRunSuiteAgainstAFakeServer(t *testing.T) {
	f := &fakeFraudd{}
	url := testServer(t, f.handle)
	var log bytes.Buffer
	rep, err := RunSuite(context.Background(), Config{
		Scenarios:  []string{"status", "evaluate-test", "evaluate-live", "mcp", "mixed"},
		Run:        RunConfig{Conns: 2, Duration: 150 * time.Millisecond, Warmup: -1},
		URL:        url,
		AdminToken: "adm",
		ServerPID:  os.Getpid(), // the fake runs in this process
		Floor:      true,        // in-process floor
		LiveTokens: 20,
		Log:        &log,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	var got []string
	for _, r := range rep.Results {
		got = append(got, r.Scenario)
		if r.Requests == 0 || r.Errors != 0 {
			t.Errorf("%s: %d requests, %d errors %v", r.Scenario, r.Requests, r.Errors, r.ErrorsByStatus)
		}
		if r.FloorRPS == nil || r.RatioRPS == nil || r.ServerCPU == nil {
			t.Errorf("%s: floor or CPU figures missing", r.Scenario)
		}
	}
	if strings.Join(got, ",") != "status,evaluate-test,evaluate-live,mixed" {
		t.Fatalf("ran %v", got)
	}
	if len(rep.Skipped) != 1 || rep.Skipped[0].Scenario != "mcp" || !strings.HasPrefix(rep.Skipped[0].Reason, "endpoint not available (404)") {
		t.Fatalf("skipped %+v", rep.Skipped)
	}
	mixed := rep.Results[3]
	var parts []string
	for _, p := range mixed.Parts {
		parts = append(parts, p.Name)
	}
	if strings.Join(parts, ",") != "evaluate-live,evaluate-test,status" {
		t.Fatalf("mixed parts %v", parts)
	}
	dropped := strings.Join(mixed.Notes, "\n")
	for _, name := range []string{"lookup", "usage", "free-lookup", "oauth", "mcp"} {
		if !strings.Contains(dropped, name+" dropped from the mix") {
			t.Errorf("mixed notes do not say %s was dropped:\n%s", name, dropped)
		}
	}
	if f.noXFF.Load() != 0 || f.badAuth.Load() != 0 {
		t.Fatalf("%d evaluates without X-Forwarded-For, %d with the wrong key", f.noXFF.Load(), f.badAuth.Load())
	}
	// evaluate-test, evaluate-live, mcp, and six more in mixed (status and
	// free-lookup need none).
	if f.accounts.Load() != 9 {
		t.Fatalf("%d accounts created, want 9 (one per scenario that needs one, mixed included)", f.accounts.Load())
	}
}

func TestSuiteNeedsAdminTokenForURL(t *testing.T) {
	_, err := RunSuite(context.Background(), Config{Scenarios: []string{"status"}, URL: "http://127.0.0.1:1"})
	if err == nil || !strings.Contains(err.Error(), "admin token") {
		t.Fatalf("err %v", err)
	}
}

func TestExpandScenarios(t *testing.T) {
	all, err := expandScenarios([]string{"all"})
	if err != nil || len(all) != len(Scenarios)-1 {
		t.Fatalf("all = %v, %v", all, err)
	}
	for _, n := range all {
		if n == "mixed" {
			t.Fatal("all includes mixed")
		}
	}
	if _, err := expandScenarios([]string{"nope"}); err == nil {
		t.Fatal("unknown scenario accepted")
	}
}

func TestVisitorMix(t *testing.T) {
	r := newTestRand()
	seen := map[string]int{}
	for i := 0; i < 5000; i++ {
		v := sampleVisitor(r)
		seen[v.Class]++
		if !v.Addr.IsValid() || v.Addr.IsPrivate() || v.Addr.IsLoopback() || v.Zone == "" {
			t.Fatalf("visitor %+v", v)
		}
		in := false
		for _, c := range visitorClasses {
			if c.name != v.Class {
				continue
			}
			for _, reg := range c.regions {
				in = in || reg.prefix.Contains(v.Addr)
			}
		}
		if !in {
			t.Fatalf("%v is outside its class %s", v.Addr, v.Class)
		}
	}
	for _, c := range visitorClasses {
		if seen[c.name] == 0 {
			t.Errorf("class %s never drawn", c.name)
		}
	}
	if seen["residential"] < seen["tor"]*10 {
		t.Errorf("mix %v is not mostly residential", seen)
	}
}

func TestCallerPool(t *testing.T) {
	p := NewCallerPool(netip.MustParsePrefix("10.0.0.0/30"), 3, nil)
	want := []string{"10.0.0.0", "10.0.0.0", "10.0.0.0", "10.0.0.1", "10.0.0.1", "10.0.0.1", "10.0.0.2"}
	for i, w := range want {
		if got := p.Next().String(); got != w {
			t.Fatalf("call %d: %s, want %s", i, got, w)
		}
	}
	for i := 0; i < 5*3; i++ {
		p.Next()
	}
	if a := p.Next(); !netip.MustParsePrefix("10.0.0.0/30").Contains(a) {
		t.Fatalf("%v escaped the pool", a)
	}
}

func newTestRand() *rand.Rand { return rand.New(rand.NewPCG(1, 2)) }

// TestRunSuiteFloorRounds runs each scenario three times against the floor,
// alternating which goes first, and reports every round.
func TestRunSuiteFloorRounds(t *testing.T) {
	f := &fakeFraudd{}
	url := testServer(t, f.handle)
	var log bytes.Buffer
	rep, err := RunSuite(context.Background(), Config{
		Scenarios:   []string{"status"},
		Run:         RunConfig{Conns: 2, Duration: 100 * time.Millisecond, Warmup: -1},
		URL:         url,
		AdminToken:  "adm",
		ServerPID:   os.Getpid(),
		Floor:       true,
		FloorRounds: 3,
		Log:         &log,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if len(rep.Results) != 1 {
		t.Fatalf("%d rows, want 1", len(rep.Results))
	}
	r := rep.Results[0]
	if len(r.FloorRounds) != 3 {
		t.Fatalf("%d rounds reported, want 3", len(r.FloorRounds))
	}
	for i, fr := range r.FloorRounds {
		if fr.RPS == 0 || fr.FloorRPS == nil || *fr.FloorRPS == 0 {
			t.Errorf("round %d: %+v", i+1, fr)
		}
	}
	// The in-process floor's CPU is not its own: no ratio, so round 1.
	if !strings.Contains(strings.Join(r.Notes, "\n"), "3 rounds alternating with the floor; no round's CPU ratio was measured, so the figures are round 1's") {
		t.Errorf("notes %q", r.Notes)
	}
	if r.RPS != r.FloorRounds[0].RPS || r.P99 != r.FloorRounds[0].P99 || r.Interrupted {
		t.Errorf("row %v req/s p99 %v, round 1 %+v", r.RPS, r.P99, r.FloorRounds[0])
	}
	// The floor runs first in rounds 1 and 3, fraudd first in round 2.
	var order []string
	for _, line := range strings.Split(log.String(), "\n") {
		switch {
		case strings.Contains(line, "floor") && strings.Contains(line, "req/s"):
			order = append(order, "F")
		case strings.Contains(line, "server") && strings.Contains(line, "req/s"):
			order = append(order, "S")
		}
	}
	if got := strings.Join(order, ""); got != "FSSFFS" {
		t.Fatalf("run order %s, want FSSFFS\n%s", got, log.String())
	}
}

// TestMedianPair picks the round whose CPU ratio is the median.
func TestMedianPair(t *testing.T) {
	pair := func(server, floor time.Duration) floorPair {
		return floorPair{
			server: Measured{Result: &Result{Requests: 1000}, ServerCPU: server, HasCPU: true},
			floor:  &Measured{Result: &Result{Requests: 1000}, ServerCPU: floor, HasCPU: true},
			ran:    true,
		}
	}
	pairs := []floorPair{pair(30*time.Millisecond, 20*time.Millisecond), pair(40*time.Millisecond, 20*time.Millisecond), pair(26*time.Millisecond, 20*time.Millisecond)}
	if got, ok := medianPair(pairs); got != 0 || !ok { // ratios 1.5, 2.0, 1.3: the median is round 1's
		t.Fatalf("median round %d %v, want 0", got, ok)
	}
	if got, _ := medianPair(pairs[:2]); got != 0 { // two: the lower middle
		t.Fatalf("median of two %d, want 0", got)
	}
	// Rounds without a ratio (no CPU) and an interrupted one are left out.
	noCPU := pair(50*time.Millisecond, 20*time.Millisecond)
	noCPU.floor.HasCPU = false
	cut := pair(10*time.Millisecond, 20*time.Millisecond)
	cut.server.Result.Interrupted = true
	mixed := []floorPair{noCPU, pairs[0], noCPU, pairs[1], pairs[2], cut}
	if got, ok := medianPair(mixed); got != 1 || !ok { // 1.5 among 1.3, 1.5, 2.0
		t.Fatalf("median of the measured rounds %d %v, want 1", got, ok)
	}
	if got, ok := medianPair([]floorPair{noCPU, noCPU}); got != 0 || ok {
		t.Fatalf("no ratio: %d %v, want round 1 and false", got, ok)
	}
	if r := pairRatio(pairs[1]); r < 1.99 || r > 2.01 {
		t.Fatalf("ratio %v, want 2", r)
	}
}
