package actors

import (
	"fmt"
	"math/bits"
	"runtime"
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

// Shards is a fixed, power-of-two set of shard actors of one kind. An entity's
// key hashes (HashString, HashAddr, Mix64) to exactly one shard, which owns the
// entity's state: no locks guard it. Routing is a mask over the hash and a
// direct Send to that shard's PID, so nothing is ever dropped for want of a
// route (protoactor's consistent-hash router drops what it cannot route).
type Shards struct {
	root        *actor.RootContext
	pids        []*actor.PID
	dispatchers []*workerDispatcher
	mask        uint64

	tickOnce sync.Once
	stopTick chan struct{}
	tickDone chan struct{}
	stopOnce sync.Once

	// kind, mailboxes and stopped serve Kinds (readiness, metrics).
	kind      string
	mailboxes []actor.Mailbox
	stopped   atomic.Bool
}

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
// shard index each time the shard's actor is (re)created; protoactor's default
// supervisor restarts a panicking actor from its producer, so a shard whose
// state must survive a panic keeps that state outside the actor value and
// hands the same pointer back on every call.
func SpawnShards(root *actor.RootContext, n int, produce func(i int) actor.Actor) *Shards {
	n = ShardCount(n)
	s := &Shards{root: root, pids: make([]*actor.PID, n), dispatchers: make([]*workerDispatcher, n), mask: uint64(n - 1),
		mailboxes: make([]actor.Mailbox, n), kind: kindOf(produce(0))}
	for i := range s.pids {
		i := i
		s.dispatchers[i] = newWorkerDispatcher()
		// The mailbox is kept for its depth; Spawn makes it synchronously.
		mailbox := func() actor.Mailbox { m := actor.Unbounded()(); s.mailboxes[i] = m; return m }
		s.pids[i] = root.Spawn(actor.PropsFromProducer(func() actor.Actor { return produce(i) },
			actor.WithDispatcher(s.dispatchers[i]), actor.WithMailbox(mailbox)))
	}
	KindsOf(root.ActorSystem()).add(s)
	return s
}

// Len is the number of shards.
func (s *Shards) Len() int { return len(s.pids) }

// Index is the shard owning hash h.
func (s *Shards) Index(h uint64) int { return int(h & s.mask) }

// PID is the shard owning hash h.
func (s *Shards) PID(h uint64) *actor.PID { return s.pids[h&s.mask] }

// Send delivers msg to the shard owning hash h, fire-and-forget. Messages from
// one sender to one shard arrive in the order sent.
func (s *Shards) Send(h uint64, msg any) { s.root.Send(s.pids[h&s.mask], msg) }

// Broadcast delivers msg to every shard.
func (s *Shards) Broadcast(msg any) {
	for _, pid := range s.pids {
		s.root.Send(pid, msg)
	}
}

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

// Stop ends the ticker, then lets every shard finish the messages already in
// its mailbox and stops it, waiting for all of them. Messages sent after Stop
// go to protoactor's dead letters; stop the senders first.
func (s *Shards) Stop() error {
	var err error
	s.stopOnce.Do(func() {
		s.stopped.Store(true)
		if s.stopTick != nil {
			close(s.stopTick)
			<-s.tickDone
		}
		futures := make([]*actor.Future, len(s.pids))
		for i, pid := range s.pids {
			futures[i] = s.root.PoisonFuture(pid)
		}
		for i, f := range futures {
			if _, e := f.Result(); e != nil && err == nil {
				err = fmt.Errorf("stop shard %d: %w", i, e)
			}
		}
		for _, d := range s.dispatchers {
			d.stop()
		}
	})
	return err
}
