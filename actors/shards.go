package actors

import (
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/internal/clock"
)

// MaxShards bounds the shard count of one entity kind.
const MaxShards = 1024

// Tick is broadcast to every shard periodically (see Shards.Tick). Now comes
// from the service clock, so eviction follows the test clock like everything else.
type Tick struct{ Now time.Time }

// maxHeld bounds the fire-and-forget messages one down shard keeps for its
// successor; more are dropped (and counted in the log).
const maxHeld = 65536

// Shards is a fixed, power-of-two set of shard actors of one kind. An entity's
// key hashes (HashString, HashAddr, Mix64) to exactly one shard, which owns the
// entity's state: no locks guard it. Routing is a mask over the hash and a
// direct Send to that shard's PID, so nothing is ever dropped for want of a
// route (protoactor's consistent-hash router drops what it cannot route).
//
// Supervision. protoactor restarts a shard whose handler panics, from its
// producer, and stops it for good after 10 panics within 10 seconds. Shards
// notices both: after a panic it calls the OnRestart hook before the shard is
// produced again (so a shard whose state lives in the store reloads it
// instead of trusting memory a panic may have left half-changed), and a shard
// its supervisor stopped is marked down, reported by Supervision.Down (and so
// by /api/status), and spawned again after a growing delay. While a shard is
// down, calls to it fail at once with ErrShardDown instead of waiting for an
// answer that cannot come, and its fire-and-forget messages are held (up to
// maxHeld) and handed to the new shard in order. So are those already in
// its mailbox when it was stopped (shardMailbox): protoactor would leave
// them there unanswered.
type Shards struct {
	root        *actor.RootContext
	name        string
	slots       []slot
	dispatchers []*workerDispatcher
	mask        uint64
	produce     func(i int) actor.Actor
	onRestart   func(i int)
	sup         *Supervision
	log         *slog.Logger

	inline   bool
	mu       sync.Mutex // spawning against stopping
	stopping atomic.Bool

	tickOnce sync.Once
	stopTick chan struct{}
	tickDone chan struct{}
	stopOnce sync.Once

	// kind and mailboxes serve Kinds (readiness, metrics): the package of
	// the shard's actor type, and each shard's current mailbox (replaced
	// when the shard is spawned again).
	kind      string
	mailboxes []atomic.Pointer[actor.Mailbox]
}

// slot is one shard's place: its current PID and, while it is down, what
// waits for its successor.
type slot struct {
	pid  atomic.Pointer[actor.PID]
	down atomic.Bool

	mu sync.Mutex // early, held, dropped, backoff, upSince
	// early is what the stopped actor's mailbox still held (shardMailbox),
	// held what was sent while the shard was down: the successor gets
	// early first, as it was sent first.
	early   []any
	held    []any
	dropped int
	backoff time.Duration
	upSince time.Time
	// produced says the shard's actor was produced before: the next
	// production is a restart (OnRestart runs first).
	produced bool
	// gen counts the shard's spawns; stoppedGen (under mu) is the last one
	// its supervisor stopped. A spawn's actor can be stopped before the
	// spawn returns its PID (it panics as it starts; with InlineRuns it
	// all runs inside the spawn), so stops are matched by spawn, not PID.
	gen        atomic.Uint64
	stoppedGen uint64
	// halted: Stop saw this shard's actor stop (Shards.Stopped).
	halted atomic.Bool
}

// ShardOption configures SpawnShards.
type ShardOption func(*Shards)

// Named names the shard set in logs and in Supervision.Down.
func Named(name string) ShardOption { return func(s *Shards) { s.name = name } }

