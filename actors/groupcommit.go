package actors

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// GroupCommitter turns many small writes into few batches. Senders (shard
// actors) Add items; one goroutine takes everything queued at that moment (up
// to MaxGroup), hands the group to Apply — which writes it as one batch — and
// then to Done, which releases whoever waits for those items. While one Apply
// runs (and syncs, for a strict store), the next group gathers, so under load
// the items per batch grow with the offered rate and an idle system still
// commits a lone item at once (no timer, no added latency, unless it
// lingers: below). Being one goroutine, it also keeps one sender's writes in
// the order they were added.
//
// With GroupConfig.Linger, a group whose first item nobody waits on (added
// with TryAddLazy) waits to grow instead: until an item somebody waits on
// or a barrier is queued, LingerItems are queued, or Linger has passed. A
// store that syncs on a timer anyway (storage.Interval) then takes about
// one batch per sync instead of one per scheduler pass; the lazy items'
// owner keeps its crash bound by taking a Barrier before each sync.
type GroupCommitter[T any] struct {
	in    chan queued[T]
	apply func([]T) error
	done  func([]T, error)
	max   int
	wg    sync.WaitGroup
	once  sync.Once
	// mu orders Close against the sends and barriers: a sender that
	// may still run after Close (a shard handler that outlived its Stop's
	// timeout) is refused, instead of sending on the closed channel.
	// closing is set before Close takes mu, so a send refuses at once
	// (TryRLock; Add looks at closing first) rather than wait for a Close
	// that waits for a barrier.
	mu      sync.RWMutex
	closing atomic.Bool

	linger      time.Duration
	lingerItems int
	// kick ends a linger: an item somebody waits on, a barrier, a full
	// linger or Close. One kick may stand for several of them (the slot
	// holds one): the committer does not linger while a gather it ended
	// early left items queued, so none of those waits behind a lazy one. A
	// kick left over from an item an earlier group took only ends the next
	// linger early.
	kick chan struct{}

	groups atomic.Uint64
	items  atomic.Uint64
	// open counts the items added and not yet through Done: those queued
	// and those the committer has taken (a lingering group, one in Apply).
	open atomic.Int64
}

// GroupConfig configures a GroupCommitter; the zero value works.
type GroupConfig struct {
	Queue    int // channel capacity; Add blocks (back-pressure) when full. 0 = 16384
	MaxGroup int // most items per Apply. 0 = 4096
	// Linger is the longest a group of lazy items waits to grow (0: no
	// group waits; a user that picks a linger itself when 0, as the quota
	// does, takes a negative value for none).
	Linger time.Duration
	// LingerItems ends a linger once that many items are queued. 0 =
	// MaxGroup.
	LingerItems int
}

// queued is an item, or a barrier (closed once everything queued before it
// went through Apply and Done).
type queued[T any] struct {
	item    T
	barrier chan struct{}
	lazy    bool // nobody waits on it: its group may linger
}

// NewGroupCommitter starts the committing goroutine. apply writes a group and
// reports whether it is durable; done sees every group with apply's result.
// Both run on the committer goroutine, in order, and must not call Add.
func NewGroupCommitter[T any](cfg GroupConfig, apply func([]T) error, done func([]T, error)) *GroupCommitter[T] {
	if cfg.Queue <= 0 {
		cfg.Queue = 16384
	}
	if cfg.MaxGroup <= 0 {
		cfg.MaxGroup = 4096
	}
	g := &GroupCommitter[T]{in: make(chan queued[T], cfg.Queue), apply: apply, done: done, max: cfg.MaxGroup}
	if cfg.Linger > 0 {
		g.linger, g.lingerItems = cfg.Linger, cfg.LingerItems
		if g.lingerItems <= 0 || g.lingerItems > cfg.MaxGroup {
			g.lingerItems = cfg.MaxGroup
		}
		g.kick = make(chan struct{}, 1)
	}
	g.wg.Add(1)
	go g.run()
	return g
}

// Add queues an item, waiting for room when the queue is full
// (back-pressure), and reports whether it did: after Close it refuses the
// item instead, for a sender that may run on after Close (a shard handler
// that outlived its Stop's timeout; see Closed). It costs a read lock on
// top of the send (two atomic adds, no allocation).
func (g *GroupCommitter[T]) Add(item T) bool {
	if g.closing.Load() { // Close has begun: do not wait for its lock
		return false
	}
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.closing.Load() {
		return false
	}
	g.open.Add(1)
	// A full queue holds the read lock while it waits; Close waits for it,
	// and the committer, still running, makes the room.
	g.in <- queued[T]{item: item}
	g.wake()
	return true
}

// TryAdd queues an item unless the queue is full or the committer is
// closed, and reports whether it did (Closed tells the two apart). A sender
// that may run on a caller's goroutine (actors.InlineRuns) uses it:
// blocking there would hold the caller past its own deadline.
func (g *GroupCommitter[T]) TryAdd(item T) bool {
	if !g.mu.TryRLock() { // Close has begun
		return false
	}
	defer g.mu.RUnlock()
	if g.closing.Load() {
		return false
	}
	g.open.Add(1) // before the send: the committer may take it at once
	select {
	case g.in <- queued[T]{item: item}:
		g.wake()
		return true
	default:
		g.open.Add(-1)
		return false
	}
}

