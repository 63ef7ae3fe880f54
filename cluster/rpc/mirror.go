package rpc

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/fraudd/fraudd/actors/checks"
	"github.com/fraudd/fraudd/actors/devicehist"
	"github.com/fraudd/fraudd/actors/events"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/cluster"
	"github.com/fraudd/fraudd/storage"
)

// A lease holder's evaluations of an account with a device event stored at
// the owner are answered here, with no round trip, once this node holds a
// mirror of what they read there (docs/cluster.md, "Device history on a
// lease holder"):
//
//   - the event: an evaluation that went to the owner (EvaluateLeased)
//     brings the stored event back; it is kept here for mirrorEventFor. Its
//     first use was that evaluation's, at the owner, so every later use
//     here is a replay, as the owner would answer;
//   - the device history: after that evaluation this node asks the owner,
//     on one Mirror stream per owner, to watch the records it read (the
//     device, the end-user account, the address, and the account's other
//     devices and addresses). The owner sends them as it holds them, then
//     every later change of the account's records, in its order. The
//     facts are computed here over that copy, on scratch copies, storing
//     nothing (devicehist's mirror), and the observation goes to the owner
//     on the same stream, where it is recorded once, in the account's one
//     history, and comes back as changed records.
//
// So the history stays one, at the owner, and each observation is counted
// there once; what a holder's answer can miss is what the owner recorded
// in the last stream round trip (a millisecond or so), not a report
// interval. A record the mirror does not hold makes the evaluation go to
// the owner as before, and the watch that follows fills it in.

// mirrorEventFor is how long a stored event brought back by the owner is
// used here. The event is immutable; what ages is the device's global
// sightings the owner answered with it (times_seen, which feeds
// high_activity's daily average of at least 500), so a minute's lag is
// far below what that rule can tell.
const mirrorEventFor = time.Minute

// mirrorIdle is how long a mirror of an account unused by any evaluation
// is kept: past it (the lease ended, or the traffic moved) the owner is
// told to stop watching.
const mirrorIdle = 30 * time.Second

// Bounds: the events kept, and the observations waiting for a stream's
// sender (past it the stream is given up: its mirrors are dropped and
// what waited is recorded here, as before the mirror).
const (
	mirrorMaxEvents  = 1 << 16
	mirrorMaxPending = 1 << 14
	mirrorMaxOps     = 512 // observations in one frame
)

// MirrorHistory is this node's device history as a mirror uses it
// (*devicehist.Client): the owner's watch and change feed, and the
// holder's copy.
type MirrorHistory interface {
	// Holder.
	Prepare(o devicehist.Observation, p *devicehist.Prepared) error
	ObserveThen(st devicehist.ObserveStep)
	Observe(o devicehist.Observation) (devicehist.Facts, error)
	MirrorApply(p devicehist.MirrorPush)
	MirrorDrop(customer string)
	// Owner.
	SetMirrorSink(sink func(devicehist.MirrorPush))
	IsWatched(customer string) bool
	PushEvent(customer, deviceID string, event []byte)
	PushEventTo(customer, deviceID string, watcher uint64, event []byte)
	Watch(customer string, watcher uint64, keys devicehist.MirrorKeys) error
	Unwatch(customer string, watcher uint64)
	UnwatchAll(watcher uint64)
}

type mirrorEventKey struct {
	account string
	id      events.EventID
}

// mirrorCarry is what a stream that ended had not seen acknowledged:
// observations numbered first, first+1, ….
type mirrorCarry struct {
	ops   []*MirrorOp
	first uint64
	until time.Time
}

// mirrorCarryFor is how long the observations an ended stream had not seen
// acknowledged wait for the next stream to their owner; past it (the
// owner is gone) they are recorded here and reach the owner's successor
// with this node's other records (HistoryMover). The owner of a later
// stream skips those it recorded already.
const mirrorCarryFor = 5 * time.Second

type mirrorEvent struct {
	r     events.Resolved
	until time.Time
	// fresh: the owner pushed it as stored and nobody here used it yet;
	// the first evaluation here is its first use, which the owner is told
	// (MirrorOp.use_event).
	fresh bool
}

// mirrorSub is one account this node mirrors: from which owner, under
// which claim, on which stream.
type mirrorSub struct {
	node  string
	token int64
	st    *mirrorStream
	used  atomic.Int64 // unix nanoseconds of the last evaluation it served
}