// InlineRuns lets a sender run a shard's idle mailbox on its own goroutine
// instead of waking the shard's worker: a hop then costs no goroutine switch
// (the scheduler and the workers' wake-ups were about a sixth of a live
// evaluation's CPU). The sender is held up for as long as the mailbox has
// work, its own message and any queued behind it, so only kinds whose
// handlers are short and never wait on a sender may use it: such a handler
// must not take a lock a sender holds while sending, nor wait on a goroutine
// that sends to it (see HoldInline for the exceptions). It pays where the
// run is short and ends the sender's wait: the per-address limiter, the
// event and history shards, and the quota shards on a store that answers
// charges ahead of their commit (Interval mode, quota.AheadStore) use it,
// so that a live evaluation that finds them idle runs on its handler's
// goroutine from the limiter to its answer. Each alone saved nothing:
// while the charge waited for the group committer, the chain parked and
// woke on another goroutine anyway (BENCHMARKS.md, "Session of
// 2026-11-26" and "Fifth session of 2026-11-27"). A shard run inline must
// not block on a full queue either (quota's persist uses TryAdd and
// TryAddLazy).
func InlineRuns() ShardOption { return func(s *Shards) { s.inline = true } }

// OnRestart sets fn to run before a shard's actor is produced again after a
// panic or after its supervisor stopped it: a kind whose state lives in the
// store drops the shard's memory there (waiting for its queued writes first)
// so that the new actor loads entities afresh. It runs on the goroutine that
// restarts the shard, never concurrently with that shard's handler.
func OnRestart(fn func(i int)) ShardOption { return func(s *Shards) { s.onRestart = fn } }

// WithLogger sets the logger of supervision events; default slog.Default().
func WithLogger(l *slog.Logger) ShardOption { return func(s *Shards) { s.log = l } }

// ShardCount normalises a requested shard count: n ≤ 0 means 2×GOMAXPROCS;
// the result is rounded up to a power of two and capped at MaxShards.
func ShardCount(n int) int {
	if n <= 0 {
		n = 2 * runtime.GOMAXPROCS(0)
	}
	if n > MaxShards {
		n = MaxShards
	}
	return 1 << bits.Len(uint(n-1))
}

// SpawnShards spawns ShardCount(n) shard actors. produce is called with the
// shard index each time the shard's actor is (re)created. A shard whose state
// must survive a panic keeps that state outside the actor value and hands the
// same pointer back on every call; one that reloads from the store replaces
// it in an OnRestart hook.
func SpawnShards(root *actor.RootContext, n int, produce func(i int) actor.Actor, opts ...ShardOption) *Shards {
	n = ShardCount(n)
	s := &Shards{root: root, slots: make([]slot, n), dispatchers: make([]*workerDispatcher, n), mask: uint64(n - 1), produce: produce,
		mailboxes: make([]atomic.Pointer[actor.Mailbox], n)}
	for _, o := range opts {
		o(s)
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.sup = SupervisionOf(root.ActorSystem())
	s.sup.add(s)
	for i := range s.slots {
		s.dispatchers[i] = newWorkerDispatcher()
		s.dispatchers[i].inline = s.inline
		s.slots[i].upSince = time.Now()
		s.slots[i].pid.Store(s.spawn(i))
	}
	KindsOf(root.ActorSystem()).add(s)
	return s
}

// spawn starts shard i's actor on its worker.
func (s *Shards) spawn(i int) *actor.PID {
	sl := &s.slots[i]
	gen := sl.gen.Add(1) // a restart in place keeps its spawn's generation
	// Spawn produces the actor before its mailbox, and a restart in place
	// produces it again with the same mailbox: the actors find theirs here.
	life := new(spawnLife)
	return s.root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		if sl.produced && s.onRestart != nil {
			s.restartHook(i)
		}
		sl.produced = true
		inner := s.produce(i)
		if s.kind == "" {
			s.kind = kindOf(inner, s.name)
		}
		if s.name == "" {
			// A readable default, set while shard 0 is first spawned (in
			// SpawnShards, before anything else runs): the shard's type,
			// e.g. "quota.shard".
			s.name = strings.TrimPrefix(fmt.Sprintf("%T", inner), "*")
		}
		return &shardActor{s: s, i: i, gen: gen, d: s.dispatchers[i], inner: inner, life: life}
	}, actor.WithDispatcher(s.dispatchers[i]), actor.WithMailbox(func() actor.Mailbox {
		// Spawn makes the mailbox synchronously; it is kept for its depth.
		life.mb = &shardMailbox{Mailbox: actor.Unbounded()(), s: s, i: i}
		var m actor.Mailbox = life.mb
		s.mailboxes[i].Store(&m)
		return m
	})))
}

