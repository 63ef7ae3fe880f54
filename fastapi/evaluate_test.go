package fastapi

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bytedance/sonic/encoder"
	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/intel/score"
	"github.com/fraudd/fraudd/internal/clock"
	"github.com/fraudd/fraudd/storage"
)

var timingRE = regexp.MustCompile(`"(evaluated_in_ms|latency_ms)":\d+`)

// normalise zeroes the timing fields so golden files are stable.
func normalise(b []byte) []byte { return timingRE.ReplaceAll(b, []byte(`"$1":0`)) }

func (e *testEnv) post(uri, auth, ctype, body string) *fasthttp.RequestCtx {
	tr := testRequest{method: "POST", uri: uri, body: []byte(body)}
	if auth != "" {
		tr.header = append(tr.header, [2]string{"Authorization", auth})
	}
	if ctype != "" {
		tr.header = append(tr.header, [2]string{"Content-Type", ctype})
	}
	return e.serve(tr)
}

func TestEvaluateGoldenTestTokens(t *testing.T) {
	e := newTestEnv(t)
	keys := map[string]string{"live": e.acct.LiveKey, "test": e.acct.TestKey, "sandbox": SandboxKey}
	for _, tok := range []string{"test_clean", "test_vpn", "test_proxy", "test_datacenter", "test_tor"} {
		for _, kt := range []string{"live", "test", "sandbox"} {
			t.Run(tok+"_"+kt, func(t *testing.T) {
				ctx := e.post("/v1/evaluate", "Bearer "+keys[kt], "application/json", `{"token":"`+tok+`"}`)
				if ctx.Response.StatusCode() != 200 {
					t.Fatalf("%d %s", ctx.Response.StatusCode(), ctx.Response.Body())
				}
				rl := len(ctx.Response.Header.Peek("X-RateLimit-Limit")) > 0
				if rl == (kt == "sandbox") {
					t.Fatalf("X-RateLimit headers present=%v for %s", rl, kt)
				}
				golden(t, "evaluate_"+tok+"_"+kt, normalise(ctx.Response.Body()))
			})
		}
	}
}

func TestEvaluateDecisionsPerToken(t *testing.T) {
	e := newTestEnv(t)
	want := map[string]string{"test_clean": "allow", "test_vpn": "review", "test_proxy": "block", "test_datacenter": "allow", "test_tor": "block"}
	for tok, d := range want {
		ctx := e.post("/v1/evaluate", "Bearer "+e.acct.LiveKey, "", `{"token":"`+tok+`"}`)
		var m map[string]any
		if err := json.Unmarshal(ctx.Response.Body(), &m); err != nil {
			t.Fatal(err)
		}
		if m["decision"] != d || m["test"] != true {
			t.Errorf("%s: decision %v test %v, want %s", tok, m["decision"], m["test"], d)
		}
		if _, ok := m["device_status"]; ok {
			t.Errorf("%s: device_status must appear on live evaluations only", tok)
		}
		if _, ok := m["network"].(map[string]any)["sdk_blocked"]; ok {
			t.Errorf("%s: network.sdk_blocked must appear on live evaluations only", tok)
		}
	}
	if m := jsonOf(t, e.post("/v1/evaluate", "Bearer "+e.acct.LiveKey, "", `{"token":"test_tor"}`)); m["country"] != nil || m["network"].(map[string]any)["service"] != "TOR" {
		t.Errorf("test_tor: country %v service %v", m["country"], m["network"].(map[string]any)["service"])
	}
}

func jsonOf(t *testing.T, ctx *fasthttp.RequestCtx) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(ctx.Response.Body(), &m); err != nil {
		t.Fatalf("not JSON: %s", ctx.Response.Body())
	}
	return m
}