// mirrors is a holder's mirrors (nil hist: none).
type mirrors struct {
	q    *Quota
	hist MirrorHistory

	mu      sync.Mutex
	subs    map[string]*mirrorSub
	streams map[string]*mirrorStream
	plain   map[string]time.Time // owners without Mirror: not asked until then
	events  map[mirrorEventKey]mirrorEvent
	// run names this process's run to the owners; nextOp is the number the
	// next observation sent to each owner gets, and carry what an ended
	// stream to it had not seen acknowledged (sent again on the next one,
	// or recorded here past carryFor).
	run    uint64
	nextOp map[string]uint64
	carry  map[string]*mirrorCarry

	// out is what goes to the history's shards for the mirrors (copies
	// and drops), in the order it was decided under mu, sent by one
	// goroutine (sender) that holds no lock: the history's shards may run
	// on the sending goroutine (actors.InlineRuns), and their handlers
	// take mu (a mirrored evaluation that misses asks for a watch).
	outMu   sync.Mutex
	out     []func()
	outWake chan struct{}

	hits, misses atomic.Int64
}

// SetMirror gives the client and the server this node's device history to
// mirror other owners' accounts with and to be watched as an owner; the
// server must have it as ServerConfig.Mirror. Until it is called, leased
// evaluations with an event stored elsewhere go to the owner.
func (q *Quota) SetMirror(h MirrorHistory) {
	m := &mirrors{q: q, hist: h, subs: map[string]*mirrorSub{}, streams: map[string]*mirrorStream{}, plain: map[string]time.Time{}, events: map[mirrorEventKey]mirrorEvent{},
		outWake: make(chan struct{}, 1), run: max(rand.Uint64(), 1), nextOp: map[string]uint64{}, carry: map[string]*mirrorCarry{}}
	if !q.mirror.CompareAndSwap(nil, m) {
		return
	}
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed.Load() {
		return
	}
	q.wg.Go(m.janitor)
	q.wg.Go(m.sender)
}

// send queues fn (a call to the history's shards) for the sender; call it
// with mu held, so that the shards hear of the mirrors in mu's order.
func (m *mirrors) send(fn func()) {
	m.outMu.Lock()
	m.out = append(m.out, fn)
	m.outMu.Unlock()
	select {
	case m.outWake <- struct{}{}:
	default:
	}
}

// sender runs what send queued, in order, until the client closes.
func (m *mirrors) sender() {
	for {
		select {
		case <-m.q.done:
			return
		case <-m.outWake:
		}
		m.outMu.Lock()
		out := m.out
		m.out = nil
		m.outMu.Unlock()
		for i, fn := range out {
			fn()
			out[i] = nil
		}
	}
}

// MirrorHits counts the leased evaluations with an event stored elsewhere
// that were answered from a mirror, with no round trip; MirrorMisses those
// that went to the owner although the account was mirrored (the event or
// a record not held yet).
func (q *Quota) MirrorHits() int64 {
	if m := q.mirror.Load(); m != nil {
		return m.hits.Load()
	}
	return 0
}

// MirrorMisses: see MirrorHits.
func (q *Quota) MirrorMisses() int64 {
	if m := q.mirror.Load(); m != nil {
		return m.misses.Load()
	}
	return 0
}

// tryMirror answers os, whose charge res was served from a slice, from the
// account's mirror: true when it did (or will: the answer comes from the
// history's shard), false when it must go to the owner.
func (q *Quota) tryMirror(os checks.OwnerStep, res quota.ChargeResult) bool {
	m := q.mirror.Load()
	if m == nil {
		return false
	}
	return m.try(os, res, false)
}

// mirrorHere is the owner step of st when its rest would go on here after
// a leased charge (no device event: the history alone) and a mirror could
// answer it instead.
func (q *Quota) mirrorHere(st quota.ChargeStep) checks.OwnerStep {
	os, ok := st.(checks.OwnerStep)
	if !ok || q.mirror.Load() == nil {
		return nil
	}
	if w := os.OwnerWork(); w.Resolve != nil || w.Observe == nil {
		return nil
	}
	return os
}

// tryMirrorHere answers os, a leased evaluation with no device event,
// from the account's mirror when it holds the records (true). Otherwise
// the chain goes on here, observing this node's history as without a
// mirror, and the owner is asked to watch the records for the next one.
func (q *Quota) tryMirrorHere(os checks.OwnerStep, res quota.ChargeResult) bool {
	m := q.mirror.Load()
	return m != nil && m.try(os, res, true)
}

