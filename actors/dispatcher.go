package actors

import (
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// workerDispatcher runs one actor's mailbox on one long-lived goroutine.
// protoactor's default dispatcher starts a fresh goroutine each time an idle
// mailbox gets a message; on the request path that means a new 8 KiB stack
// that then grows (runtime.newstack/copystack were 22% of evaluate's CPU in a
// profile) plus an allocation per hop. A shard's own worker keeps its grown
// stack and allocates nothing.
type workerDispatcher struct {
	// work carries mailbox runs; a nil run is the stop signal. A plain
	// channel send and receive: a select over a second "done" channel cost
	// as much as the rest of the hand-off (runtime.selectgo in profiles).
	work    chan func()
	stopped atomic.Bool
	// runs counts mailbox runs started and ended: odd while one runs; the
	// shard's actor adds two for each message it handles. Kinds samples it
	// to tell a stuck shard (the same odd value for longer than
	// StuckAfter), so the worker reads no clock per run.
	runs atomic.Uint64
	// inline lets the goroutine that wakes the idle mailbox run it itself
	// (InlineRuns).
	inline bool
}

// inlineHeld counts the sections, on any goroutine, in which no mailbox may
// run inline (HoldInline). It is global rather than per goroutine (Go has no
// goroutine-local state): while one is open every mailbox goes to its
// worker, which is always safe, only slower.
var inlineHeld atomic.Int32

// HoldInline runs fn with inline mailbox runs turned off everywhere. Code that
// sends to shards from a goroutine that a shard's handler may itself wait on
// (a group committer's done callback: the handler may Add to that
// committer) or while holding a lock that handler may take, wraps the sends
// in it, so the handler runs on its worker instead of on this goroutine.
func HoldInline(fn func()) {
	inlineHeld.Add(1)
	defer inlineHeld.Add(-1)
	fn()
}

// throughput is how many messages a mailbox run handles before yielding; with
// a dedicated worker there is nobody to yield to, so it only bounds latency
// for system messages.
const throughput = 300

func newWorkerDispatcher() *workerDispatcher {
	// A mailbox schedules itself only when it goes from idle to running, so
	// at most one run is queued while another finishes, plus the stop
	// signal: a small buffer never blocks the sender.
	d := &workerDispatcher{work: make(chan func(), 4)}
	go d.loop()
	return d
}

func (d *workerDispatcher) loop() {
	for {
		fn := <-d.work
		if fn == nil {
			// Drain what was queued before the stop so no mailbox is left
			// marked running with messages in it.
			for {
				select {
				case fn := <-d.work:
					if fn != nil {
						fn()
					}
				default:
					return
				}
			}
		}
		d.runs.Add(1)
		fn()
		d.runs.Add(1)
	}
}

// running returns the run sequence and whether a run is under way.
func (d *workerDispatcher) running() (seq uint64, busy bool) {
	seq = d.runs.Load()
	return seq, seq&1 == 1
}

// Schedule implements actor.Dispatcher.
func (d *workerDispatcher) Schedule(fn func()) {
	if d.stopped.Load() {
		go fn() // after stop (dead letters, late system messages)
		return
	}
	if d.inline && inlineHeld.Load() == 0 {
		// The mailbox just went from idle to running and its worker is
		// parked: run it here instead of waking the worker. The mailbox's
		// own state (idle → running) still admits one run at a time, so the
		// actor keeps its single owner; what is saved is the wake-up and
		// the two goroutine switches of a hop.
		d.runs.Add(1)
		fn()
		d.runs.Add(1)
		return
	}
	d.work <- fn
}

// Throughput implements actor.Dispatcher.
func (d *workerDispatcher) Throughput() int { return throughput }

// stop ends the worker once it has run what is queued.
func (d *workerDispatcher) stop() {
	if d.stopped.CompareAndSwap(false, true) {
		d.work <- nil
	}
}

// stuckWatch remembers, per dispatcher, the busy run sequence first seen and
// when, so that Kinds.Down can tell a run that has lasted past StuckAfter.
type stuckWatch struct {
	seq  uint64
	seen time.Time
}

var _ actor.Dispatcher = (*workerDispatcher)(nil)