func TestSampleGolden(t *testing.T) {
	e := newTestEnv(t)
	for _, sc := range append(score.Scenarios(), "") {
		name := sc
		if name == "" {
			name = "default"
		}
		t.Run(name, func(t *testing.T) {
			uri := "/v1/evaluate/sample"
			if sc != "" {
				uri += "?scenario=" + sc
			}
			ctx := e.do("GET", uri, "", nil)
			if ctx.Response.StatusCode() != 200 {
				t.Fatalf("%d %s", ctx.Response.StatusCode(), ctx.Response.Body())
			}
			golden(t, "sample_"+name, normalise(ctx.Response.Body()))
		})
	}
	ctx := e.do("GET", "/v1/evaluate/sample?scenario=nope", "", nil)
	if ctx.Response.StatusCode() != 400 {
		t.Fatalf("unknown scenario: %d", ctx.Response.StatusCode())
	}
	golden(t, "error_sample_scenario", ctx.Response.Body())
}

func TestEvaluateGoldenLiveAndErrors(t *testing.T) {
	e := newTestEnv(t)
	live := "Bearer " + e.acct.LiveKey
	for _, c := range []struct {
		name, auth, ctype, body string
		status                  int
	}{
		{"evaluate_degraded_live", live, "application/json", `{}`, 200},
		{"evaluate_degraded_email_tz", live, "application/json", `{"email":"a@mailinator.com","tz":"Asia/Calcutta"}`, 200},
		{"evaluate_degraded_event_sent", live, "application/json", `{"fingerprintEventId":"ev_unknown"}`, 200},
		{"evaluate_degraded_testkey", "Bearer " + e.acct.TestKey, "", ``, 200},
		{"evaluate_test_vpn_email_tz", live, "application/x-www-form-urlencoded", `netcheck=test_clean&email=joe%40example.com&service_tz=America%2FChicago`, 200},
		{"error_invalid_token", live, "application/json", `{"token":"not-a-real-token"}`, 400},
		{"error_invalid_token_type", live, "application/json", `{"token":12}`, 400},
		{"error_sandbox_real_token", "Bearer " + SandboxKey, "application/json", `{"token":"abc"}`, 400},
		{"error_sandbox_no_token", "Bearer " + SandboxKey, "application/json", `{}`, 400},
		{"error_email_too_long", live, "application/json", `{"email":"` + strings.Repeat("a", 255) + `"}`, 400},
		{"error_body_not_object", live, "application/json", `[1]`, 400},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := e.post("/v1/evaluate", c.auth, c.ctype, c.body)
			if ctx.Response.StatusCode() != c.status {
				t.Fatalf("%d %s", ctx.Response.StatusCode(), ctx.Response.Body())
			}
			golden(t, c.name, normalise(ctx.Response.Body()))
		})
	}
}

func TestEvaluateRulesAndPins(t *testing.T) {
	e := newTestEnv(t)
	id, live := e.acct.View.ID, "Bearer "+e.acct.LiveKey
	if _, err := e.accts.SetRules(id, []storage.Rule{{Signal: "vpn", Action: "block"}, {Signal: "datacenter", Action: "review"}}); err != nil {
		t.Fatal(err)
	}
	m := jsonOf(t, e.post("/v1/evaluate", live, "", `{"token":"test_vpn"}`))
	if m["decision"] != "block" || m["decision_source"] != "rules" || m["engine_decision"] != "review" {
		t.Fatalf("vpn rule: %v", m)
	}
	golden(t, "evaluate_rule_vpn_block", normalise(e.post("/v1/evaluate", live, "", `{"token":"test_vpn"}`).Response.Body()))
	// A rule that does not change the decision: source shown, engine_decision absent.
	m = jsonOf(t, e.post("/v1/evaluate", live, "", `{"token":"test_datacenter"}`))
	if m["decision"] != "review" || m["decision_source"] != "rules" {
		t.Fatalf("datacenter rule: %v", m)
	}
	if _, err := e.accts.SetPins(id, []storage.Pin{{IP: "89.187.178.24/32", Action: "allow", Label: "partner office"}}); err != nil {
		t.Fatal(err)
	}
	m = jsonOf(t, e.post("/v1/evaluate", live, "", `{"token":"test_vpn"}`))
	if m["decision"] != "allow" || m["decision_source"] != "exception" || m["exception_matched"] != "partner office" || m["engine_decision"] != "review" {
		t.Fatalf("pin: %v", m)
	}
	golden(t, "evaluate_pin_allow", normalise(e.post("/v1/evaluate", live, "", `{"token":"test_vpn"}`).Response.Body()))
	// The sandbox never applies an account's policy.
	if m := jsonOf(t, e.post("/v1/evaluate", "Bearer "+SandboxKey, "", `{"token":"test_vpn"}`)); m["decision"] != "review" {
		t.Fatalf("sandbox with policy: %v", m)
	}
}