// try reads os's facts from a mirror. here: os has no event, and a miss
// goes on here (the caller's fallback when try answers false; the watch
// it needs is asked for below); otherwise a miss goes to the owner, whose
// answer seeds the mirror (seedMirror).
func (m *mirrors) try(os checks.OwnerStep, res quota.ChargeResult, here bool) bool {
	c := os.ChargeReq()
	w := os.OwnerWork()
	if here != (w.Resolve == nil) {
		return false
	}
	if here && (w.Observe == nil || w.Observe.DeviceID == "" && w.Observe.AccountID == "") {
		return false // nothing to observe: no hop either way
	}
	now := time.Now()
	r := checks.OwnerResult{Charge: res}
	var first, found, peek bool
	m.mu.Lock() // once for the mirror and the event: this is every leased evaluation's path
	sub := m.activeLocked(c.Account)
	if sub != nil && !here {
		peek = peeks(w)
		r.Resolved, first, found = m.eventLocked(c.Account, &w.Resolve.ID, now, w.Observe != nil, peek)
	}
	m.mu.Unlock()
	if sub == nil && here && !w.Observe.Test {
		// The first of the account here: the watch starts the mirror, and
		// this evaluation misses it (answerOwn), as any other the copy
		// cannot answer yet.
		m.watch(c.Account, devicehist.MirrorKeys{AccountID: w.Observe.AccountID, IP: w.Observe.IP, SharedExit: w.Observe.SharedExit})
		sub = m.active(c.Account)
	}
	if sub == nil {
		return false
	}
	if !here && !found {
		m.misses.Add(1)
		return false
	}
	sub.used.Store(now.UnixNano())
	if w.Observe == nil {
		m.hits.Add(1)
		os.OwnerDone(r)
		return true
	}
	st := mirrorSteps.Get().(*mirrorStep)
	st.m, st.os, st.r, st.sub, st.obs, st.here = m, os, r, sub, *w.Observe, here
	if first {
		st.use, st.peek = w.Resolve.ID, peek
	}
	if !here && len(r.Resolved.Event.VisitorID) <= storage.MaxHistDevice {
		st.obs.DeviceID = r.Resolved.Event.VisitorID
	}
	if err := m.hist.Prepare(st.obs, &st.prep); err != nil {
		st.release()
		return false
	}
	st.prep.SetMirror(true)
	m.hist.ObserveThen(st)
	return true
}

// active is the account's mirror when it is usable: its owner and claim
// are still those in this node's view and its stream is up; a mirror that
// is not is dropped.
func (m *mirrors) active(account string) *mirrorSub {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.activeLocked(account)
}

// activeLocked is active with m.mu held.
func (m *mirrors) activeLocked(account string) *mirrorSub {
	sub := m.subs[account]
	if sub == nil {
		return nil
	}
	node, token, ok := m.q.cfg.Owners.Owner(cluster.ShardOf(cluster.KindAccount, account))
	if !ok || node != sub.node || token != sub.token {
		m.dropLocked(account, sub, true)
		return nil
	}
	return sub
}

// eventLocked is the account's stored event as this node would have it
// resolved now: a replay, unless it is fresh (pushed by the owner, unused
// here). A fresh one is taken only when the evaluation observes the
// history (observes): whether another node used it comes from there (the
// device's recent events, Facts.Repeated). Its use is taken here, so a
// second evaluation of it here is a replay, and the owner is told of it
// (MirrorOp.use_event), or counts it itself when the evaluation goes there.
// A peek (peeks: the test key) reads a fresh one as unused and leaves it
// fresh: test traffic counts no use (SPEC 2.2 customer_history "excludes
// test-key traffic"), so the live evaluation after it is the first use.
// Call it with m.mu held.
func (m *mirrors) eventLocked(account string, id *events.EventID, now time.Time, observes, peek bool) (r events.Resolved, fresh, ok bool) {
	k := mirrorEventKey{account, *id}
	e, ok := m.events[k]
	if !ok || now.After(e.until) || e.fresh && !observes {
		return events.Resolved{}, false, false
	}
	if e.fresh {
		if !peek {
			m.events[k] = mirrorEvent{r: e.r, until: e.until}
		}
		return e.r, true, true
	}
	e.r.Replayed = true
	return e.r, false, true
}

// peeks reports whether w's resolve counts no use of its event: the
// personal test key's (planFacts sets Peek; the owner also reads a test
// observation's resolve as one, OwnerParts.Rest).
func peeks(w checks.OwnerWork) bool {
	return w.Resolve != nil && w.Resolve.Peek || w.Observe != nil && w.Observe.Test
}

// usedMirrorEvent notes that an evaluation that went to the owner used
// the account's event: a pushed copy kept here is no longer fresh.
func (q *Quota) usedMirrorEvent(account string, id *events.EventID) {
	m := q.mirror.Load()
	if m == nil {
		return
	}
	k := mirrorEventKey{account, *id}
	m.mu.Lock()
	if e, ok := m.events[k]; ok && e.fresh {
		e.fresh = false
		m.events[k] = e
	}
	m.mu.Unlock()
}

