package checks

import (
	"bytes"
	"errors"
	"log/slog"
	"net/netip"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/actors/devicehist"
	"github.com/fraudd/fraudd/actors/events"
	"github.com/fraudd/fraudd/actors/iplimit"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/intel/device"
	"github.com/fraudd/fraudd/storage"
)

// goid is the current goroutine's id, read from its stack header (tests
// only): a call made on the caller's goroutine is a round trip it waits on,
// one made on an actor's is a hop of a chain.
func goid() uint64 {
	var b [64]byte
	n := runtime.Stack(b[:], false)
	f := bytes.Fields(b[:n])
	id, _ := strconv.ParseUint(string(f[1]), 10, 64)
	return id
}

// hops counts the actor calls of the pipeline by kind and by where they
// were made: on the caller's goroutine (a round trip, blocking or the start
// of a chain) or on an actor's (a chain handed on).
type hops struct {
	mu     sync.Mutex
	caller uint64
	trips  int            // round trips the caller waited on
	by     map[string]int // every call, by actor
	// inChain is how many chained calls the caller's goroutine is inside:
	// a shard that runs its mailbox inline (actors.InlineRuns) hands the
	// chain on from the caller's own goroutine, within the call that started
	// it, and that is part of the one round trip, not a second one.
	inChain int
}

func (h *hops) note(actor string, chained bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.by[actor]++
	onCaller := goid() == h.caller
	if !chained || (onCaller && h.inChain == 0) {
		h.trips++
	}
}

// chained runs a chained call, noting it, and keeps count of the chained
// calls the caller's goroutine is inside.
func (h *hops) chained(actor string, call func()) {
	h.note(actor, true)
	h.mu.Lock()
	onCaller := goid() == h.caller
	if onCaller {
		h.inChain++
	}
	h.mu.Unlock()
	call()
	if onCaller {
		h.mu.Lock()
		h.inChain--
		h.mu.Unlock()
	}
}

func (h *hops) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.caller, h.trips, h.by, h.inChain = goid(), 0, map[string]int{}, 0
}

// The real actor clients, counted.
type (
	countedLimiter struct {
		*iplimit.Client
		h *hops
	}
	countedQuota struct {
		*quota.Client
		h *hops
	}
	countedEvents struct {
		*events.Client
		h *hops
	}
	countedHistory struct {
		*devicehist.Client
		h *hops
	}
)

func (l countedLimiter) Take(k iplimit.Kinds, a netip.Addr, n time.Time) (iplimit.Verdict, error) {
	l.h.note("iplimit", false)
	return l.Client.Take(k, a, n)
}
func (l countedLimiter) TakeThen(st iplimit.TakeStep) {
	l.h.chained("iplimit", func() { l.Client.TakeThen(st) })
}
func (q countedQuota) Charge(c quota.Charge) (quota.ChargeResult, error) {
	q.h.note("quota", false)
	return q.Client.Charge(c)
}
func (q countedQuota) ChargeThen(st quota.ChargeStep) {
	q.h.chained("quota", func() { q.Client.ChargeThen(st) })
}
func (e countedEvents) Resolve(r events.Resolve) (events.Resolved, error) {
	e.h.note("events", false)
	return e.Client.Resolve(r)
}
func (e countedEvents) ResolveThen(st events.ResolveStep) {
	e.h.chained("events", func() { e.Client.ResolveThen(st) })
}
func (d countedHistory) Observe(o devicehist.Observation) (devicehist.Facts, error) {
	d.h.note("devicehist", false)
	return d.Client.Observe(o)
}
func (d countedHistory) ObserveThen(st devicehist.ObserveStep) {
	d.h.chained("devicehist", func() { d.Client.ObserveThen(st) })
}

// usageStore is a quota.Store in memory, so that charges wait for the group
// committer as they do on a real store.
type usageStore struct {
	mu sync.Mutex
	n  int
	// fail, when set, is what ApplyUsage answers.
	fail error
}

func (s *usageStore) LoadUsage(string, storage.Month) (storage.MonthCounts, storage.Totals, error) {
	return storage.MonthCounts{}, storage.Totals{}, nil
}

func (s *usageStore) ApplyUsage(d []storage.UsageDelta) error {
	if s.fail != nil {
		return s.fail
	}
	s.mu.Lock()
	s.n += len(d)
	s.mu.Unlock()
	return nil
}

type realPipeline struct {
	*Service
	h      *hops
	events *events.Client
	view   *accounts.View
	store  *usageStore
}

func newRealPipeline(t testing.TB) *realPipeline { return newPipelineOf(t, false) }