// TryAddLazy is TryAdd for an item nobody waits on: with a Linger, its
// group may wait to grow (see GroupCommitter).
func (g *GroupCommitter[T]) TryAddLazy(item T) bool {
	if !g.mu.TryRLock() { // Close has begun
		return false
	}
	defer g.mu.RUnlock()
	if g.closing.Load() {
		return false
	}
	g.open.Add(1)
	select {
	case g.in <- queued[T]{item: item, lazy: true}:
		if g.kick != nil && len(g.in) >= g.lingerItems {
			g.wake()
		}
		return true
	default:
		g.open.Add(-1)
		return false
	}
}

// wake ends a linger under way, if any (a kick costs a non-blocking send).
func (g *GroupCommitter[T]) wake() {
	if g.kick == nil {
		return
	}
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// Queued is how many items and barriers wait for the committer now.
func (g *GroupCommitter[T]) Queued() int { return len(g.in) }

// Open is how many items were added and have not yet been through Done:
// unlike Queued, it counts the group the committer has taken and is
// lingering on or applying, which is not in the store either.
func (g *GroupCommitter[T]) Open() int { return int(g.open.Load()) }

// Barrier waits until every item queued before it went through Apply and
// Done, or until wait passes (ErrTimeout), or ErrStopped once Close began.
// A shard that reloads its state from the store calls it first, so that
// what it reads includes its own writes still in the queue.
func (g *GroupCommitter[T]) Barrier(wait time.Duration) error {
	t := time.NewTimer(wait)
	defer t.Stop()
	ch := make(chan struct{})
	if err := g.sendBarrier(ch, t.C); err != nil {
		return err
	}
	select {
	case <-ch:
		return nil
	case <-t.C:
		return ErrTimeout
	}
}

// sendBarrier queues barrier ch, unless the committer is closed or timeout
// fires first.
func (g *GroupCommitter[T]) sendBarrier(ch chan struct{}, timeout <-chan time.Time) error {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.closing.Load() {
		return ErrStopped
	}
	select {
	case g.in <- queued[T]{barrier: ch}:
		g.wake()
		return nil
	case <-timeout:
		return ErrTimeout
	}
}

// Close commits everything queued and stops the goroutine, waiting for it.
// Afterwards Add, TryAdd and TryAddLazy refuse their items and Barrier
// answers ErrStopped.
func (g *GroupCommitter[T]) Close() {
	g.once.Do(func() {
		g.closing.Store(true)
		g.mu.Lock()
		close(g.in)
		g.mu.Unlock()
		g.wake()
	})
	g.wg.Wait()
}

// Closed reports whether Close began: a refused TryAdd then means the
// committer is gone, not that its queue is full.
func (g *GroupCommitter[T]) Closed() bool { return g.closing.Load() }

// Stats reports how many groups (batches) and items were committed so far.
func (g *GroupCommitter[T]) Stats() (groups, items uint64) {
	return g.groups.Load(), g.items.Load()
}

func (g *GroupCommitter[T]) run() {
	defer g.wg.Done()
	buf := make([]T, 0, 64)
	var zero T
	var linger *time.Timer
	if g.kick != nil {
		linger = time.NewTimer(time.Hour)
		linger.Stop()
	}
	// more: the last gather stopped at a barrier or at MaxGroup with items
	// still queued. Their kicks may have been spent on the linger that
	// gathered it, so the next group must not linger on them.
	more := false
	for {
		q, ok := <-g.in
		if !ok {
			return
		}
		if q.barrier != nil {
			close(q.barrier) // every earlier group is done
			continue
		}
		buf = append(buf[:0], q.item)
		if q.lazy && linger != nil && !more && len(g.in) < g.lingerItems {
			// The queue fills while this goroutine sleeps: the senders
			// wake it only for an item somebody waits on, a barrier, a
			// full linger or Close, so a lazy item costs no wake-up.
			linger.Reset(g.linger)
			select {
			case <-g.kick:
			case <-linger.C:
			}
			linger.Stop()
		} else if len(g.in) == 0 {
			// Let the senders that are ready to run add theirs first: under
			// load this grows the group at the cost of one scheduler pass;
			// on an idle system nobody else is runnable and it returns at once.
			runtime.Gosched()
		}
		var barrier chan struct{}
	gather:
		for len(buf) < g.max {
			select {
			case q, ok := <-g.in:
				if !ok {
					break gather
				}
				if q.barrier != nil {
					barrier = q.barrier // after this group
					break gather
				}
				buf = append(buf, q.item)
			default:
				break gather
			}
		}
		more = (barrier != nil || len(buf) >= g.max) && len(g.in) > 0
		err := g.apply(buf)
		// done answers the waiting senders; a shard it sends to must not
		// run on this goroutine, whose handler may Add here (a full queue
		// would then wait on itself).
		HoldInline(func() { g.done(buf, err) })
		g.groups.Add(1)
		g.items.Add(uint64(len(buf)))
		g.open.Add(-int64(len(buf)))
		for i := range buf {
			buf[i] = zero // drop references for the GC
		}
		if barrier != nil {
			close(barrier)
		}
	}
}