// seed follows a leased evaluation the owner answered (EvaluateLeased):
// the event it resolved is kept, and the owner is asked to watch the
// records it read, so that the next evaluations of them stay here.
func (q *Quota) seedMirror(account string, w checks.OwnerWork, res *checks.OwnerResult) {
	m := q.mirror.Load()
	if m == nil || w.Resolve == nil || res.EventErr != nil || !res.Resolved.Found {
		return
	}
	r := res.Resolved
	// A peek (the test key) used nothing at the owner: the copy is as the
	// owner read it, fresh when unused, so that the live evaluation after
	// it here is the first use (SPEC 2.2), not a replay. Otherwise this
	// evaluation was the use.
	peek := peeks(w)
	fresh := peek && !r.Replayed
	r.Replayed = !fresh
	r.Event.Signals = nil // as mirrorStored: the verdict is what is read
	m.mu.Lock()
	if len(m.events) < mirrorMaxEvents {
		k := mirrorEventKey{strings.Clone(account), w.Resolve.ID}
		if _, kept := m.events[k]; !peek || !kept {
			m.events[k] = mirrorEvent{r: r, until: time.Now().Add(mirrorEventFor), fresh: fresh}
		}
	}
	m.mu.Unlock()
	if w.Observe == nil || res.HistErr != nil || w.Observe.Test {
		return
	}
	keys := devicehist.MirrorKeys{AccountID: w.Observe.AccountID, IP: w.Observe.IP, SharedExit: w.Observe.SharedExit}
	if len(r.Event.VisitorID) <= storage.MaxHistDevice {
		keys.DeviceID = r.Event.VisitorID
	}
	m.watch(account, keys)
}

// watchLeased begins the account's mirror, unless it is under way, when
// this node asks for a slice of the account's evaluations: the owner sends
// the records it holds in memory, its existence filter and its recent
// events on the watch, so the leased evaluations that follow find them
// here instead of each first one going to the owner.
func (q *Quota) watchLeased(account string) {
	m := q.mirror.Load()
	if m == nil || m.active(account) != nil {
		return
	}
	m.watch(account, devicehist.MirrorKeys{})
}

// watch asks the account's owner to watch keys' records for this node,
// opening the owner's stream when there is none.
func (m *mirrors) watch(account string, keys devicehist.MirrorKeys) {
	node, token, ok := m.q.cfg.Owners.Owner(cluster.ShardOf(cluster.KindAccount, account))
	if !ok || node == m.q.cfg.Owners.Self() {
		return
	}
	// The peer first, without mu: making it may route queued charges
	// again, whose chains may come back here.
	m.mu.Lock()
	open := m.streams[node] != nil
	m.mu.Unlock()
	var cli NodeClient
	if !open {
		p, err := m.q.peer(node)
		if err != nil {
			return
		}
		cli = p.cli
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.q.closed.Load() || time.Now().Before(m.plain[node]) {
		return
	}
	sub := m.subs[account]
	if sub != nil && (sub.node != node || sub.token != token) {
		m.dropLocked(account, sub, true)
		sub = nil
	}
	if sub == nil {
		st := m.streams[node]
		if st == nil {
			if cli == nil {
				return // the stream ended meanwhile: the next miss asks again
			}
			if st = m.openLocked(node, cli); st == nil {
				return
			}
		}
		sub = &mirrorSub{node: node, token: token, st: st}
		sub.used.Store(time.Now().UnixNano())
		m.subs[strings.Clone(account)] = sub // kept: the caller's may view a request
	}
	// Sent later, on the stream: the keys' strings may view a request's
	// buffer.
	w := &MirrorWatch{Customer: strings.Clone(account), DeviceId: strings.Clone(keys.DeviceID), AccountId: strings.Clone(keys.AccountID), SharedExit: keys.SharedExit}
	if keys.IP.IsValid() {
		w.Ip = keys.IP.AsSlice()
	}
	sub.st.watch(w)
}

// dropLocked forgets the account's mirror (m.mu held), and tells the
// owner to stop watching it when unwatch.
func (m *mirrors) dropLocked(account string, sub *mirrorSub, unwatch bool) {
	delete(m.subs, account)
	m.send(func() { m.hist.MirrorDrop(account) })
	if unwatch {
		sub.st.unwatch(account)
	}
}

// watch and unwatch queue an account's watch or unwatch. The owner ends a
// frame's unwatches before it registers its watches, so a frame says what
// the holder did last: an unwatch after a watch drops the watch (the
// owner ends the registration, or never begins it); a watch after an
// unwatch keeps both, so that the owner ends the old registration and
// begins a new one, with the snapshot, records, filter and events a new
// registration is sent. Without the unwatch the owner would see a watch of
// a registration it still has and send a snapshot alone, to a holder that
// dropped its mirror, filter and all, with the unwatch.
func (st *mirrorStream) watch(w *MirrorWatch) {
	st.queue(func(u *MirrorUp) {
		u.Watches = append(u.Watches, w)
	})
}

func (st *mirrorStream) unwatch(account string) {
	st.queue(func(u *MirrorUp) {
		u.Watches = slices.DeleteFunc(u.Watches, func(w *MirrorWatch) bool { return w.Customer == account })
		if !slices.Contains(u.Unwatch, account) {
			u.Unwatch = append(u.Unwatch, account)
		}
	})
}

// janitor drops the mirrors no evaluation used lately and the events past
// their time, once a second, until the client closes.
func (m *mirrors) janitor() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-m.q.done:
			m.closeAll()
			return
		case now := <-t.C:
			m.sweep(now)
		}
	}
}

