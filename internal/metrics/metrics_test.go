package metrics

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func scrape(t testing.TB, m *Metrics) string {
	t.Helper()
	var buf bytes.Buffer
	if err := m.WriteText(&buf); err != nil {
		t.Fatalf("scrape: %v", err)
	}
	return buf.String()
}

func TestRequestSeriesAndSources(t *testing.T) {
	m := New("1.2.3")
	ev := m.Route("/v1/evaluate")
	ev.Observe(200, 300*time.Microsecond)
	ev.Observe(200, 2*time.Millisecond)
	ev.Observe(429, time.Millisecond)
	ev.Observe(418, time.Millisecond) // not in the cached table
	m.Route("unreadable").Count(431)  // no latency
	m.Decision("review", []string{"vpn_detected", "datacenter_asn"}, false)
	m.Decision("review", []string{"vpn_detected"}, false)
	m.Decision("block", []string{"vpn_detected"}, true)
	m.Decision("allow", nil, false)
	m.Refusal(RefusedHourly)
	m.Refusal(RefusedLockout)
	m.Refusal(refusalKinds) // out of range: ignored
	var nilM *Metrics
	nilM.Decision("allow", nil, false)              // records nothing, never panics
	nilM.Route("/x").Observe(200, time.Millisecond) // nil route too
	nilM.Refusal(RefusedHourly)
	if err := m.Add(Source{Name: "feed_age_seconds", Help: "h", Type: prometheus.GaugeValue, Label: "feed",
		Read: func(emit func(string, float64)) { emit("tor", 3600) }}); err != nil {
		t.Fatal(err)
	}
	out := scrape(t, m)
	for _, want := range []string{
		`fraudd_build_info{version="1.2.3"} 1`,
		`fraudd_http_requests_total{route="/v1/evaluate",status="200"} 2`,
		`fraudd_http_requests_total{route="/v1/evaluate",status="429"} 1`,
		`fraudd_http_requests_total{route="/v1/evaluate",status="418"} 1`,
		`fraudd_http_request_duration_seconds_count{route="/v1/evaluate"} 4`,
		`fraudd_http_requests_total{route="unreadable",status="431"} 1`,
		`fraudd_http_request_duration_seconds_bucket{route="/v1/evaluate",le="0.0005"} 1`,
		`fraudd_http_request_duration_seconds_bucket{route="/v1/evaluate",le="0.001"} 3`,
		`fraudd_http_request_duration_seconds_bucket{route="/v1/evaluate",le="+Inf"} 4`,
		`fraudd_http_request_duration_seconds_sum{route="/v1/evaluate"} 0.0043`,
		`fraudd_decisions_total{decision="review",mode="live"} 2`,
		`fraudd_decisions_total{decision="allow",mode="live"} 1`,
		`fraudd_decisions_total{decision="block",mode="live"} 0`,
		`fraudd_decisions_total{decision="block",mode="test"} 1`,
		`fraudd_decision_reasons_total{mode="live",reason="vpn_detected"} 2`,
		`fraudd_decision_reasons_total{mode="live",reason="datacenter_asn"} 1`,
		`fraudd_decision_reasons_total{mode="test",reason="vpn_detected"} 1`,
		`fraudd_refusals_total{limit="hourly"} 1`,
		`fraudd_refusals_total{limit="lockout"} 1`,
		`fraudd_refusals_total{limit="monthly"} 0`,
		`fraudd_feed_age_seconds{feed="tor"} 3600`,
		`go_goroutines`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("exposition lacks %q", want)
		}
	}
	if strings.Contains(out, `limit="unknown"`) {
		t.Error("an out-of-range refusal kind made a series")
	}
	if strings.Contains(out, `fraudd_http_request_duration_seconds_count{route="unreadable"}`) {
		t.Error("a route without a timed request has a latency histogram")
	}
	if m.Route("/v1/evaluate") != ev {
		t.Error("the same pattern got new series")
	}
}

// A source that cannot be read leaves its family out; the rest is written
// and the error returned.
func TestWriteTextKeepsTheRestWhenASourceFails(t *testing.T) {
	m := New("t")
	if err := m.Add(Source{Name: "bad", Help: "h", Type: prometheus.GaugeValue, Label: "x",
		Read: func(emit func(string, float64)) { emit("\xff", 1) }}); err != nil {
		t.Fatal(err)
	}
	m.Route("/r").Observe(200, time.Millisecond)
	var buf bytes.Buffer
	err := m.WriteText(&buf)
	if err == nil {
		t.Fatal("invalid label value: no error")
	}
	if !strings.Contains(buf.String(), `fraudd_http_requests_total{route="/r",status="200"} 1`) || strings.Contains(buf.String(), "fraudd_bad") {
		t.Fatalf("exposition after a failed source:\n%s", buf.String())
	}
	if err := m.Add(Source{Name: "bad", Help: "h", Type: prometheus.GaugeValue, Label: "x"}); err == nil {
		t.Fatal("a second family of the same name was registered")
	}
}

func TestRecordingAllocatesNothing(t *testing.T) {
	m := New("t")
	r := m.Route("/v1/evaluate")
	reasons := []string{"tor_exit_node", "vpn_detected"}
	r.Observe(200, time.Millisecond) // creates the cached counter
	m.Decision("block", reasons, false)
	if n := testing.AllocsPerRun(1000, func() {
		r.Observe(200, time.Millisecond)
		m.Decision("block", reasons, false)
		m.Refusal(RefusedPerAddress)
	}); n != 0 {
		t.Fatalf("recording a request allocates %.1f times", n)
	}
	if out := scrape(t, m); !strings.Contains(out, `fraudd_decision_reasons_total{mode="live",reason="tor_exit_node"} 1002`) {
		t.Fatal("reason counter lost increments")
	}
}

// Concurrent first uses of a status and a reason share one series.
func TestConcurrentFirstUse(t *testing.T) {
	m := New("t")
	r := m.Route("/v1/evaluate")
	done := make(chan struct{})
	for range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 100 {
				r.Observe(201, time.Millisecond)
				m.Decision("review", []string{"a", "b"}, false)
			}
		}()
	}
	for range 8 {
		<-done
	}
	out := scrape(t, m)
	for _, want := range []string{
		`fraudd_http_requests_total{route="/v1/evaluate",status="201"} 800`,
		`fraudd_decision_reasons_total{mode="live",reason="a"} 800`,
		`fraudd_decision_reasons_total{mode="live",reason="b"} 800`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("exposition lacks %q", want)
		}
	}
}

// BenchmarkEvaluateOverhead is everything /metrics adds to one evaluate
// request: the clock read at the end (the start is fasthttp's own stamp),
// the route observation and the decision with two reasons.
func BenchmarkEvaluateOverhead(b *testing.B) {
	m := New("bench")
	r := m.Route("/v1/evaluate")
	reasons := []string{"vpn_detected", "datacenter_asn"}
	start := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		m.Decision("review", reasons, false)
		r.Observe(200, time.Since(start))
	}
}

// BenchmarkEvaluateOverheadParallel is the same on every core at once: the
// counters are shared, so this is where contention would show.
func BenchmarkEvaluateOverheadParallel(b *testing.B) {
	m := New("bench")
	r := m.Route("/v1/evaluate")
	reasons := []string{"vpn_detected", "datacenter_asn"}
	start := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Decision("review", reasons, false)
			r.Observe(200, time.Since(start))
		}
	})
}