// BenchmarkBuildEncode measures the response builder plus the sonic encode of
// a full evaluate answer (a sample) into a pooled buffer.
func BenchmarkBuildEncode(b *testing.B) {
	e := newTestEnv(&testing.T{})
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for b.Loop() {
		ev, ref := e.srv.checks.Sample("vpn")
		if ref != nil {
			b.Fatal(ref.Msg)
		}
		buf = buf[:0]
		if err := encoder.EncodeInto(&buf, ev.Body(), 0); err != nil {
			b.Fatal(err)
		}
		ev.Release()
	}
}

// BenchmarkEvaluateHandler measures a whole test-token evaluate through the
// handler: auth, limits hop, quota hop, decode, score, build, encode.
// evalBench is one test-token evaluation through the handler, set up for
// repeated runs: an account on public_interest so it never hits a limit, the
// Authorization header built once so only the handler's own work counts.
type evalBench struct {
	e    *testEnv
	ctx  *fasthttp.RequestCtx
	auth string
}

func newEvalBench(tb testing.TB) *evalBench {
	e := newTestEnv(&testing.T{})
	if err := e.accts.RevokePrevious(e.acct.View.ID); err != nil {
		tb.Fatal(err)
	}
	e.srv.deps.Accounts.Get(e.acct.View.ID)
	pi := "public_interest"
	if _, err := e.accts.Update(e.acct.View.ID, accountsPatchPlan(pi)); err != nil {
		tb.Fatal(err)
	}
	return &evalBench{e: e, ctx: new(fasthttp.RequestCtx), auth: "Bearer " + e.acct.LiveKey}
}

// run evaluates once and reports the status and body when it was not a 200.
func (b *evalBench) run() (int, []byte) {
	ctx := b.ctx
	ctx.Request.Reset()
	ctx.Response.Reset()
	ctx.Request.Header.SetMethod("POST")
	ctx.Request.SetRequestURI("/v1/evaluate")
	ctx.Request.Header.Set("User-Agent", "bench/1")
	ctx.Request.Header.Set("Authorization", b.auth)
	ctx.Request.Header.SetContentType("application/json") // as clients send it
	ctx.Request.SetBodyString(`{"token":"test_vpn","email":"a@b.co","tz":"Europe/Berlin"}`)
	b.e.srv.Handle(ctx)
	if st := ctx.Response.StatusCode(); st != 200 {
		return st, ctx.Response.Body()
	}
	return 200, nil
}

func BenchmarkEvaluateHandler(b *testing.B) {
	eb := newEvalBench(b)
	b.ReportAllocs()
	for b.Loop() {
		if st, body := eb.run(); st != 200 {
			b.Fatalf("%d %s", st, body)
		}
	}
}

// evaluateAllocBudget is what one test-token evaluation may allocate through
// the handler: decode, admit (the per-address limiter and the quota, one
// protoactor mailbox schedule each), score, build, encode. Raise it only
// with a reason in the commit message.
const evaluateAllocBudget = 7

// TestEvaluateHandlerAllocs pins the allocation budget of the hot path; the
// benchmark above shows the same figure with -benchmem.
func TestEvaluateHandlerAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race")
	}
	eb := newEvalBench(t)
	for range 50 { // warm the pools and sonic's compiled codecs
		if st, body := eb.run(); st != 200 {
			t.Fatalf("%d %s", st, body)
		}
	}
	var failed []byte
	n := testing.AllocsPerRun(500, func() {
		if st, body := eb.run(); st != 200 && failed == nil {
			failed = body
		}
	})
	if failed != nil {
		t.Fatalf("evaluation refused: %s", failed)
	}
	if n > evaluateAllocBudget {
		t.Fatalf("one test-token evaluation allocates %.1f times; budget %d", n, evaluateAllocBudget)
	}
	t.Logf("%.1f allocs per evaluation (budget %d)", n, evaluateAllocBudget)
}

