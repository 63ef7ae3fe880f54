package bench

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/valyala/fasthttp"
)

// Mode is how a driver paces requests.
type Mode string

const (
	// Closed is a closed loop: Conns workers, each sending its next request
	// as soon as the previous one is answered. It measures the most the
	// server (and this machine) can do.
	Closed Mode = "closed"
	// Open is an open loop: requests are due at a fixed rate whatever the
	// server does, and latency counts from the moment a request was due, so
	// a stall shows as the queueing it causes (no coordinated omission).
	Open Mode = "open"
)

// Latencies are recorded in microseconds between 1 µs and maxLatencyUS.
const (
	maxLatencyUS = 60_000_000
	sigFigs      = 3
	partSigFigs  = 2
)

// RunConfig says how to drive one workload against one target. The zero
// value is a 5-second closed loop on 16 connections after a 1-second warm-up.
type RunConfig struct {
	Mode Mode
	// Conns is the number of connections: workers in a closed loop, the
	// most requests in flight in an open loop. Default 16.
	Conns int
	// Rate is the open loop's arrival rate in requests per second.
	Rate float64
	// Duration is the measured window. Default 5s unless Requests is set.
	Duration time.Duration
	// Requests, when > 0, bounds the measured window by a request count
	// instead: a closed loop stops after that many measured requests; an
	// open loop schedules exactly that many (Duration = Requests / Rate).
	Requests int64
	// Warmup runs before the measured window; nothing in it is recorded.
	// Default 1s; negative means none. (defaults is idempotent: a config
	// passes through it more than once.)
	Warmup time.Duration
	// Timeout bounds one request. Default 5s.
	Timeout time.Duration
	// Drain is how long an open loop keeps sending requests that fell due in
	// the window but could not be sent in it (server too slow); the rest
	// count as missed. Default: Duration, at least 5s.
	Drain time.Duration
	// Seed makes the request mix reproducible. Default 1.
	Seed uint64

	// OnMeasureStart and OnMeasureEnd, when set, run at the start and the
	// end of the measured window (e.g. to sample a server's CPU time).
	OnMeasureStart func()
	OnMeasureEnd   func()
	// Progress, when set, is called about once a second while the run goes
	// on, from a goroutine of its own.
	Progress func(Progress)
}

// Progress is a run's state so far, for a live line.
type Progress struct {
	// Elapsed since the run started, warm-up included.
	Elapsed time.Duration
	// Measuring is false during the warm-up; the figures below cover the
	// measured window only.
	Measuring bool
	Requests  int64
	Errors    int64
	// RPS is answered requests per second of measured window so far.
	RPS float64
	// P99 of the measured answers so far.
	P99 time.Duration
}

// warmup is the warm-up to run (none when Warmup is negative).
func (c *RunConfig) warmup() time.Duration { return max(c.Warmup, 0) }