// spawnLife is what one spawn's actor (each of its restarts in place) and
// its mailbox share.
type spawnLife struct{ mb *shardMailbox }

// shardMailbox is protoactor's unbounded mailbox, with the messages it
// hands on after its actor stopped diverted (Shards.divert) instead of
// given to the stopped actor, which drops them unanswered. When its
// supervisor stops an actor for good, protoactor has suspended the mailbox
// (the failure) and leaves what is queued there for good: a call waits out
// its caller's timeout, a fire-and-forget message is lost. The stopped
// actor resumes the mailbox (shardActor), so that the queued messages run
// through the divert: calls fail at once, the rest wait for the successor.
type shardMailbox struct {
	actor.Mailbox
	s       *Shards
	i       int
	stopped atomic.Bool
}

// RegisterHandlers implements actor.Mailbox: the mailbox invokes the
// actor through shardInvoker.
func (m *shardMailbox) RegisterHandlers(inv actor.MessageInvoker, d actor.Dispatcher) {
	m.Mailbox.RegisterHandlers(shardInvoker{MessageInvoker: inv, m: m}, d)
}

// drain makes the mailbox hand what it holds, and whatever still reaches
// it, to Shards.divert; the actor has stopped.
func (m *shardMailbox) drain() {
	m.stopped.Store(true)
	m.PostSystemMessage(&actor.ResumeMailbox{})
}

type shardInvoker struct {
	actor.MessageInvoker
	m *shardMailbox
}

func (v shardInvoker) InvokeUserMessage(msg any) {
	if v.m.stopped.Load() {
		v.m.s.divert(v.m.i, msg)
		return
	}
	v.MessageInvoker.InvokeUserMessage(msg)
}

// divert takes a message that reached shard i's mailbox after its actor
// stopped. Once Stop began, a Failer is answered ErrStopped and anything
// else dropped, as Send does. While the shard is down, a Failer is
// answered ErrShardDown, a Tick dropped and anything else kept for the
// successor ahead of what is held (it was sent before them). Should the
// successor run already, the message goes to it.
func (s *Shards) divert(i int, msg any) {
	msg = actor.UnwrapEnvelopeMessage(msg)
	if _, ok := msg.(actor.AutoReceiveMessage); ok {
		return // a poison pill, meant for the stopped actor
	}
	if s.stopping.Load() {
		if f, ok := msg.(Failer); ok {
			f.Fail(ErrStopped)
		}
		return
	}
	sl := &s.slots[i]
	sl.mu.Lock()
	if !sl.down.Load() {
		pid := sl.pid.Load()
		sl.mu.Unlock()
		HoldInline(func() { s.root.Send(pid, msg) })
		return
	}
	if f, ok := msg.(Failer); ok {
		sl.mu.Unlock()
		f.Fail(ErrShardDown)
		return
	}
	if _, ok := msg.(Tick); ok {
		sl.mu.Unlock()
		return
	}
	sl.keep(&sl.early, msg)
	sl.mu.Unlock()
}

// keep adds msg to list (sl.early or sl.held) for the successor, or counts
// it dropped once maxHeld messages wait in both. sl.mu is held.
func (sl *slot) keep(list *[]any, msg any) {
	if len(sl.early)+len(sl.held) < maxHeld {
		*list = append(*list, msg)
	} else {
		sl.dropped++
	}
}

// restartHook runs OnRestart for shard i. A panic in it is logged and
// survived: the shard then starts on whatever state the hook left, which is
// better than a shard that can never start again.
func (s *Shards) restartHook(i int) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("actor shard restart hook panicked", "shards", s.name, "shard", i, "panic", fmt.Sprint(r),
				"stack", string(debug.Stack()))
		}
	}()
	s.onRestart(i)
}

