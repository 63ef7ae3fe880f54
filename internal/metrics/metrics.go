// Package metrics is the service's Prometheus instrumentation: the counters
// and histograms the request path updates (requests by route and status with
// their latency, decisions by verdict and reason, refusals by limit), and the
// registry that the figures read only when Prometheus scrapes (mailbox
// depths, Pebble, feeds, webhooks) join, so that a scrape, not a request,
// pays for those.
//
// The request path stays cheap: every series it touches is created before
// the first request or once on first use, then cached, so recording a
// request is a few atomic adds and a histogram bucket search, with no lock,
// no label hashing and no allocation.
package metrics

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
)

// Namespace prefixes every series of the service.
const Namespace = "fraudd"

// ContentType is the text exposition format's, as WriteText writes it.
const ContentType = string(expfmt.FmtText)

// LatencyBuckets are the request latency histogram's bounds in seconds: the
// service answers in tens of microseconds, so the buckets start there.
var LatencyBuckets = []float64{
	0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5,
}

// Metrics owns the registry and the request-path series. Make it with New;
// a nil *Metrics records nothing (every request-path method checks).
type Metrics struct {
	reg *prometheus.Registry

	requests  *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	decisions *prometheus.CounterVec
	reasons   *prometheus.CounterVec

	verdict  [2][3]prometheus.Counter // [live, test][allow, review, block]
	refused  [refusalKinds]prometheus.Counter
	reasonMu sync.Mutex
	reasonC  [2]atomic.Pointer[map[string]prometheus.Counter] // by mode
}

// New makes a registry with the Go runtime and process collectors, the
// build info, and the request-path series.
func New(version string) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	info := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "build_info",
		Help: "Always 1; the version label is the running build.", ConstLabels: prometheus.Labels{"version": version}})
	info.Set(1)
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "http_requests_total",
		Help: "HTTP requests answered, by route pattern (\"unmatched\": no route; \"unreadable\": refused while reading, without a latency) and status code."}, []string{"route", "status"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "http_request_duration_seconds",
		Help:    "Time from the request handed to the handler to its answer ready to send (gzip included), by route pattern.",
		Buckets: LatencyBuckets}, []string{"route"})
	m.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "decisions_total",
		Help: "Evaluate answers by decision; mode test: a test key, test token or the sandbox (samples are not counted)."},
		[]string{"mode", "decision"})
	m.reasons = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "decision_reasons_total",
		Help: "Reason codes in evaluate answers, by mode as in decisions_total (one answer can carry several)."},
		[]string{"mode", "reason"})
	refusals := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "refusals_total",
		Help: "Calls refused with 429 by a quota (hourly, monthly) or a limiter (per_address, lockout, challenge, collect_budget, token)."},
		[]string{"limit"})
	m.reg.MustRegister(info, m.requests, m.latency, m.decisions, m.reasons, refusals)
	for mode, ml := range []string{"live", "test"} {
		for i, d := range []string{"allow", "review", "block"} {
			m.verdict[mode][i] = m.decisions.WithLabelValues(ml, d)
		}
		empty := map[string]prometheus.Counter{}
		m.reasonC[mode].Store(&empty)
	}
	for k := range m.refused {
		m.refused[k] = refusals.WithLabelValues(RefusalKind(k).String())
	}
	return m
}

// Register adds a collector read at scrape time.
func (m *Metrics) Register(c prometheus.Collector) error { return m.reg.Register(c) }

// WriteText writes the exposition in the text format (ContentType). A
// collector that fails leaves its families out and the error is returned
// after the rest is written, so one bad figure never hides the others.
func (m *Metrics) WriteText(w io.Writer) error {
	mfs, gatherErr := m.reg.Gather()
	enc := expfmt.NewEncoder(w, expfmt.FmtText)
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return fmt.Errorf("encode %s: %w", mf.GetName(), err)
		}
	}
	return gatherErr
}

// Handler serves the exposition over net/http (its own listener,
// --metrics-addr): content negotiation and gzip are promhttp's.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Route is one route's request series. Make one per route at start-up.
type Route struct {
	m       *Metrics
	name    string
	latency prometheus.Observer
	// byStatus caches the counters of the statuses the service sends; a
	// status outside the table goes through the vector.
	byStatus [len(statusCodes)]atomic.Pointer[counter]
}

type counter struct{ prometheus.Counter }