func (c *RunConfig) defaults() {
	if c.Mode == "" {
		c.Mode = Closed
	}
	if c.Conns <= 0 {
		c.Conns = 16
	}
	if c.Duration <= 0 && c.Requests <= 0 {
		c.Duration = 5 * time.Second
	}
	if c.Mode == Open && c.Requests > 0 && c.Rate > 0 {
		c.Duration = time.Duration(float64(c.Requests) / c.Rate * float64(time.Second))
	}
	if c.Warmup == 0 {
		c.Warmup = time.Second
	}
	if c.Timeout <= 0 {
		c.Timeout = 5 * time.Second
	}
	if c.Drain <= 0 {
		c.Drain = max(c.Duration, 5*time.Second)
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
}

// Result is what one driver run measured.
type Result struct {
	Mode  Mode
	Conns int
	Rate  float64 // open loop only
	// Window is the measured time: the configured duration, or for a
	// request-count bound or a drained open loop, until the last measured
	// request was answered.
	Window time.Duration
	// Requests is the number of measured requests answered (any status);
	// transport failures are not among them.
	Requests int64
	// Errors counts measured failures: HTTP status >= 400, transport
	// errors ("conn", "timeout": no answer, so not in Requests or Latency),
	// and (open loop) requests that fell due but were never sent.
	Errors int64
	// ErrorsBy breaks Errors down: "429", "500", …, "timeout", "conn",
	// "missed".
	ErrorsBy map[string]int64
	// Missed is the open loop's requests that fell due in the window and
	// could not be sent before the drain deadline (included in Errors).
	Missed int64
	// Latency of every measured answered request, in microseconds.
	Latency *hdrhistogram.Histogram
	// Parts breaks the counts down by workload part.
	Parts []PartResult
	// Timeline counts answers per interval of the window.
	Timeline Timeline
	// Interrupted is true when the run was stopped (ctx ended) before its
	// window or request count was complete.
	Interrupted bool
	// First429 is the first measured 429 answer, to tell why the server
	// refused (nil when none).
	First429 *Refusal
}

// Refusal is one 429 answer as the server gave it.
type Refusal struct {
	Body []byte
	// RateLimited: the answer carried X-RateLimit-Limit (an account cap,
	// not a per-address limit).
	RateLimited bool
}

// PartResult is one workload part's share of a run.
type PartResult struct {
	Name     string
	Requests int64
	Errors   int64
	Latency  *hdrhistogram.Histogram
}

// Timeline counts answered requests and errors per fixed interval from the
// start of the measured window.
type Timeline struct {
	Interval  time.Duration
	Completed []int64
	Errors    []int64
}

// RPS is the measured throughput: answered requests per second of window.
func (r *Result) RPS() float64 {
	if r.Window <= 0 {
		return 0
	}
	return float64(r.Requests) / r.Window.Seconds()
}

// worker accumulates one goroutine's measurements; merged at the end. mu
// guards it against the progress reporter (uncontended on the request path
// but for one short read a second).
type worker struct {
	mu       sync.Mutex
	first429 *Refusal
	hist     *hdrhistogram.Histogram
	parts    []partAcc
	errs     map[string]int64
	nerr     int64
	n        int64
	missed   int64
	lastDone time.Time
	tl       Timeline
}

type partAcc struct {
	n, errs int64
	hist    *hdrhistogram.Histogram
}

func newWorker(nparts int, interval time.Duration, buckets int) *worker {
	w := &worker{
		hist: hdrhistogram.New(1, maxLatencyUS, sigFigs),
		errs: map[string]int64{},
		tl:   Timeline{Interval: interval, Completed: make([]int64, buckets), Errors: make([]int64, buckets)},
	}
	w.parts = make([]partAcc, nparts)
	if nparts > 1 {
		for i := range w.parts {
			w.parts[i].hist = hdrhistogram.New(1, maxLatencyUS, partSigFigs)
		}
	}
	return w
}

// pct is the q-th percentile of h by nearest rank: the value of the
// ceil(q/100·n)-th smallest sample. The histogram's own ValueAtQuantile
// rounds the rank to nearest, which with few samples gives one rank low
// (p99.9 of 999 samples the second largest, not the largest).
func pct(h *hdrhistogram.Histogram, q float64) int64 {
	n := h.TotalCount()
	if n == 0 {
		return 0
	}
	k := max(math.Ceil(q/100*float64(n)-1e-9), 1)
	return h.ValueAtQuantile(100 * (k - 0.5 + 1e-6) / float64(n))
}

func recordUS(h *hdrhistogram.Histogram, d time.Duration) {
	us := (d + time.Microsecond - 1) / time.Microsecond
	_ = h.RecordValue(min(max(int64(us), 1), maxLatencyUS))
}

// record notes one measured answer (or failure) that completed at done,
// sinceStart after the window opened.
func (w *worker) record(part int, lat time.Duration, sinceStart time.Duration, errKey string, done time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	// A transport failure got no answer: an error, but neither a request
	// answered (req/s, and the server CPU per request, would count what the
	// server never saw) nor a latency (a refused dial's 40 µs would pull the
	// percentiles down).
	answered := !transportFailure(errKey)
	pa := &w.parts[part]
	if answered {
		w.n++
		recordUS(w.hist, lat)
		pa.n++
		if pa.hist != nil {
			recordUS(pa.hist, lat)
		}
	}
	b := int(max(sinceStart, 0) / w.tl.Interval)
	for b >= len(w.tl.Completed) {
		w.tl.Completed = append(w.tl.Completed, 0)
		w.tl.Errors = append(w.tl.Errors, 0)
	}
	if answered {
		w.tl.Completed[b]++
	}
	if errKey != "" {
		w.nerr++
		w.errs[errKey]++
		pa.errs++
		w.tl.Errors[b]++
	}
	if done.After(w.lastDone) {
		w.lastDone = done
	}
}

// note429 keeps the first 429 answer a worker saw.
func (w *worker) note429(errKey string, resp *fasthttp.Response) {
	if errKey != "429" || w.first429 != nil {
		return
	}
	w.mu.Lock()
	w.first429 = &Refusal{Body: append([]byte(nil), resp.Body()...), RateLimited: len(resp.Header.Peek("X-RateLimit-Limit")) > 0}
	w.mu.Unlock()
}

// outcome classifies one exchange: "" for success, else the error key.
// transportFailure reports whether an outcome key is an exchange that got
// no answer (outcome's "conn" and "timeout").
func transportFailure(key string) bool { return key == "conn" || key == "timeout" }

func outcome(err error, resp *fasthttp.Response) string {
	if err != nil {
		if errors.Is(err, fasthttp.ErrTimeout) || errors.Is(err, fasthttp.ErrDialTimeout) {
			return "timeout"
		}
		return "conn"
	}
	if c := resp.StatusCode(); c >= 400 {
		return statusKey(c)
	}
	return ""
}

var statusKeys sync.Map

func statusKey(code int) string {
	if k, ok := statusKeys.Load(code); ok {
		return k.(string)
	}
	k := strconv.Itoa(code)
	statusKeys.Store(code, k)
	return k
}

// pickInterval chooses a timeline interval giving about 50 points.
func pickInterval(window time.Duration) time.Duration {
	steps := []time.Duration{
		50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 250 * time.Millisecond,
		500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second,
		30 * time.Second, time.Minute,
	}
	for _, s := range steps {
		if window/s <= 60 {
			return s
		}
	}
	return 5 * time.Minute
}

// Run drives w against t as cfg says and returns what it measured. It stops
// early, with what it has, when ctx ends.
func Run(ctx context.Context, t *Target, w *Workload, cfg RunConfig) (*Result, error) {
	cfg.defaults()
	if len(w.Parts) == 0 {
		return nil, errors.New("workload has no parts")
	}
	if cfg.Mode == Open && cfg.Rate <= 0 {
		return nil, errors.New("open loop needs a rate > 0")
	}
	if cfg.Mode != Open && cfg.Mode != Closed {
		return nil, errors.New("mode must be closed or open")
	}
	w.prepare()
	expect := cfg.Duration
	if expect <= 0 {
		expect = 10 * time.Second
	}
	interval := pickInterval(expect)
	buckets := int(expect/interval) + 1
	workers := make([]*worker, cfg.Conns)
	for i := range workers {
		workers[i] = newWorker(len(w.Parts), interval, buckets)
	}
	var (
		res      *Result
		winStart time.Time
		winEnd   time.Time
	)
	if cfg.Progress != nil {
		stop := reportProgress(&cfg, workers)
		defer stop()
	}
	switch cfg.Mode {
	case Closed:
		winStart, winEnd = runClosed(ctx, t, w, &cfg, workers)
	case Open:
		winStart, winEnd = runOpen(ctx, t, w, &cfg, workers)
	}
	res = merge(w, &cfg, workers)
	res.Window = winEnd.Sub(winStart)
	res.Interrupted = ctx.Err() != nil
	return res, nil
}

// reportProgress calls cfg.Progress once a second until stop.
func reportProgress(cfg *RunConfig, workers []*worker) (stop func()) {
	start := time.Now()
	warmEnd := start.Add(cfg.warmup())
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		h := hdrhistogram.New(1, maxLatencyUS, partSigFigs)
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				// A tick that lands within a hair of the window's start has
				// nothing measured yet: it still counts as warm-up.
				p := Progress{Elapsed: now.Sub(start), Measuring: now.Sub(warmEnd) > 50*time.Millisecond}
				h.Reset()
				for _, wk := range workers {
					wk.mu.Lock()
					p.Requests += wk.n
					p.Errors += wk.nerr + wk.missed
					h.Merge(wk.hist)
					wk.mu.Unlock()
				}
				if p.Measuring {
					p.RPS = float64(p.Requests) / now.Sub(warmEnd).Seconds()
				}
				p.P99 = time.Duration(pct(h, 99)) * time.Microsecond
				cfg.Progress(p)
			}
		}
	}()
	return func() { close(done); <-finished }
}

