// Package metrics is the service's Prometheus instrumentation: the counters
// and histograms the request path updates (requests by route and status with
// their latency, decisions by verdict and reason, refusals by limit), and the
// registry that the figures read only when Prometheus scrapes (mailbox
// depths, Pebble, feeds, webhooks) join, so that a scrape, not a request,
// pays for those.
//
// The request path stays cheap: every series it touches is created before
// the first request or once on first use, then cached, so recording a
// request is a few atomic adds, a bucket search and a map read per reason
// code, with no lock and no allocation (BenchmarkEvaluateOverhead).
package metrics

import (
	"fmt"
	"io"
	"math"
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
var LatencyBuckets = [...]float64{
	0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5,
}

// latencyNS are LatencyBuckets in nanoseconds: the request path compares
// integers.
var latencyNS = func() (ns [len(LatencyBuckets)]int64) {
	for i, b := range LatencyBuckets {
		ns[i] = int64(math.Round(b * float64(time.Second)))
	}
	return ns
}()

// Metrics owns the registry and the request-path series. Make it with New;
// a nil *Metrics records nothing (every request-path method checks).
type Metrics struct {
	reg *prometheus.Registry

	decisions *prometheus.CounterVec
	reasons   *prometheus.CounterVec

	verdict  [2][3]prometheus.Counter // [live, test][allow, review, block]
	refused  [refusalKinds]prometheus.Counter
	reasonMu sync.Mutex
	reasonC  [2]atomic.Pointer[map[string]prometheus.Counter] // by mode

	routesMu sync.Mutex
	routes   map[string]*Route
}

// New makes a registry with the Go runtime and process collectors, the
// build info, and the request-path series.
func New(version string) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), routes: map[string]*Route{}}
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	info := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "build_info",
		Help: "Always 1; the version label is the running build.", ConstLabels: prometheus.Labels{"version": version}})
	info.Set(1)
	m.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "decisions_total",
		Help: "Evaluate answers by decision; mode test: a test key, test token or the sandbox (samples are not counted)."},
		[]string{"mode", "decision"})
	m.reasons = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "decision_reasons_total",
		Help: "Reason codes in evaluate answers, by mode as in decisions_total (one answer can carry several)."},
		[]string{"mode", "reason"})
	refusals := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "refusals_total",
		Help: "Calls refused with 429 by a quota (hourly, monthly) or a limiter (per_address, lockout, challenge, collect_budget, token)."},
		[]string{"limit"})
	m.reg.MustRegister(info, m.decisions, m.reasons, refusals, &routeCollector{m: m,
		requests: Desc("http_requests_total", "HTTP requests answered, by route pattern (\"unmatched\": no route; \"unreadable\": refused while reading, without a latency) and status code.", "route", "status"),
		latency:  Desc("http_request_duration_seconds", "Time from the request handed to the handler to its answer ready to send (gzip included), by route pattern.", "route"),
	})
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

// Route is one route's request series: plain atomics side by side, read
// only when Prometheus scrapes, so that recording a request touches two or
// three words in one place (client_golang's histogram keeps two copies of
// its counts to make every scrape exactly consistent, at four atomic
// operations a request; a scrape here may see a request's bucket before its
// sum).
type Route struct {
	name    string
	status  [len(statusCodes)]atomic.Uint64
	buckets [len(LatencyBuckets) + 1]atomic.Uint64 // by bound; the last counts the slower ones
	sumNS   atomic.Int64

	mu    sync.Mutex
	other map[int]uint64 // statuses outside statusCodes
}

// statusCodes are the statuses with their own counter per route.
var statusCodes = [...]int{200, 201, 202, 204, 304, 400, 401, 403, 404, 405, 406, 408, 409, 413, 414, 415, 422, 429, 431, 500, 503}

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
// such as /v1/lookup/{ip}, never a raw path: labels must stay few); the same
// pattern gets the same series. Nil Metrics returns nil, which records
// nothing.
func (m *Metrics) Route(pattern string) *Route {
	if m == nil {
		return nil
	}
	m.routesMu.Lock()
	defer m.routesMu.Unlock()
	r := m.routes[pattern]
	if r == nil {
		r = &Route{name: pattern}
		m.routes[pattern] = r
	}
	return r
}

// Observe records one answered request.
func (r *Route) Observe(status int, took time.Duration) {
	if r == nil {
		return
	}
	ns := int64(took)
	i := 0
	for i < len(latencyNS) && ns > latencyNS[i] {
		i++
	}
	r.buckets[i].Add(1)
	r.sumNS.Add(ns)
	r.Count(status)
}

// Count records one answered request without its latency: for answers sent
// before a handler ran, whose start fasthttp does not stamp.
func (r *Route) Count(status int) {
	if r == nil {
		return
	}
	if i := statusSlot(status); i >= 0 {
		r.status[i].Add(1)
		return
	}
	r.mu.Lock()
	if r.other == nil {
		r.other = map[int]uint64{}
	}
	r.other[status]++
	r.mu.Unlock()
}

// routeCollector reports every route's requests and latency.
type routeCollector struct {
	m                 *Metrics
	requests, latency *prometheus.Desc
}

func (c *routeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.requests
	ch <- c.latency
}

func (c *routeCollector) Collect(ch chan<- prometheus.Metric) {
	c.m.routesMu.Lock()
	routes := make([]*Route, 0, len(c.m.routes))
	for _, r := range c.m.routes {
		routes = append(routes, r)
	}
	c.m.routesMu.Unlock()
	for _, r := range routes {
		counts := make(map[int]uint64)
		for i, code := range statusCodes {
			if n := r.status[i].Load(); n > 0 {
				counts[code] = n
			}
		}
		r.mu.Lock()
		for code, n := range r.other {
			counts[code] = n
		}
		r.mu.Unlock()
		for code, n := range counts {
			ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(n), r.name, strconv.Itoa(code))
		}
		var cum uint64
		bounds := make(map[float64]uint64, len(LatencyBuckets))
		for i, b := range LatencyBuckets {
			cum += r.buckets[i].Load()
			bounds[b] = cum
		}
		if count := cum + r.buckets[len(LatencyBuckets)].Load(); count > 0 {
			ch <- prometheus.MustNewConstHistogram(c.latency, count, time.Duration(r.sumNS.Load()).Seconds(), bounds, r.name)
		}
	}
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
