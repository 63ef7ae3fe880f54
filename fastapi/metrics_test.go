package fastapi

import (
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/internal/metrics"
)

// withMetrics rebuilds the server with metrics, as cmd/fraudd starts it.
func (e *testEnv) withMetrics(m *metrics.Metrics) {
	cfg := e.srv.cfg
	cfg.Metrics = m
	e.srv = New(cfg, e.srv.deps)
}

// scrape reads GET /metrics with the operator token.
func (e *testEnv) scrape(t *testing.T) string {
	t.Helper()
	ctx := e.serveHTTP("GET", "/metrics", map[string]string{"Authorization": "Bearer adm"})
	if ctx.Response.StatusCode() != 200 {
		t.Fatalf("/metrics: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	if ct := string(ctx.Response.Header.ContentType()); ct != metrics.ContentType {
		t.Fatalf("/metrics content type %q", ct)
	}
	return string(ctx.Response.Body())
}

func TestMetricsCountRequestsDecisionsRefusals(t *testing.T) {
	e := newTestEnv(t)
	e.withMetrics(metrics.New("test"))
	before := e.scrape(t)
	for _, tok := range []string{"test_vpn", "test_vpn", "test_tor"} {
		ctx := new(fasthttp.RequestCtx)
		ctx.Request.Header.SetMethod("POST")
		ctx.Request.SetRequestURI("/v1/evaluate")
		ctx.Request.Header.Set("User-Agent", "unit-test/1")
		ctx.Request.Header.Set("Authorization", "Bearer "+e.acct.LiveKey)
		ctx.Request.Header.SetContentType("application/json")
		ctx.Request.SetBodyString(`{"token":"` + tok + `"}`)
		e.srv.serveHTTP(ctx)
		if ctx.Response.StatusCode() != 200 {
			t.Fatalf("evaluate %s: %d %s", tok, ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
	e.serveHTTP("GET", "/nope", nil)
	// The edge block refuses before routing: unmatched too (README).
	if ctx := e.serveHTTP("GET", "/v1/usage", map[string]string{"User-Agent": "Python-urllib/3.12"}); ctx.Response.StatusCode() != 403 {
		t.Fatalf("edge-blocked agent: %d", ctx.Response.StatusCode())
	}
	// A wrong operator token is refused (and counted) like any admin call.
	if ctx := e.serveHTTP("GET", "/metrics", map[string]string{"Authorization": "Bearer wrong"}); ctx.Response.StatusCode() != 401 {
		t.Fatalf("/metrics with a wrong token: %d", ctx.Response.StatusCode())
	}
	// Twenty bad keys (401) lock an address out: its 21st call is a 429.
	from := func(auth string) int {
		ctx := new(fasthttp.RequestCtx)
		ctx.Request.SetRequestURI("/v1/usage")
		ctx.Request.Header.Set("User-Agent", "unit-test/1")
		ctx.Request.Header.Set("Authorization", auth)
		ctx.SetRemoteAddr(&net.TCPAddr{IP: net.ParseIP("198.51.100.7"), Port: 4000})
		e.srv.serveHTTP(ctx)
		return ctx.Response.StatusCode()
	}
	for range 20 {
		from("Bearer sk_live_nope")
	}
	if st := from("Bearer " + e.acct.LiveKey); st != 429 {
		t.Fatalf("after 20 failures: %d", st)
	}
	out := e.scrape(t)
	for _, want := range []string{
		`fraudd_http_requests_total{route="/v1/evaluate",status="200"} 3`,
		`fraudd_http_request_duration_seconds_count{route="/v1/evaluate"} 3`,
		`fraudd_http_requests_total{route="unmatched",status="404"} 1`,
		`fraudd_http_requests_total{route="unmatched",status="403"} 1`,
		`fraudd_http_requests_total{route="/v1/usage",status="401"} 20`,
		`fraudd_http_requests_total{route="/v1/usage",status="429"} 1`,
		`fraudd_http_requests_total{route="/metrics",status="401"} 1`,
		`fraudd_http_requests_total{route="/metrics",status="200"} 1`, // the scrape before
		`fraudd_decisions_total{decision="review",mode="test"} 2`,
		`fraudd_decisions_total{decision="block",mode="test"} 1`,
		`fraudd_decisions_total{decision="block",mode="live"} 0`,
		`fraudd_decision_reasons_total{mode="test",reason="vpn_detected"} 2`,
		`fraudd_refusals_total{limit="lockout"} 1`,
		`fraudd_refusals_total{limit="hourly"} 0`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("exposition lacks %q", want)
		}
	}
	if strings.Contains(before, `fraudd_decisions_total{decision="review",mode="test"} 2`) {
		t.Fatal("the first scrape already had the decisions")
	}
}

// /metrics is the operator's: the admin token on the admin listener only,
// and 404 on a server without metrics.
func TestMetricsNeedTheOperator(t *testing.T) {
	e := newTestEnv(t)
	if ctx := e.serveHTTP("GET", "/metrics", map[string]string{"Authorization": "Bearer adm"}); ctx.Response.StatusCode() != 404 {
		t.Fatalf("/metrics without metrics: %d", ctx.Response.StatusCode())
	}
	e.withMetrics(metrics.New("test"))
	ctx := e.serveHTTP("GET", "/metrics", nil)
	if ctx.Response.StatusCode() != 401 || !strings.HasPrefix(string(ctx.Response.Header.Peek("WWW-Authenticate")), "Bearer") {
		t.Fatalf("/metrics without a token: %d %q", ctx.Response.StatusCode(), ctx.Response.Header.Peek("WWW-Authenticate"))
	}
	if ctx := e.serveHTTP("GET", "/metrics", map[string]string{"Authorization": "Bearer " + e.acct.LiveKey}); ctx.Response.StatusCode() != 401 {
		t.Fatalf("/metrics with an API key: %d", ctx.Response.StatusCode())
	}
	// Gzip like any large answer.
	z := e.serveHTTP("GET", "/metrics", map[string]string{"Authorization": "Bearer adm", "Accept-Encoding": "gzip"})
	if string(z.Response.Header.ContentEncoding()) != "gzip" || !strings.Contains(string(gunzip(t, z.Response.Body())), "fraudd_build_info") {
		t.Fatalf("gzip: %q", z.Response.Header.ContentEncoding())
	}

	cfg := e.srv.cfg
	cfg.AdminSeparate = true
	e.srv = New(cfg, e.srv.deps)
	pub := e.serveHTTP("GET", "/metrics", map[string]string{"Authorization": "Bearer adm"})
	if pub.Response.StatusCode() != 404 {
		t.Fatalf("/metrics on the public listener with --admin-addr: %d", pub.Response.StatusCode())
	}
	adm := new(fasthttp.RequestCtx)
	adm.Request.SetRequestURI("/metrics")
	adm.Request.Header.Set("Authorization", "Bearer adm")
	adm.Request.Header.Set("User-Agent", "unit-test/1")
	e.srv.serveAdminHTTP(adm)
	if adm.Response.StatusCode() != 200 || !strings.Contains(string(adm.Response.Body()), `fraudd_http_requests_total{route="unmatched",status="404"} 1`) {
		t.Fatalf("/metrics on the admin listener: %d\n%s", adm.Response.StatusCode(), adm.Response.Body())
	}
}

// The evaluate path allocates no more with metrics than without.
func TestMetricsAddNoAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	allocs := func(on bool) float64 {
		eb := newEvalBench(t)
		if on {
			eb.e.withMetrics(metrics.New("t"))
		}
		for range 50 {
			eb.serve()
		}
		return testing.AllocsPerRun(200, func() { eb.serve() })
	}
	off, on := allocs(false), allocs(true)
	if on > off {
		t.Fatalf("evaluate allocates %.1f times with metrics, %.1f without", on, off)
	}
}

// serve runs one test-token evaluation through serveHTTP, the listener's own
// handler (metrics and the other extras included).
func (b *evalBench) serve() {
	ctx := b.ctx
	ctx.Request.Reset()
	ctx.Response.Reset()
	ctx.Request.Header.SetMethod("POST")
	ctx.Request.SetRequestURI("/v1/evaluate")
	ctx.Request.Header.Set("User-Agent", "bench/1")
	ctx.Request.Header.Set("Authorization", b.auth)
	ctx.Request.SetBodyString(`{"token":"test_vpn","email":"a@b.co","tz":"Europe/Berlin"}`)
	b.e.srv.serveHTTP(ctx)
	if ctx.Response.StatusCode() != fasthttp.StatusOK {
		panic(string(ctx.Response.Body()))
	}
}

// BenchmarkEvaluateMetrics is the cost of /metrics on the evaluate path:
// off against on (route counter, latency histogram, decision and reasons,
// one clock read). Besides wall time it reports the process's CPU time per
// request (cpu-ns/op), which the other work of a shared machine disturbs
// less. A bare RequestCtx has no fasthttp timestamp, so "on" reads the clock
// once more than a served request does. BENCHMARKS.md has the figures.
func BenchmarkEvaluateMetrics(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "off"
		if on {
			name = "on"
		}
		b.Run(name, func(b *testing.B) {
			eb := newEvalBench(b)
			if on {
				eb.e.withMetrics(metrics.New("bench"))
			}
			for range 50 {
				eb.serve()
			}
			b.ReportAllocs()
			cpu0 := processCPU(b)
			for b.Loop() {
				eb.serve()
			}
			b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// processCPU is the CPU time the process has used (user and system).
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