func (m *mirrors) sweep(now time.Time) {
	var lapsed []*mirrorCarry
	m.mu.Lock()
	defer func() {
		m.mu.Unlock()
		for _, c := range lapsed {
			m.recordHere(c.ops)
		}
	}()
	for node, c := range m.carry {
		if now.After(c.until) {
			lapsed = append(lapsed, c)
			delete(m.carry, node)
		}
	}
	for account, sub := range m.subs {
		if now.Sub(time.Unix(0, sub.used.Load())) > mirrorIdle {
			m.dropLocked(account, sub, true)
		}
	}
	for k, e := range m.events {
		if now.After(e.until) {
			delete(m.events, k)
		}
	}
}

// closeAll ends the streams as the client closes (after the node's HTTP
// server drained: no evaluation adds to them any more). Each first gets up
// to mirrorCloseWait for the owner to acknowledge what it carries; what is
// still unacknowledged once the streams ended is recorded here (leftovers
// that reach the owner: HistoryMover), not dropped with them.
func (m *mirrors) closeAll() {
	m.mu.Lock()
	sts := make([]*mirrorStream, 0, len(m.streams))
	for _, st := range m.streams {
		sts = append(sts, st)
	}
	m.mu.Unlock()
	by := time.Now().Add(mirrorCloseWait)
	for _, st := range sts {
		for !st.settled() && time.Now().Before(by) && st.ctx.Err() == nil {
			time.Sleep(2 * time.Millisecond)
		}
		st.cancel()
	}
	for _, st := range sts {
		select {
		case <-st.done:
		case <-time.After(time.Until(by) + time.Second):
		}
	}
	m.mu.Lock()
	var left []*MirrorOp
	for node, c := range m.carry {
		left = append(left, c.ops...)
		delete(m.carry, node)
	}
	m.mu.Unlock()
	m.recordHere(left)
}

// mirrorCloseWait bounds how long a closing client waits for its owners
// to acknowledge the observations its streams carry.
const mirrorCloseWait = time.Second

// settled reports whether everything queued on the stream was sent and
// acknowledged.
func (st *mirrorStream) settled() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return (st.up == nil || len(st.up.Ops) == 0) && len(st.sent) == 0
}

// mirrorStep is one leased evaluation's history read from a mirror: a
// step of the history's chained call.
type mirrorStep struct {
	m    *mirrors
	os   checks.OwnerStep
	r    checks.OwnerResult
	sub  *mirrorSub
	obs  devicehist.Observation
	prep devicehist.Prepared
	here bool // no event: a miss goes on here, not to the owner
	// own: the mirror lacked a record of a here step; this node's own
	// records answered, storing nothing, and the owner records it.
	own bool
	// use: the event whose first use this is (fresh); zero: none.
	use events.EventID
	// peek: use is only read, by the test key: not told to the owner.
	peek bool
}

var mirrorSteps = sync.Pool{New: func() any { return new(mirrorStep) }}

func (s *mirrorStep) release() {
	*s = mirrorStep{}
	mirrorSteps.Put(s)
}

// ObserveReq implements devicehist.ObserveStep.
func (s *mirrorStep) ObserveReq() *devicehist.Prepared { return &s.prep }

// Observed implements devicehist.ObserveStep, on the history's shard: a
// record the mirror lacks sends the evaluation to the owner, as without a
// mirror; otherwise it is answered, and the observation goes to the owner
// to be recorded there.
func (s *mirrorStep) Observed(f devicehist.Facts, err error) {
	m, os, r, sub, obs, here, own, use, peek := s.m, s.os, s.r, s.sub, s.obs, s.here, s.own, s.use, s.peek
	if errors.Is(err, devicehist.ErrNotMirrored) && !own {
		m.misses.Add(1)
		if here && !obs.Test && m.answerOwn(s) {
			return
		}
		s.release()
		m.miss(os, r.Charge, here)
		return
	}
	s.release()
	if !own {
		m.hits.Add(1)
	}
	if use != (events.EventID{}) && err == nil && f.Repeated {
		// The owner's history holds this event already: another node
		// evaluated it (its observation reached the owner and came back
		// here), so this is a replay, as the owner would answer.
		r.Resolved.Replayed, use = true, events.EventID{}
	}
	r.Facts, r.HistErr = f, err
	// The observation goes out on the stream later, after the answer: its
	// strings may view the request's buffer, which the answer frees, so
	// they are copied first.
	var op *MirrorOp
	if err == nil && !obs.Test {
		op = &MirrorOp{Customer: obs.Customer, Observation: observationMsg(ownedObservation(&obs))}
	}
	if use != (events.EventID{}) && !peek {
		// A peek's event stays unused at the owner (eventLocked).
		if op == nil {
			op = &MirrorOp{Customer: obs.Customer}
		}
		op.UseEvent = use[:]
	}
	os.OwnerDone(r)
	if op != nil {
		sub.st.op(op)
	}
}