// shardActor wraps a shard's own actor to watch its life cycle.
type shardActor struct {
	s     *Shards
	i     int
	gen   uint64 // the spawn that produced it (slot.gen)
	d     *workerDispatcher
	inner actor.Actor
	life  *spawnLife
}

func (a *shardActor) Receive(ctx actor.Context) {
	// Each message moves the run sequence on (by two: a run stays odd), so
	// that a run a busy mailbox keeps going for longer than StuckAfter is
	// not taken for a stuck one; only a message handled that long is.
	a.d.runs.Add(2)
	switch ctx.Message().(type) {
	case *actor.Stopped:
		a.inner.Receive(ctx)
		a.s.stopped(a.i, a.gen)
		// After the slot is marked down, so that what the mailbox holds
		// is diverted as a down shard's.
		a.life.mb.drain()
		return
	case *actor.Restarting:
		a.s.log.Warn("actor shard restarting after a panic", "shards", a.s.name, "shard", a.i)
	}
	defer func() {
		if r := recover(); r != nil {
			// protoactor logs only the value; the stack says where.
			a.s.log.Error("actor shard panicked", "shards", a.s.name, "shard", a.i, "panic", fmt.Sprint(r),
				"message", fmt.Sprintf("%T", ctx.Message()), "stack", string(debug.Stack()))
			panic(r)
		}
	}()
	a.inner.Receive(ctx)
}

// stopped runs when the actor of shard i's spawn gen has stopped: by Stop,
// or by its supervisor after repeated panics. The latter marks it down and
// schedules a new one, also when that spawn has not returned yet.
func (s *Shards) stopped(i int, gen uint64) {
	if s.stopping.Load() {
		return
	}
	sl := &s.slots[i]
	sl.mu.Lock()
	if gen != sl.gen.Load() || gen == sl.stoppedGen {
		sl.mu.Unlock()
		return
	}
	sl.stoppedGen = gen
	sl.down.Store(true)
	// A shard that ran a while since its last start gets the short delay
	// again; one that keeps failing waits longer each time.
	lo, hi := s.sup.delays()
	if sl.backoff == 0 || time.Since(sl.upSince) > time.Minute {
		sl.backoff = lo
	} else {
		sl.backoff = minDur(2*sl.backoff, hi)
	}
	wait := sl.backoff
	sl.mu.Unlock()
	s.log.Error("actor shard stopped by its supervisor after repeated panics; reported down until it is restarted",
		"shards", s.name, "shard", i, "restart_in", wait)
	time.AfterFunc(wait, func() { s.respawn(i) })
}

func minDur(a, b time.Duration) time.Duration {
	if a < b {
		return a
	}
	return b
}

// respawn starts a new actor for down shard i and hands it what was held.
func (s *Shards) respawn(i int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping.Load() {
		return
	}
	sl := &s.slots[i]
	pid, err := s.trySpawn(i)
	if err != nil {
		s.log.Error("actor shard not restarted; trying again", "shards", s.name, "shard", i, "err", err)
		sl.mu.Lock()
		_, hi := s.sup.delays()
		sl.backoff = minDur(2*sl.backoff, hi)
		wait := sl.backoff
		sl.mu.Unlock()
		time.AfterFunc(wait, func() { s.respawn(i) })
		return
	}
	sl.mu.Lock()
	if sl.stoppedGen == sl.gen.Load() {
		// Its supervisor stopped it while it started (spawns are under
		// s.mu, so gen is this one's): stopped has scheduled the next
		// try; the shard stays down and keeps what is held.
		sl.mu.Unlock()
		return
	}
	sl.pid.Store(pid)
	// Under sl.mu (what was held goes first, before any new message): the
	// held messages' handler must not run here, where it could reach this
	// slot's lock again (a send to its own shard, a panic that stops it).
	HoldInline(func() {
		for j, m := range sl.early {
			s.root.Send(pid, m)
			sl.early[j] = nil
		}
		for j, m := range sl.held {
			s.root.Send(pid, m)
			sl.held[j] = nil
		}
	})
	sl.early, sl.held = sl.early[:0], sl.held[:0]
	dropped := sl.dropped
	sl.dropped = 0
	sl.upSince = time.Now()
	sl.down.Store(false)
	sl.mu.Unlock()
	s.log.Warn("actor shard restarted", "shards", s.name, "shard", i, "dropped_while_down", dropped)
}