// BenchmarkEvaluateLiveHandler is a live evaluation through the handler
// that waits on every actor call an evaluation can: the per-address
// limiter, the quota (a monthly, durable charge), the device event and the
// customer's history (an accountId is sent). The same event each time: from
// the second call on it resolves as a replay, which costs the same hops.
func BenchmarkEvaluateLiveHandler(b *testing.B) {
	t := &testing.T{}
	e := newCollectEnv(t)
	e.srv.deps.DeviceHist = newDeviceHist(t)
	e.srv.rewire()
	if err := e.accts.RevokePrevious(e.acct.View.ID); err != nil {
		b.Fatal(err)
	}
	pi := "public_interest"
	if _, err := e.accts.Update(e.acct.View.ID, accountsPatchPlan(pi)); err != nil {
		b.Fatal(err)
	}
	pk := e.acct.PublishableKey
	tok := e.token(t, pk, "73.0.0.1:1", nil, `{"v":1,"key":"PK"}`)
	ev := e.deviceEvent(t, pk, "73.0.0.1:1", "chrome_desktop_windows")
	body := `{"token":"` + tok + `","fingerprintEventId":"` + ev + `","accountId":"user-1"}`
	auth := "Bearer " + e.acct.LiveKey
	ctx := new(fasthttp.RequestCtx)
	b.ReportAllocs()
	for b.Loop() {
		ctx.Request.Reset()
		ctx.Response.Reset()
		ctx.Request.Header.SetMethod("POST")
		ctx.Request.SetRequestURI("/v1/evaluate")
		ctx.Request.Header.Set("User-Agent", "bench/1")
		ctx.Request.Header.Set("Authorization", auth)
		ctx.Request.SetBodyString(body)
		e.srv.Handle(ctx)
		if ctx.Response.StatusCode() != 200 || !bytes.Contains(ctx.Response.Body(), []byte(`"device_status":"ok"`)) {
			b.Fatalf("%d %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
}

// TestEvaluateBodyTypesDated: SPEC 4.1 "since 2026-09-28 a JSON object sent
// as text/plain, application/x-www-form-urlencoded, application/*+json or
// with no Content-Type is read the same way (before, such a body was
// ignored)". Before the date such a body gives the degraded answer;
// application/json is read on either side of it.
func TestEvaluateBodyTypesDated(t *testing.T) {
	e := newTestEnv(t)
	before := time.Date(2026, 9, 27, 23, 59, 59, 0, time.UTC)
	since := time.Date(2026, 9, 28, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		now          time.Time
		ctype, body  string
		wantDegraded bool
	}{
		{before, "application/json", `{"token":"test_vpn"}`, false},
		{before, "application/json; charset=utf-8", `{"token":"test_vpn"}`, false},
		{before, "text/plain", `{"token":"test_vpn"}`, true},
		{before, "application/vnd.api+json", `{"token":"test_vpn"}`, true},
		{before, "", `{"token":"test_vpn"}`, true},
		{before, "application/x-www-form-urlencoded", `token=test_vpn`, true},
		{since, "text/plain", `{"token":"test_vpn"}`, false},
		{since, "", `{"token":"test_vpn"}`, false},
		{since, "application/x-www-form-urlencoded", `token=test_vpn`, false},
	} {
		e.srv.deps.Clock = clock.Fixed{T: c.now}
		ctx := e.post("/v1/evaluate", "Bearer "+e.acct.LiveKey, c.ctype, c.body)
		var m struct {
			Degraded bool   `json:"degraded"`
			Decision string `json:"decision"`
		}
		if ctx.Response.StatusCode() != 200 || json.Unmarshal(ctx.Response.Body(), &m) != nil {
			t.Fatalf("%v %q: %d %s", c.now, c.ctype, ctx.Response.StatusCode(), ctx.Response.Body())
		}
		if m.Degraded != c.wantDegraded {
			t.Errorf("%v %q %s: degraded=%v, want %v (%s)", c.now.Format(time.DateOnly), c.ctype, c.body, m.Degraded, c.wantDegraded, ctx.Response.Body())
		}
	}
}