// ownedObservation is o with its strings copied (o's may view a request's
// buffer).
func ownedObservation(o *devicehist.Observation) *devicehist.Observation {
	c := *o
	c.Customer, c.EventID, c.AccountID, c.DeviceID = strings.Clone(o.Customer), strings.Clone(o.EventID), strings.Clone(o.AccountID), strings.Clone(o.DeviceID)
	return &c
}

// Fail implements devicehist.ObserveStep (the history is stopping): the
// owner answers, as without a mirror.
func (s *mirrorStep) Fail(error) {
	m, os, r, here := s.m, s.os, s.r, s.here
	s.release()
	m.miss(os, r.Charge, here)
}

// answerOwn has s, a leased evaluation with no event that the mirror
// could not answer, read this node's own records of the account as a test
// observation would (storing nothing), and asks the owner to watch the
// records it lacked. The observation then goes to the owner like a
// mirrored one, so the account's history stays one, at the owner; its
// facts are what this node knows, as they would be without a mirror.
func (m *mirrors) answerOwn(s *mirrorStep) bool {
	m.watch(s.os.ChargeReq().Account, devicehist.MirrorKeys{AccountID: s.obs.AccountID, IP: s.obs.IP, SharedExit: s.obs.SharedExit})
	o := s.obs
	o.Test = true
	if err := m.hist.Prepare(o, &s.prep); err != nil {
		return false
	}
	s.prep.SetMirror(false)
	s.own = true
	m.hist.ObserveThen(s)
	return true
}

// miss sends a leased evaluation the mirror could not answer on its way
// without it: to the owner with its event (whose answer seeds the
// mirror), or on here without one, after asking the owner to watch the
// records it lacked.
func (m *mirrors) miss(os checks.OwnerStep, res quota.ChargeResult, here bool) {
	if !here {
		m.q.sendRest(os, res)
		return
	}
	if o := os.OwnerWork().Observe; o != nil && !o.Test {
		m.watch(os.ChargeReq().Account, devicehist.MirrorKeys{AccountID: o.AccountID, IP: o.IP, SharedExit: o.SharedExit})
	}
	os.Charged(res, nil)
}

// mirrorStream is this node's Mirror stream to one owner: what waits to be
// sent, and the goroutines that send it and apply what comes back.
type mirrorStream struct {
	m      *mirrors
	node   string
	ctx    context.Context
	cancel context.CancelFunc
	wake   chan struct{}
	done   chan struct{} // closed once run returned (and end ran)

	mu    sync.Mutex
	up    *MirrorUp // waiting to be sent (nil: nothing)
	ended bool
	// Observations are numbered per owner: up.Ops from upFirst, sent (not
	// acknowledged yet) from sentFirst; next is the next number.
	upFirst, sentFirst, next uint64
	sent                     []*MirrorOp
}

// openLocked starts a stream to node (m.mu held); nil once the client
// is closed.
func (m *mirrors) openLocked(node string, cli NodeClient) *mirrorStream {
	// Under the client's lock, as background does: Close must not be
	// waiting for its goroutines already.
	m.q.mu.RLock()
	defer m.q.mu.RUnlock()
	if m.q.closed.Load() {
		return nil
	}
	st := m.openLockedFor(node)
	m.q.wg.Go(func() { st.run(cli) })
	return st
}

// openLockedFor makes node's stream (m.mu held), with what the last one
// to it left unacknowledged queued first; the caller runs it.
func (m *mirrors) openLockedFor(node string) *mirrorStream {
	ctx, cancel := context.WithCancel(context.Background())
	st := &mirrorStream{m: m, node: node, ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1), done: make(chan struct{}), next: max(m.nextOp[node], 1)}
	if c := m.carry[node]; c != nil {
		// The last stream's unacknowledged observations go first, under
		// their numbers: the owner skips those it recorded.
		delete(m.carry, node)
		st.up = &MirrorUp{Version: version, Node: m.q.cfg.Owners.Self(), Ops: c.ops}
		st.upFirst = c.first
		st.wake <- struct{}{}
	}
	m.streams[node] = st
	return st
}

// queue adds to what the stream sends next (false: the stream ended, and
// add was not run); past mirrorMaxPending observations the stream is
// given up (its sender cannot keep up).
func (st *mirrorStream) queue(add func(*MirrorUp)) bool {
	st.mu.Lock()
	if st.ended {
		st.mu.Unlock()
		return false
	}
	if st.up == nil {
		st.up = &MirrorUp{Version: version, Node: st.m.q.cfg.Owners.Self()}
	}
	add(st.up)
	full := len(st.up.Ops) > mirrorMaxPending
	st.mu.Unlock()
	if full {
		st.cancel()
		return true
	}
	select {
	case st.wake <- struct{}{}:
	default:
	}
	return true
}