// trySpawn is spawn for a respawn, off any actor's goroutine: a panic while
// producing the actor would otherwise end the process.
func (s *Shards) trySpawn(i int) (pid *actor.PID, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("producing the actor panicked: %v", r)
		}
	}()
	return s.spawn(i), nil
}

// Failer is a message that can be answered with an error by whoever holds
// it: a *Call, or a step of a chained call (one message that visits several
// shards in turn and answers its caller once), while the shard it was meant
// for is down or stopping. Fail must not block; the message is not delivered.
type Failer interface{ Fail(error) }

// Len is the number of shards.
func (s *Shards) Len() int { return len(s.slots) }

// Index is the shard owning hash h.
func (s *Shards) Index(h uint64) int { return int(h & s.mask) }

// PID is the current actor of the shard owning hash h.
func (s *Shards) PID(h uint64) *actor.PID { return s.slots[h&s.mask].pid.Load() }

// Send delivers msg to the shard owning hash h, fire-and-forget. Messages from
// one sender to one shard arrive in the order sent. While that shard is down a
// Failer (a *Call) is answered ErrShardDown at once, a Tick is dropped (the next one
// comes), and anything else waits for the restarted shard. Once Stop began, a
// *Call is answered ErrStopped and anything else is dropped.
func (s *Shards) Send(h uint64, msg any) { s.send(&s.slots[h&s.mask], msg) }

func (s *Shards) send(sl *slot, msg any) {
	if !sl.down.Load() && !s.stopping.Load() {
		s.root.Send(sl.pid.Load(), msg)
		return
	}
	if s.stopping.Load() {
		if f, ok := msg.(Failer); ok {
			f.Fail(ErrStopped)
		}
		return
	}
	if f, ok := msg.(Failer); ok {
		f.Fail(ErrShardDown)
		return
	}
	if _, ok := msg.(Tick); ok {
		return
	}
	sl.mu.Lock()
	if !sl.down.Load() { // restarted meanwhile
		sl.mu.Unlock()
		s.root.Send(sl.pid.Load(), msg)
		return
	}
	sl.keep(&sl.held, msg)
	sl.mu.Unlock()
}

// Broadcast delivers msg to every shard.
func (s *Shards) Broadcast(msg any) {
	for i := range s.slots {
		s.send(&s.slots[i], msg)
	}
}

// Down is the number of shards currently down (stopped by their supervisor,
// not yet restarted).
func (s *Shards) Down() int {
	n := 0
	for i := range s.slots {
		if s.slots[i].down.Load() {
			n++
		}
	}
	return n
}

// IsDown reports whether shard i is down (stopped by its supervisor, not yet
// restarted): a sender that would wait for it can skip it instead.
func (s *Shards) IsDown(i int) bool { return s.slots[i].down.Load() }

// Name is the shard set's name.
func (s *Shards) Name() string { return s.name }

// Tick starts a goroutine that broadcasts Tick{Now: clk.Now()} every interval
// until Stop. Calling it again has no effect.
func (s *Shards) Tick(clk clock.Clock, every time.Duration) {
	if every <= 0 || clk == nil {
		return
	}
	s.tickOnce.Do(func() {
		s.stopTick = make(chan struct{})
		s.tickDone = make(chan struct{})
		go func() {
			defer close(s.tickDone)
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-s.stopTick:
					return
				case <-t.C:
					s.Broadcast(Tick{Now: clk.Now()})
				}
			}
		}()
	})
}

