package checks

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/actors/devicehist"
	"github.com/fraudd/fraudd/actors/events"
	"github.com/fraudd/fraudd/actors/iplimit"
	"github.com/fraudd/fraudd/actors/quota"
)

// chain is a counted call's actor work as one message that visits the
// actors in turn and answers its caller once: the per-address limiters Admit
// left for it (iplimit), the charge (quota, answered once counted or once
// its increment is committed, as the store's durability allows), then for
// a visitor check the device event (events) and the customer's history
// (devicehist). Each actor hands the chain to the next from the goroutine
// it runs on (its worker's, or the sender's when it found the shard idle:
// actors.InlineRuns); the caller sends it once and waits once (run), so a
// live evaluation costs at most one blocking round trip, not four — none
// when every shard it visits runs inline — and no goroutine or future per
// request.
//
// A refusal ends the chain where it happens: a call the limiter or the quota
// refused resolves no event and records no device use. The facts fail open:
// an event or history that could not be read is left out of the answer, as
// in facts.go.
//
// Ownership: between run's send and the answer on done, the chain belongs to
// whichever actor holds it, and nothing else may touch it. A chain whose
// caller stopped waiting (timeout) is abandoned to the actors, never pooled.
type chain struct {
	s *Service

	// The plan, set by the caller before run.
	take     iplimit.Take // Kinds 0: nothing left to take
	charge   quota.Charge
	resolve  events.Resolve
	resolveP bool                   // resolve the event
	obs      devicehist.Observation // DeviceID set once the event resolved
	observe  devicehist.Prepared    // obs, ready for the history's shard
	observeP bool                   // observe the history (after the event, which names the device)

	// The results, each set by the step that ran.
	verdict  iplimit.Verdict
	takeErr  error
	res      quota.ChargeResult
	chargeEr error
	resolved events.Resolved
	eventErr error
	facts    devicehist.Facts
	histErr  error

	// stage is the step under way (stage*), set before the chain is sent
	// on: Fail reads it to know what failed, and a caller that timed out
	// reads it to know whether the charge went through.
	stage atomic.Uint32
	// begun is taken once, by whoever is first: the quota client about to
	// make the charge (Begin), or the caller giving up on a charge not
	// begun, which the client then drops.
	begun atomic.Bool
	// givenUp: the caller answered without waiting for the rest (its wait
	// timed out); the event's shard then counts no use (events.GivenUp).
	givenUp atomic.Bool
	// abandoned: the caller's wait ran out (run answered timedOut). The
	// caller's own field: the chain may still answer, and its answer's
	// token in done must never reach the pool's next user.
	abandoned bool
	done      chan struct{}
	timer     *time.Timer
}

const (
	stageTake uint32 = iota + 1
	stageCharge
	stageResolve
	stageObserve
	stageDone
)

// chainTimeout bounds run's wait: the limiter, the quota's commit and the
// facts together. A var for tests.
var chainTimeout = 5 * time.Second

var chains = sync.Pool{New: func() any { return &chain{done: make(chan struct{}, 1)} }}

// newChain returns a chain charging c by its row of the charge table, that
// first takes the limiters Admit left in c.
func (s *Service) newChain(c *Call, o outcome) *chain {
	ch := chains.Get().(*chain)
	ch.s = s
	if c.limits != 0 {
		ch.take = iplimit.Take{Kinds: c.limits, Addr: c.Addr, Now: c.Now}
		c.limits = 0
	}
	row := charges[o]
	v := c.Auth.View
	ch.charge = quota.Charge{
		Account: v.ID, Bucket: bucketOf(c.Auth.Kind), Kind: row.kind, Limits: limitsOf(v, c.Now),
		Hourly: true, Monthly: row.monthly, Total: row.total == totalLiveKey && c.liveKey(), Now: c.Now,
	}
	return ch
}

// release returns a chain that answered to the pool.
func (ch *chain) release() {
	if ch.abandoned || ch.stage.Load() != stageDone {
		return // an actor may still hold it, or its late answer sit in done
	}
	t, done := ch.timer, ch.done
	*ch = chain{timer: t, done: done}
	chains.Put(ch)
}