// op queues an observation under the next number. On a stream that
// ended (an evaluation read its mirror just before), it goes to the
// owner's next stream, or waits for one with what the ended stream left.
func (st *mirrorStream) op(op *MirrorOp) {
	queued := st.queue(func(u *MirrorUp) {
		if len(u.Ops) == 0 {
			st.upFirst = st.next
		}
		u.Ops = append(u.Ops, op)
		st.next++
	})
	if queued {
		return
	}
	m := st.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur := m.streams[st.node]; cur != nil && cur != st {
		cur.op(op)
		return
	}
	// end has run (it sets ended under m.mu): the carry it left, if any,
	// ends just before nextOp.
	n := max(m.nextOp[st.node], 1)
	m.nextOp[st.node] = n + 1
	c := m.carry[st.node]
	if c == nil {
		c = &mirrorCarry{first: n}
		m.carry[st.node] = c
	}
	c.ops, c.until = append(c.ops, op), time.Now().Add(mirrorCarryFor)
}

// take is what waits to be sent, at most mirrorMaxOps observations of it;
// the observations it hands out wait for their acknowledgement in sent.
func (st *mirrorStream) take() *MirrorUp {
	st.mu.Lock()
	defer st.mu.Unlock()
	u := st.up
	if u == nil {
		return nil
	}
	u.Run = st.m.run
	if len(u.Ops) > 0 {
		u.FirstOp = st.upFirst
		if len(st.sent) == 0 {
			st.sentFirst = st.upFirst
		}
	}
	if len(u.Ops) > mirrorMaxOps {
		rest := &MirrorUp{Version: version, Node: u.Node, Ops: append([]*MirrorOp(nil), u.Ops[mirrorMaxOps:]...)}
		u.Ops = u.Ops[:mirrorMaxOps]
		st.up, st.upFirst = rest, st.upFirst+mirrorMaxOps
		st.sent = append(st.sent, u.Ops...)
		select {
		case st.wake <- struct{}{}:
		default:
		}
		return u
	}
	st.up = nil
	st.sent = append(st.sent, u.Ops...)
	return u
}

// acked drops the sent observations the owner says it recorded (numbers
// up to applied).
func (st *mirrorStream) acked(applied uint64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if applied < st.sentFirst || len(st.sent) == 0 {
		return
	}
	n := min(applied-st.sentFirst+1, uint64(len(st.sent)))
	clear(st.sent[:n])
	st.sent = st.sent[n:]
	st.sentFirst += n
}

// run opens the stream and sends what is queued until the stream ends;
// then the mirrors on it are dropped, and the observations the owner has
// not acknowledged wait for the next stream to it (mirrorCarryFor).
func (st *mirrorStream) run(cli NodeClient) {
	defer close(st.done)
	defer st.end()
	s, err := cli.Mirror(st.ctx)
	if err != nil {
		st.failed(err)
		return
	}
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		defer st.cancel()
		for {
			d, err := s.Recv()
			if err != nil {
				st.failed(err)
				return
			}
			for _, p := range d.GetPushes() {
				st.m.apply(st, p)
			}
			st.acked(d.GetApplied())
		}
	}()
	defer func() { <-recvDone }()
	for {
		select {
		case <-st.ctx.Done():
			return
		case <-st.wake:
		}
		for u := st.take(); u != nil; u = st.take() {
			if err := s.Send(u); err != nil {
				st.cancel()
				if err != io.EOF {
					st.failed(err)
				}
				return
			}
		}
	}
}

// failed notes why the stream ended: an owner of an older build (no
// Mirror) is not asked again for a while.
func (st *mirrorStream) failed(err error) {
	if status.Code(err) != codes.Unimplemented {
		if st.ctx.Err() == nil {
			st.m.q.log.Debug("cluster rpc: mirror stream ended", "node", st.node, "err", err)
		}
		return
	}
	st.m.mu.Lock()
	st.m.plain[st.node] = time.Now().Add(pipeRetryPlain)
	st.m.mu.Unlock()
}

// end drops the stream's mirrors and keeps the observations the owner
// has not acknowledged (sent or not) for the next stream to it.
func (st *mirrorStream) end() {
	st.cancel()
	m := st.m
	m.mu.Lock()
	defer m.mu.Unlock()
	st.mu.Lock()
	st.ended = true
	ops, first := st.sent, st.sentFirst
	if len(ops) == 0 {
		first = st.upFirst
	}
	if st.up != nil {
		ops = append(ops, st.up.Ops...)
	}
	st.up, st.sent = nil, nil
	next := st.next
	st.mu.Unlock()
	if m.streams[st.node] == st {
		delete(m.streams, st.node)
	}
	for account, sub := range m.subs {
		if sub.st == st {
			m.dropLocked(account, sub, false)
		}
	}
	m.nextOp[st.node] = max(m.nextOp[st.node], next)
	if len(ops) > 0 {
		m.carry[st.node] = &mirrorCarry{ops: ops, first: first, until: time.Now().Add(mirrorCarryFor)}
	}
}