// runClosed runs the closed loop; it returns the measured window.
func runClosed(ctx context.Context, t *Target, w *Workload, cfg *RunConfig, workers []*worker) (time.Time, time.Time) {
	start := time.Now()
	warmEnd := start.Add(cfg.warmup())
	var end time.Time // zero: bounded by count
	if cfg.Requests <= 0 {
		end = warmEnd.Add(cfg.Duration)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var tickets atomic.Int64
	var wg sync.WaitGroup
	for i, wk := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f := &Filler{Rand: rand.New(rand.NewPCG(cfg.Seed, uint64(i)+1))}
			req := fasthttp.AcquireRequest()
			resp := fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			for ctx.Err() == nil {
				sent := time.Now()
				if !end.IsZero() && !sent.Before(end) {
					return
				}
				measured := !sent.Before(warmEnd)
				if measured && cfg.Requests > 0 && tickets.Add(1) > cfg.Requests {
					return
				}
				part := w.Fill(req, f)
				err := t.Do(req, resp, cfg.Timeout)
				done := time.Now()
				if !measured || (!end.IsZero() && done.After(end)) {
					continue
				}
				key := outcome(err, resp)
				wk.note429(key, resp)
				wk.record(part, done.Sub(sent), done.Sub(warmEnd), key, done)
			}
		}()
	}
	sleepUntil(ctx, warmEnd)
	if cfg.OnMeasureStart != nil {
		cfg.OnMeasureStart()
	}
	if !end.IsZero() {
		if !sleepUntil(ctx, end) {
			end = time.Now() // stopped early
		}
		if cfg.OnMeasureEnd != nil {
			cfg.OnMeasureEnd()
		}
		cancel() // in-flight requests finish; nothing new is sent
		wg.Wait()
		return warmEnd, end
	}
	wg.Wait()
	if cfg.OnMeasureEnd != nil {
		cfg.OnMeasureEnd()
	}
	return warmEnd, lastDone(workers, warmEnd)
}