// run sends the chain and waits once for its answer. The refusal is the
// limiter's or the quota's (c.RateLimit set as by charge); nil means the
// call was charged and the facts asked for are in the chain (or their
// errors). On a timeout after the charge went through, the call goes on
// without facts (timedOut).
func (s *Service) run(c *Call, ch *chain) (ref *Refusal, timedOut bool) {
	if ch.take.Kinds != 0 {
		ch.stage.Store(stageTake)
		s.chLimits.TakeThen(ch)
	} else {
		ch.toCharge()
	}
	if !ch.wait() && !ch.chargeBegun() {
		ch.givenUp.Store(true)
		ch.abandoned = true
		switch st := ch.stage.Load(); {
		case st == stageTake:
			ref = ServerError(fmt.Errorf("per-address limits: %w", actors.ErrTimeout))
			ref.Admission = true
			return ref, true
		case st < stageResolve:
			return storageUnavailable(fmt.Errorf("quota charge for %s: %w", ch.charge.Account, actors.ErrTimeout)), true
		}
		// The charge went through (its result is final): answer without
		// the facts still under way.
		setRateLimit(c, &ch.res)
		return nil, true
	}
	if ch.take.Kinds != 0 {
		if ch.takeErr != nil {
			ref = ServerError(fmt.Errorf("per-address limits: %w", ch.takeErr))
		} else if !ch.verdict.Allowed {
			ref = limitRefusal(ch.verdict)
		}
		if ref != nil {
			ref.Admission = true
			return ref, false
		}
	}
	return chargeRefusal(c, ch.res, ch.chargeEr), false
}

// wait blocks until the chain answered or chainTimeout passed.
func (ch *chain) wait() bool {
	select {
	case <-ch.done:
		return true
	default:
	}
	if ch.timer == nil {
		ch.timer = time.NewTimer(chainTimeout)
	} else {
		ch.timer.Reset(chainTimeout)
	}
	select {
	case <-ch.done:
		ch.timer.Stop()
		return true
	case <-ch.timer.C:
		return false
	}
}

// chargeBegun is the caller's side of Begin, after its wait timed out:
// when the charge has not begun, it never will (nothing was charged, and
// the 503 says so); when it is under way, the caller waits once more for
// it (the quota clients bound their own work: a remote owner's route, a
// store's commit), since a 503 now could hide a counted call. True when
// the chain answered meanwhile.
func (ch *chain) chargeBegun() bool {
	if ch.stage.Load() != stageCharge || ch.begun.CompareAndSwap(false, true) {
		return false
	}
	return ch.wait()
}

// Begin implements quota.Beginner: the charge is about to be made; false
// when the caller stopped waiting first.
func (ch *chain) Begin() bool { return ch.begun.CompareAndSwap(false, true) }

func (ch *chain) finish() {
	ch.stage.Store(stageDone)
	ch.done <- struct{}{}
}

// The steps, in order. Each runs on the goroutine of the actor that just
// answered (or on the sender's, for Fail) and sends the chain on.

func (ch *chain) toCharge() {
	ch.stage.Store(stageCharge)
	ch.s.chQuota.ChargeThen(ch)
}

func (ch *chain) toResolve() {
	if !ch.resolveP {
		ch.toObserve()
		return
	}
	ch.stage.Store(stageResolve)
	ch.s.chEvents.ResolveThen(ch)
}

func (ch *chain) toObserve() {
	if !ch.observeP || ch.obs.DeviceID == "" && ch.obs.AccountID == "" {
		ch.finish()
		return
	}
	ch.stage.Store(stageObserve)
	ch.s.chHistory.ObserveThen(ch)
}

// TakeReq implements iplimit.TakeStep.
func (ch *chain) TakeReq() *iplimit.Take { return &ch.take }

// Taken implements iplimit.TakeStep.
func (ch *chain) Taken(v iplimit.Verdict) {
	ch.verdict = v
	if !v.Allowed {
		ch.finish()
		return
	}
	ch.toCharge()
}

// ChargeReq implements quota.ChargeStep.
func (ch *chain) ChargeReq() *quota.Charge { return &ch.charge }

// Charged implements quota.ChargeStep.
func (ch *chain) Charged(res quota.ChargeResult, err error) {
	ch.res, ch.chargeEr = res, err
	if err != nil || !res.Allowed {
		ch.finish()
		return
	}
	ch.toResolve()
}

// GivenUp implements events.GivenUp.
func (ch *chain) GivenUp() bool { return ch.givenUp.Load() }

var _ events.GivenUp = (*chain)(nil)

// ResolveReq implements events.ResolveStep.
func (ch *chain) ResolveReq() *events.Resolve { return &ch.resolve }

