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
	work chan func()
	done chan struct{}
	// since is when the current mailbox run started (Unix ns; 0 = idle), so
	// Kinds.Down can tell a stuck shard. Wall time on purpose: the service's
	// test clock must not make a shard look stuck.
	since atomic.Int64
}

// throughput is how many messages a mailbox run handles before yielding; with
// a dedicated worker there is nobody to yield to, so it only bounds latency
// for system messages.
const throughput = 300

func newWorkerDispatcher() *workerDispatcher {
	// A mailbox schedules itself only when it goes from idle to running, so
	// at most one run is queued while another finishes: a small buffer never
	// blocks the sender.
	d := &workerDispatcher{work: make(chan func(), 4), done: make(chan struct{})}
	go d.loop()
	return d
}

func (d *workerDispatcher) loop() {
	for {
		select {
		case fn := <-d.work:
			d.since.Store(time.Now().UnixNano())
			fn()
			d.since.Store(0)
		case <-d.done:
			// Drain what was queued before the stop so no mailbox is left
			// marked running with messages in it.
			for {
				select {
				case fn := <-d.work:
					fn()
				default:
					return
				}
			}
		}
	}
}

func (d *workerDispatcher) runningSince() int64 { return d.since.Load() }

// Schedule implements actor.Dispatcher.
func (d *workerDispatcher) Schedule(fn func()) {
	select {
	case <-d.done:
		go fn() // after stop (dead letters, late system messages)
	default:
		select {
		case d.work <- fn:
		case <-d.done:
			go fn()
		}
	}
}

// Throughput implements actor.Dispatcher.
func (d *workerDispatcher) Throughput() int { return throughput }

// stop ends the worker once it has run what is queued.
func (d *workerDispatcher) stop() { close(d.done) }

var _ actor.Dispatcher = (*workerDispatcher)(nil)