// runOpen runs the open loop. Request i of the whole run is due at
// start + i/Rate, whatever happened before. Each of the C workers owns one
// connection; a free worker takes the next request not yet taken, waits
// until it is due, and sends it: a request waits only while all C
// connections are busy, as it would behind a client's connection pool.
// Latency counts from the due time, so that wait is in the figures (no
// coordinated omission).
func runOpen(ctx context.Context, t *Target, w *Workload, cfg *RunConfig, workers []*worker) (time.Time, time.Time) {
	start := time.Now().Add(10 * time.Millisecond) // let the goroutines start
	warmEnd := start.Add(cfg.warmup())
	gap := float64(time.Second) / cfg.Rate
	due := func(i int64) time.Time { return start.Add(time.Duration(float64(i) * gap)) }
	first := int64(math.Ceil(float64(cfg.warmup()) / gap)) // first measured index
	last := first + int64(math.Ceil(float64(cfg.Duration)/gap))
	if cfg.Requests > 0 {
		last = first + cfg.Requests
	}
	winEnd := warmEnd.Add(cfg.Duration)
	deadline := winEnd.Add(cfg.Drain)
	var next atomic.Int64
	var wg sync.WaitGroup
	for k, wk := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f := &Filler{Rand: rand.New(rand.NewPCG(cfg.Seed, uint64(k)+1))}
			req := fasthttp.AcquireRequest()
			resp := fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			sl := newSleeper()
			defer sl.stop()
			for {
				i := next.Add(1) - 1
				if i >= last {
					return
				}
				at := due(i)
				if !sl.until(ctx, at) {
					return // stopped
				}
				if time.Now().After(deadline) {
					// Past the drain deadline: what is left is missed.
					if i >= first {
						wk.mu.Lock()
						wk.missed++
						wk.mu.Unlock()
					}
					continue
				}
				part := w.Fill(req, f)
				err := t.Do(req, resp, cfg.Timeout)
				done := time.Now()
				if i < first {
					continue
				}
				key := outcome(err, resp)
				wk.note429(key, resp)
				wk.record(part, done.Sub(at), done.Sub(warmEnd), key, done)
			}
		}()
	}
	sleepUntil(ctx, warmEnd)
	if cfg.OnMeasureStart != nil {
		cfg.OnMeasureStart()
	}
	wg.Wait()
	if cfg.OnMeasureEnd != nil {
		cfg.OnMeasureEnd()
	}
	end := lastDone(workers, warmEnd)
	if end.Before(winEnd) && ctx.Err() == nil {
		end = winEnd
	}
	return warmEnd, end
}