// newPipelineOf builds the pipeline over real actors, counting their calls
// in tests (not in benchmarks); blocking hides their chained calls, so that
// every hop is a round trip of its own, as before the chain.
func newPipelineOf(t testing.TB, blocking bool) *realPipeline {
	t.Helper()
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	h := &hops{}
	lim := iplimit.New(sys.Root, iplimit.Config{Shards: 2})
	store := &usageStore{}
	q := quota.New(sys.Root, quota.Config{Shards: 2, Store: store, Logger: slog.New(slog.DiscardHandler)})
	ev := events.New(sys.Root, events.Config{Shards: 2})
	t.Cleanup(func() { _ = lim.Stop(); _ = q.Stop(); _ = ev.Stop() })
	fa := newFakeAccounts()
	hist := newDeviceHist(t)
	cfg := Config{Accounts: fa, Limits: lim, Quota: q, Feeds: testFeeds(t), Events: ev, History: hist, Logger: slog.New(slog.DiscardHandler)}
	if _, bench := t.(*testing.B); !bench {
		cfg.Limits, cfg.Quota, cfg.Events, cfg.History = countedLimiter{lim, h}, countedQuota{q, h}, countedEvents{ev, h}, countedHistory{hist, h}
	}
	if blocking {
		cfg.Limits, cfg.Quota = struct{ Limiter }{cfg.Limits}, struct{ Quota }{cfg.Quota}
		cfg.Events, cfg.History = struct{ Events }{cfg.Events}, struct{ History }{cfg.History}
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &realPipeline{Service: s, h: h, events: ev, view: fa.view, store: store}
}

// event collects a device event for the fake account.
func (p *realPipeline) event(t testing.TB, visitor string) string {
	t.Helper()
	id, err := p.events.Collect(events.Collected{Account: p.view.ID, Now: fixedNow, Verdict: &device.Verdict{VisitorID: visitor, Complete: true}})
	if err != nil {
		t.Fatal(err)
	}
	return events.FormatEventID(id)
}

// evaluate admits a live-key caller and evaluates req, counting the hops.
func (p *realPipeline) evaluate(t testing.TB, req *EvalRequest) (*Evaluation, *Refusal) {
	t.Helper()
	p.h.reset()
	c := &Call{Addr: netip.MustParseAddr("73.0.0.1"), Now: fixedNow}
	if ref := p.Admit(c, Credential{Key: "sk_live_unit"}, AccessEvaluate); ref != nil {
		return nil, ref
	}
	return p.Evaluate(c, req)
}

// TestLiveEvaluationOneRoundTrip: a live evaluation with a device event and
// an accountId waits on one round trip (it waited on four: the limiter, the
// quota, the event, the history, one after another), while every actor
// still does its part; a lookup waits on one (it waited on two).
func TestLiveEvaluationOneRoundTrip(t *testing.T) {
	p := newRealPipeline(t)
	req := &EvalRequest{FingerprintEventID: p.event(t, "visitor-1"), AccountID: "user-1"}
	for i := range 3 { // the first resolve, then replays: the same hops
		ev, ref := p.evaluate(t, req)
		if ref != nil {
			t.Fatalf("refused: %+v", ref)
		}
		body := ev.Body()
		if body.Device == nil || body.DeviceStatus != "ok" || body.Device.CustomerHistory == nil || body.Account == nil {
			t.Fatalf("evaluation %d lacks its facts: status %q device %+v account %+v", i, body.DeviceStatus, body.Device, body.Account)
		}
		ev.Release()
		want := map[string]int{"iplimit": 1, "quota": 1, "events": 1, "devicehist": 1}
		if p.h.trips != 1 || !sameCounts(p.h.by, want) {
			t.Fatalf("evaluation %d: %d round trips over %v; want 1 over %v", i, p.h.trips, p.h.by, want)
		}
	}
	if p.store.n == 0 {
		t.Fatal("the charges were not committed")
	}

	// A lookup: the limiters and the charge in one round trip.
	p.h.reset()
	c := &Call{Addr: netip.MustParseAddr("73.0.0.1"), Now: fixedNow}
	if ref := p.Admit(c, Credential{Key: "sk_live_unit"}, AccessLookup); ref != nil {
		t.Fatal(ref.Msg)
	}
	if _, ref := p.Lookup(c, PathTarget("1.1.1.1")); ref != nil {
		t.Fatal(ref.Msg)
	}
	if want := map[string]int{"iplimit": 1, "quota": 1}; p.h.trips != 1 || !sameCounts(p.h.by, want) {
		t.Fatalf("lookup: %d round trips over %v; want 1 over %v", p.h.trips, p.h.by, want)
	}
}

// TestRefusedChainRecordsNoDeviceUse: a call the quota refuses ends the
// chain there: its event is not resolved (no use recorded) and nothing is
// observed.
func TestRefusedChainRecordsNoDeviceUse(t *testing.T) {
	p := newRealPipeline(t)
	one := int64(1)
	p.view.Plan, p.view.HourlyLimit = quota.PlanCustom, &one
	req := &EvalRequest{FingerprintEventID: p.event(t, "visitor-2"), AccountID: "user-2"}
	ev, ref := p.evaluate(t, req)
	if ref != nil {
		t.Fatalf("first call refused: %+v", ref)
	}
	ev.Release()
	_, ref = p.evaluate(t, req)
	if ref == nil || ref.Status != 429 || ref.Msg != MsgHourly {
		t.Fatalf("second call: %+v", ref)
	}
	if want := map[string]int{"iplimit": 1, "quota": 1}; p.h.trips != 1 || !sameCounts(p.h.by, want) {
		t.Fatalf("refused: %d round trips over %v; want 1 over %v", p.h.trips, p.h.by, want)
	}
	id, _ := events.ParseEventID(req.FingerprintEventID)
	res, err := p.events.Resolve(events.Resolve{ID: id, Account: p.view.ID, Now: fixedNow})
	if err != nil || !res.Found || res.Event.Uses != 1 {
		t.Fatalf("the event was used %d times (found %v, %v); want once, by the allowed call", res.Event.Uses, res.Found, err)
	}
}

// TestChainCommitFailureAnswers503: a charge whose commit fails is answered
// 503, not as charged, its increment undone and its event not resolved.
func TestChainCommitFailureAnswers503(t *testing.T) {
	p := newRealPipeline(t)
	one := int64(1)
	p.view.Plan, p.view.HourlyLimit = quota.PlanCustom, &one
	p.store.fail = errors.New("disk full")
	req := &EvalRequest{FingerprintEventID: p.event(t, "visitor-6"), AccountID: "user-6"}
	ev, ref := p.evaluate(t, req)
	if ref == nil {
		ev.Release()
		t.Fatal("a call whose charge was not stored was answered 200")
	}
	if ref.Status != RefuseStorage.Status || ref.Msg != RefuseStorage.Msg || !errors.Is(ref.Cause, quota.ErrUnavailable) {
		t.Fatalf("refusal %+v (cause %v); want %+v", ref, ref.Cause, RefuseStorage)
	}
	id, _ := events.ParseEventID(req.FingerprintEventID)
	res, err := p.events.Resolve(events.Resolve{ID: id, Account: p.view.ID, Now: fixedNow})
	if err != nil || !res.Found || res.Event.Uses != 0 {
		t.Fatalf("the event was used %d times (found %v, %v) by a call answered 503", res.Event.Uses, res.Found, err)
	}
	// The increment was undone: with a cap of one an hour, the next call
	// (the store working again) is admitted, and the one after refused.
	p.store.fail = nil
	ev, ref = p.evaluate(t, &EvalRequest{AccountID: "user-6"})
	if ref != nil {
		t.Fatalf("after the failed commit: %+v", ref)
	}
	ev.Release()
	if _, ref = p.evaluate(t, &EvalRequest{AccountID: "user-6"}); ref == nil || ref.Status != 429 {
		t.Fatalf("over the cap: %+v", ref)
	}
}

// TestChainFailsOpenOnStoppedFacts: an event actor that cannot take the
// chain (stopped) leaves the device out; the history still runs and the
// call is answered.
func TestChainFailsOpenOnStoppedFacts(t *testing.T) {
	p := newRealPipeline(t)
	req := &EvalRequest{FingerprintEventID: p.event(t, "visitor-3"), AccountID: "user-3"}
	if err := p.events.Stop(); err != nil {
		t.Fatal(err)
	}
	ev, ref := p.evaluate(t, req)
	if ref != nil {
		t.Fatalf("refused: %+v", ref)
	}
	defer ev.Release()
	if b := ev.Body(); b.DeviceStatus != "unavailable" || b.Device != nil || b.Account == nil {
		t.Fatalf("status %q device %+v account %+v", b.DeviceStatus, b.Device, b.Account)
	}
	if p.h.trips != 1 || p.h.by["devicehist"] != 1 {
		t.Fatalf("%d round trips over %v", p.h.trips, p.h.by)
	}
}

// BenchmarkLiveEvaluation is a live evaluation with a device event and an
// accountId through the pipeline over real actors (the quota waiting for
// its group committer), its hops as four round trips (blocking, as before
// the chain) and as one chained call.
func BenchmarkLiveEvaluation(b *testing.B) {
	for _, blocking := range []bool{true, false} {
		name := "chained"
		if blocking {
			name = "blocking"
		}
		b.Run(name, func(b *testing.B) {
			p := newPipelineOf(b, blocking)
			p.view.Plan = quota.PlanPublicInterest
			req := &EvalRequest{FingerprintEventID: p.event(b, "visitor-b"), AccountID: "user-b"}
			c := &Call{Addr: netip.MustParseAddr("73.0.0.1"), Now: fixedNow}
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				*c = Call{Addr: c.Addr, Now: fixedNow}
				if ref := p.Admit(c, Credential{Key: "sk_live_unit"}, AccessEvaluate); ref != nil {
					b.Fatal(ref.Msg)
				}
				ev, ref := p.Evaluate(c, req)
				if ref != nil {
					b.Fatal(ref.Msg)
				}
				ev.Release()
			}
			// Process CPU (every goroutine: caller, actors, committer) per
			// evaluation, the figure fraudbench's srv µs/req is made of.
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
	// 16 callers at once, as fraudbench's connections: the shards are
	// contended and the committer's groups grow.
	b.Run("chained-16", func(b *testing.B) {
		p := newPipelineOf(b, false)
		p.view.Plan = quota.PlanPublicInterest
		// As fraudbench's evaluate-live: 4,096 bodies over 700 devices, an
		// account id each (so a device sees about six accounts).
		ids := make([]string, 700)
		for i := range ids {
			ids[i] = p.event(b, "visitor-p"+strconv.Itoa(i))
		}
		reqs := make([]EvalRequest, 4096)
		for j := range reqs {
			reqs[j] = EvalRequest{FingerprintEventID: ids[j%len(ids)], AccountID: "u_" + strconv.Itoa(j*7919%5000)}
		}
		var next atomic.Int64
		b.SetParallelism(8)
		b.ReportAllocs()
		cpu0 := cpuTime()
		b.RunParallel(func(pb *testing.PB) {
			c := &Call{}
			for pb.Next() {
				i := next.Add(1)
				*c = Call{Addr: netip.AddrFrom4([4]byte{73, 0, byte(i >> 8), byte(i)}), Now: fixedNow}
				if ref := p.Admit(c, Credential{Key: "sk_live_unit"}, AccessEvaluate); ref != nil {
					b.Fatal(ref.Msg)
				}
				req := reqs[i%int64(len(reqs))]
				ev, ref := p.Evaluate(c, &req)
				if ref != nil {
					b.Fatal(ref.Msg)
				}
				ev.Release()
			}
		})
		b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
	})
}

// BenchmarkLookupChain is a lookup through the pipeline over real actors:
// the limiters and the durable charge as two round trips (blocking) and as
// one chained call.
func BenchmarkLookupChain(b *testing.B) {
	for _, blocking := range []bool{true, false} {
		name := "chained"
		if blocking {
			name = "blocking"
		}
		b.Run(name, func(b *testing.B) {
			p := newPipelineOf(b, blocking)
			p.view.Plan = quota.PlanPublicInterest
			c := &Call{}
			t := PathTarget("1.1.1.1")
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				*c = Call{Addr: netip.MustParseAddr("73.0.0.1"), Now: fixedNow}
				if ref := p.Admit(c, Credential{Key: "sk_live_unit"}, AccessLookup); ref != nil {
					b.Fatal(ref.Msg)
				}
				if _, ref := p.Lookup(c, t); ref != nil {
					b.Fatal(ref.Msg)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func sameCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

var _ actors.Failer = (*chain)(nil)

// TestSettleTakesLeftLimiters: limiters Admit left for a charge that never
// came are taken once the operation returned, once.
func TestSettleTakesLeftLimiters(t *testing.T) {
	ts := newTestService(t, Config{})
	c := &Call{Addr: netip.MustParseAddr("73.0.0.1"), Now: fixedNow}
	if ref := ts.Admit(c, Credential{Key: "sk_live_unit"}, AccessLookup); ref != nil {
		t.Fatal(ref.Msg)
	}
	if len(ts.limits.taken) != 0 {
		t.Fatalf("Admit took %v for a chained access", ts.limits.taken)
	}
	ts.Settle(c)
	ts.Settle(c)
	if len(ts.limits.taken) != 1 || ts.limits.taken[0] != iplimit.Of(iplimit.AuthFail, iplimit.Protect) {
		t.Fatalf("settled %v", ts.limits.taken)
	}
	// After a charge there is nothing left to settle.
	c = &Call{Addr: netip.MustParseAddr("73.0.0.1"), Now: fixedNow}
	if ref := ts.Admit(c, Credential{Key: "sk_live_unit"}, AccessLookup); ref != nil {
		t.Fatal(ref.Msg)
	}
	if _, ref := ts.Lookup(c, PathTarget("1.1.1.1")); ref != nil {
		t.Fatal(ref.Msg)
	}
	ts.Settle(c)
	if len(ts.limits.taken) != 2 {
		t.Fatalf("took %v", ts.limits.taken)
	}
}