// StopTimeout bounds how long Stop waits for the shards to finish their
// mailboxes and stop (protoactor's PoisonFuture waits 10 s); tests shorten it.
var StopTimeout = 10 * time.Second

// ErrStopTimeout is wrapped by Stop's error when a shard did not stop within
// StopTimeout: its handler is stuck, and may still run after Stop returned.
var ErrStopTimeout = errors.New("shards did not stop in time")

// StopWait is how long a stop keeping to by waits for its shards:
// StopTimeout, or less when by comes first, but never under StopFloor; a
// zero by is no deadline. A shutdown stops several services one after the
// other by one deadline, so that stuck shards in each do not add
// StopTimeout apiece past a supervisor's grace.
func StopWait(by time.Time) time.Duration { return StopWaitAtMost(by, StopTimeout) }

// StopWaitAtMost is StopWait for a stop step whose own bound is most
// instead of StopTimeout (a last write's wait, say).
func StopWaitAtMost(by time.Time, most time.Duration) time.Duration {
	if by.IsZero() {
		return most
	}
	return max(StopFloor, min(most, time.Until(by)))
}

// StopFloor is what a stop waits even past its deadline: healthy shards
// finish their mailboxes and stop within it (a stop only waits that long
// for a stuck one), and a shard reported stuck has its unflushed changes
// left unstored by the events and history clients — a late but clean stop
// must not lose them. Eleven services all stuck past the deadline add
// about 2 s, inside the 3 s between the plan's 27 s and a supervisor's 30.
const StopFloor = 200 * time.Millisecond

// Stop is StopBy with no deadline: it waits up to StopTimeout.
func (s *Shards) Stop() error { return s.StopBy(time.Time{}) }

// StopBy ends the ticker, then lets every shard finish the messages already
// in its mailbox and stops it, waiting for all of them up to StopWait(by) (a
// shard still running then is named in an ErrStopTimeout, and Stopped
// reports it false). Messages sent after the stop go to protoactor's dead
// letters; stop the senders first. A shard that is down is not restarted
// any more.
func (s *Shards) StopBy(by time.Time) error {
	var err error
	s.stopOnce.Do(func() {
		if s.stopTick != nil {
			close(s.stopTick)
			<-s.tickDone
		}
		s.mu.Lock()
		s.stopping.Store(true)
		s.mu.Unlock()
		sys := s.root.ActorSystem()
		wait := StopWait(by)
		futures := make([]*actor.Future, len(s.slots))
		for i := range s.slots {
			// PoisonFuture, with wait instead of its fixed 10 s.
			pid := s.slots[i].pid.Load()
			futures[i] = actor.NewFuture(sys, wait)
			p, _ := sys.ProcessRegistry.Get(pid)
			p.SendSystemMessage(pid, &actor.Watch{Watcher: futures[i].PID()})
			s.root.Poison(pid)
		}
		var stuck []int
		for i, f := range futures {
			if _, e := f.Result(); e != nil {
				stuck = append(stuck, i)
				continue
			}
			s.slots[i].halted.Store(true)
		}
		if len(stuck) > 0 {
			err = fmt.Errorf("%w: %s shards %v did not stop within %v (a handler still runs); they may still handle what is in their mailboxes",
				ErrStopTimeout, s.name, stuck, wait)
		}
		for _, d := range s.dispatchers {
			d.stop()
		}
		s.sup.remove(s)
	})
	return err
}

// Stopped reports whether Stop saw shard i's actor stop. Only then is the
// state the shard kept outside its actor (a kind's per-shard state) the
// caller's: a shard Stop gave up on (ErrStopTimeout) still runs its handler
// and whatever its mailbox holds, on its own goroutine, and its state
// stays with that goroutine. False before Stop.
func (s *Shards) Stopped(i int) bool { return s.slots[i].halted.Load() }