// recordHere records observations no owner acknowledged in this node's
// own history (leftovers that reach the account's owner: HistoryMover).
// Call it without m.mu: the history's shards may run on this goroutine.
func (m *mirrors) recordHere(ops []*MirrorOp) {
	now := m.q.cfg.Now()
	var lost int
	var lastErr error
	for _, op := range ops {
		if op.GetObservation() == nil {
			continue
		}
		o, err := observationOf(op.GetObservation(), op.GetCustomer())
		if err == nil {
			o.Now = now
			_, err = m.hist.Observe(*o)
		}
		if err != nil {
			lost, lastErr = lost+1, err
		}
	}
	if lost > 0 {
		m.q.log.Warn("cluster rpc: mirrored observations no owner acknowledged were not recorded here either", "observations", lost, "err", lastErr)
	}
}

// keepPushed keeps an event the owner pushed (m.mu held): one it stored
// just now, unused, or one it stored before this node watched the account,
// unused (fresh) or used already (a replay). One that does not decode is
// dropped: its evaluation asks the owner.
func (m *mirrors) keepPushed(account string, b []byte) {
	var me MirrorEvent
	if err := proto.Unmarshal(b, &me); err != nil || len(me.GetId()) != storage.EventIDLen {
		m.q.log.Warn("cluster rpc: a pushed device event does not decode", "account", account, "err", err)
		return
	}
	r, err := resolvedOf(me.GetResolved())
	if err != nil || !r.Found || r.Event.Account != account {
		m.q.log.Warn("cluster rpc: a pushed device event is not an event of its account", "account", account, "err", err)
		return
	}
	var k mirrorEventKey
	k.account = account
	copy(k.id[:], me.GetId())
	if len(m.events) < mirrorMaxEvents {
		if _, seen := m.events[k]; !seen {
			m.events[k] = mirrorEvent{r: r, until: time.Now().Add(mirrorEventFor), fresh: !r.Replayed}
		}
	}
}

// mirrorStored hands an event the owner just stored (id, of account) to
// the holders watching the account's history, as a resolve that counts no
// use answers it now, with its device's record: their evaluations of it
// then need not ask. Nothing is done for an account nobody watches.
func mirrorStored(h MirrorHistory, resolve func(events.Resolve) (events.Resolved, error), account string, id events.EventID, now time.Time) {
	if h == nil || !h.IsWatched(account) {
		return
	}
	if r, b, ok := mirrorEventOf(resolve, account, id, now); ok && !r.Replayed {
		h.PushEvent(account, r.Event.VisitorID, b)
	}
}

// mirrorEventOf is a stored event as an owner pushes it to holders: read
// by a resolve that counts no use, encoded without the collector's report
// (an evaluation reads the verdict stored with it, never the report, and a
// holder keeps many events). ok is false for an event not found or not
// readable now.
func mirrorEventOf(resolve func(events.Resolve) (events.Resolved, error), account string, id events.EventID, now time.Time) (r events.Resolved, b []byte, ok bool) {
	r, err := resolve(events.Resolve{ID: id, Account: account, Now: now, Peek: true})
	if err != nil || !r.Found {
		return r, nil, false
	}
	r.Event.Signals = nil
	if b, err = proto.Marshal(&MirrorEvent{Id: id[:], Resolved: resolveReply(&r)}); err != nil {
		return r, nil, false
	}
	return r, b, true
}

// apply hands a push from st's owner to the account's mirror, when the
// account is still mirrored on st (a push for a mirror dropped since is
// stale).
func (m *mirrors) apply(st *mirrorStream, p *MirrorPush) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sub := m.subs[p.GetCustomer()]
	if sub == nil || sub.st != st {
		return
	}
	if p.GetReset_() {
		m.dropLocked(p.GetCustomer(), sub, false)
		return
	}
	if b := p.GetEvent(); len(b) > 0 {
		m.keepPushed(p.GetCustomer(), b)
	}
	recs := make([]devicehist.MirrorRecord, len(p.GetRecords()))
	absent := p.GetAbsent()
	for i, b := range p.GetRecords() {
		recs[i] = devicehist.MirrorRecord{Parcel: b, Absent: i < len(absent) && absent[i]}
	}
	// Queued under m.mu, so that a drop of the account (also queued under
	// it) reaches the history's shard after this push, never before.
	push := devicehist.MirrorPush{Customer: p.GetCustomer(), Records: recs, Filter: p.GetFilter()}
	m.send(func() { m.hist.MirrorApply(push) })
}