// statusCodes are the statuses with a cached counter per route.
var statusCodes = [...]int{200, 201, 202, 204, 304, 400, 401, 403, 404, 405, 406, 409, 413, 414, 415, 422, 429, 431, 500, 503}

// statusSlot is code's index in statusCodes, or -1.
func statusSlot(code int) int {
	for i, c := range statusCodes {
		if c == code {
			return i
		}
	}
	return -1
}

// Route returns the series of the route named pattern (a route-table pattern
// such as /v1/lookup/{ip}, never a raw path: labels must stay few). Nil
// Metrics returns nil, which records nothing.
func (m *Metrics) Route(pattern string) *Route {
	if m == nil {
		return nil
	}
	return &Route{m: m, name: pattern, latency: m.latency.WithLabelValues(pattern)}
}

// Observe records one answered request.
func (r *Route) Observe(status int, took time.Duration) {
	if r == nil {
		return
	}
	r.latency.Observe(took.Seconds())
	r.Count(status)
}

// Count records one answered request without its latency: for answers sent
// before a handler ran, whose start fasthttp does not stamp.
func (r *Route) Count(status int) {
	if r == nil {
		return
	}
	i := statusSlot(status)
	if i < 0 {
		r.m.requests.WithLabelValues(r.name, strconv.Itoa(status)).Inc()
		return
	}
	c := r.byStatus[i].Load()
	if c == nil {
		// Two first requests may both get here: the vector hands both the
		// same counter, so either pointer does.
		c = &counter{r.m.requests.WithLabelValues(r.name, strconv.Itoa(status))}
		r.byStatus[i].Store(c)
	}
	c.Inc()
}

// Decision records one evaluate answer: its decision and reason codes, in
// test mode (test key, test token, sandbox) or live.
func (m *Metrics) Decision(decision string, reasons []string, test bool) {
	if m == nil {
		return
	}
	mode := 0
	if test {
		mode = 1
	}
	switch decision {
	case "allow":
		m.verdict[mode][0].Inc()
	case "review":
		m.verdict[mode][1].Inc()
	case "block":
		m.verdict[mode][2].Inc()
	default:
		m.decisions.WithLabelValues(modeName[mode], decision).Inc()
	}
	if len(reasons) == 0 {
		return
	}
	cache := *m.reasonC[mode].Load()
	for _, r := range reasons {
		c, ok := cache[r]
		if !ok {
			c = m.reasonCounter(mode, r)
		}
		c.Inc()
	}
}

var modeName = [2]string{"live", "test"}

// reasonCounter adds a reason's counter to the copy-on-write cache: reason
// codes are a short, append-only list, so the cache soon stops growing.
func (m *Metrics) reasonCounter(mode int, reason string) prometheus.Counter {
	m.reasonMu.Lock()
	defer m.reasonMu.Unlock()
	old := *m.reasonC[mode].Load()
	if c, ok := old[reason]; ok {
		return c
	}
	c := m.reasons.WithLabelValues(modeName[mode], reason)
	next := make(map[string]prometheus.Counter, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[reason] = c
	m.reasonC[mode].Store(&next)
	return c
}

// RefusalKind is the limit that refused a call with 429.
type RefusalKind uint8

// The limits behind a 429: the account's quota (hourly, monthly) and the
// per-address limiters.
const (
	RefusedHourly        RefusalKind = iota // the key's hourly allowance
	RefusedMonthly                          // the account's monthly allowance
	RefusedPerAddress                       // a per-address (or per-/64) rate limiter
	RefusedLockout                          // too many invalid credentials from one address
	RefusedChallenge                        // device-evidence challenges per address
	RefusedCollectBudget                    // the collector's budget
	RefusedToken                            // OAuth token minting per address
	refusalKinds
)

func (k RefusalKind) String() string {
	switch k {
	case RefusedHourly:
		return "hourly"
	case RefusedMonthly:
		return "monthly"
	case RefusedPerAddress:
		return "per_address"
	case RefusedLockout:
		return "lockout"
	case RefusedChallenge:
		return "challenge"
	case RefusedCollectBudget:
		return "collect_budget"
	case RefusedToken:
		return "token"
	}
	return "unknown"
}

// Refusal records one call refused by a quota or limiter.
func (m *Metrics) Refusal(kind RefusalKind) {
	if m == nil || kind >= refusalKinds {
		return
	}
	m.refused[kind].Inc()
}