// Resolved implements events.ResolveStep.
func (ch *chain) Resolved(r events.Resolved, err error) {
	ch.resolved, ch.eventErr = r, err
	if err == nil && r.Found {
		ch.obs.DeviceID, ch.obs.Replayed = r.Event.VisitorID, r.Replayed
		ch.observe.SetDevice(r.Event.VisitorID)
		ch.observe.SetReplayed(r.Replayed)
	}
	ch.toObserve()
}

// OwnerWork implements OwnerStep: the event and the history, when the
// chain asks for them, travel with the charge to a remote owner.
func (ch *chain) OwnerWork() OwnerWork {
	var w OwnerWork
	if ch.resolveP {
		w.Resolve = &ch.resolve
	}
	if ch.observeP {
		w.Observe = &ch.obs
	}
	return w
}

// OwnerDone implements OwnerStep: the owner did the rest of the chain.
func (ch *chain) OwnerDone(r OwnerResult) {
	ch.res, ch.chargeEr = r.Charge, r.ChargeErr
	ch.resolved, ch.eventErr = r.Resolved, r.EventErr
	ch.facts, ch.histErr = r.Facts, r.HistErr
	ch.finish()
}

// ObserveReq implements devicehist.ObserveStep.
func (ch *chain) ObserveReq() *devicehist.Prepared { return &ch.observe }

// Observed implements devicehist.ObserveStep.
func (ch *chain) Observed(f devicehist.Facts, err error) {
	ch.facts, ch.histErr = f, err
	ch.finish()
}

// Fail implements actors.Failer: the actor of the step under way could not
// take it (down, stopping). The admission steps end the chain with the
// error; the facts fail open and the chain goes on.
func (ch *chain) Fail(err error) {
	switch ch.stage.Load() {
	case stageTake:
		ch.takeErr = err
		ch.finish()
	case stageCharge:
		ch.chargeEr = err
		ch.finish()
	case stageResolve:
		ch.eventErr = err
		ch.toObserve()
	case stageObserve:
		ch.histErr = err
		ch.finish()
	}
}

// The chained forms of the actor calls. The actor clients offer them
// (TakeThen, ChargeThen, ResolveThen, ObserveThen); a part that offers only
// the blocking call (a test fake) is wrapped in one that runs it on the
// sender's goroutine, so the flow is the same.
type (
	chainLimiter interface{ TakeThen(iplimit.TakeStep) }
	chainQuota   interface{ ChargeThen(quota.ChargeStep) }
	chainEvents  interface {
		ResolveThen(events.ResolveStep)
	}
	chainHistory interface {
		Prepare(devicehist.Observation, *devicehist.Prepared) error
		ObserveThen(devicehist.ObserveStep)
	}
)

// chainParts sets the chained form of each part.
func (s *Service) chainParts() {
	var ok bool
	if s.chLimits, ok = s.limits.(chainLimiter); !ok {
		s.chLimits = syncLimiter{s.limits}
	}
	if s.chQuota, ok = s.quota.(chainQuota); !ok {
		s.chQuota = syncQuota{s.quota}
	}
	if s.chEvents, ok = s.events.(chainEvents); !ok {
		s.chEvents = syncEvents{s.events}
	}
	if s.chHistory, ok = s.history.(chainHistory); !ok {
		s.chHistory = syncHistory{s.history}
	}
}

type (
	syncLimiter struct{ Limiter }
	syncQuota   struct{ Quota }
	syncEvents  struct{ Events }
	syncHistory struct{ History }
)

func (l syncLimiter) TakeThen(st iplimit.TakeStep) {
	r := st.TakeReq()
	v, err := l.Take(r.Kinds, r.Addr, r.Now)
	if err != nil {
		st.Fail(err)
		return
	}
	st.Taken(v)
}

func (q syncQuota) ChargeThen(st quota.ChargeStep) { st.Charged(q.Charge(*st.ChargeReq())) }

func (e syncEvents) ResolveThen(st events.ResolveStep) { st.Resolved(e.Resolve(*st.ResolveReq())) }

// Prepare implements chainHistory: a blocking History takes the plain
// Observation, which the chain keeps.
func (syncHistory) Prepare(devicehist.Observation, *devicehist.Prepared) error { return nil }

func (h syncHistory) ObserveThen(st devicehist.ObserveStep) {
	st.Observed(h.Observe(st.(*chain).obs))
}