func lastDone(workers []*worker, floor time.Time) time.Time {
	end := floor
	for _, w := range workers {
		if w.lastDone.After(end) {
			end = w.lastDone
		}
	}
	return end
}

// sleeper is one worker's reusable timer (an open loop sleeps before most
// requests).
type sleeper struct{ t *time.Timer }

func newSleeper() *sleeper {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &sleeper{t: t}
}

func (s *sleeper) stop() { s.t.Stop() }

// until sleeps until at or until ctx ends; it reports whether at came.
func (s *sleeper) until(ctx context.Context, at time.Time) bool {
	d := time.Until(at)
	if d <= 0 {
		return ctx.Err() == nil
	}
	s.t.Reset(d) // Go ≥ 1.23: no stale value can be left in the channel
	select {
	case <-s.t.C:
		return true
	case <-ctx.Done():
		s.t.Stop()
		return false
	}
}

// sleepUntil sleeps until t or until ctx ends; it reports whether t came.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func merge(w *Workload, cfg *RunConfig, workers []*worker) *Result {
	res := &Result{
		Mode:     cfg.Mode,
		Conns:    cfg.Conns,
		ErrorsBy: map[string]int64{},
		Latency:  hdrhistogram.New(1, maxLatencyUS, sigFigs),
		Parts:    make([]PartResult, len(w.Parts)),
	}
	if cfg.Mode == Open {
		res.Rate = cfg.Rate
	}
	for i, p := range w.Parts {
		res.Parts[i] = PartResult{Name: p.Name, Latency: hdrhistogram.New(1, maxLatencyUS, partSigFigs)}
	}
	res.Timeline.Interval = workers[0].tl.Interval
	for _, wk := range workers {
		if res.First429 == nil {
			res.First429 = wk.first429
		}
		res.Requests += wk.n
		res.Errors += wk.nerr + wk.missed
		res.Missed += wk.missed
		res.Latency.Merge(wk.hist)
		for k, v := range wk.errs {
			res.ErrorsBy[k] += v
		}
		for i := range wk.parts {
			res.Parts[i].Requests += wk.parts[i].n
			res.Parts[i].Errors += wk.parts[i].errs
			if wk.parts[i].hist != nil {
				res.Parts[i].Latency.Merge(wk.parts[i].hist)
			}
		}
		for len(res.Timeline.Completed) < len(wk.tl.Completed) {
			res.Timeline.Completed = append(res.Timeline.Completed, 0)
			res.Timeline.Errors = append(res.Timeline.Errors, 0)
		}
		for b := range wk.tl.Completed {
			res.Timeline.Completed[b] += wk.tl.Completed[b]
			res.Timeline.Errors[b] += wk.tl.Errors[b]
		}
	}
	if res.Missed > 0 {
		res.ErrorsBy["missed"] += res.Missed
	}
	if len(w.Parts) == 1 {
		res.Parts[0].Latency = res.Latency
	}
	return res
}
