package actors

import (
	"sync"
	"sync/atomic"
	"time"
)

// GroupCommitter turns many small durable writes into few fsyncs. Senders (shard
// actors) Add items; one goroutine takes everything queued at that moment (up
// to MaxGroup), hands the group to Apply — which writes it as one synced batch —
// and then to Done, which releases whoever waits for those items. While one
// Apply is syncing, the next group gathers, so under load the items per fsync
// grow with the offered rate and an idle system still commits a lone item at
// once (no timer, no added latency).
type GroupCommitter[T any] struct {
	in    chan T
	apply func([]T) error
	done  func([]T, error)
	max   int
	gap   time.Duration
	wg    sync.WaitGroup
	once  sync.Once

	groups atomic.Uint64
	items  atomic.Uint64
}

// GroupConfig configures a GroupCommitter; the zero value works.
type GroupConfig struct {
	Queue    int // channel capacity; Add blocks (back-pressure) when full. 0 = 16384
	MaxGroup int // most items per Apply. 0 = 4096
	// MinInterval spaces the starts of two commits: a group that arrives
	// sooner waits (and grows) until MinInterval has passed since the last
	// one started. For write-behind stores that nobody waits on, it caps the
	// fsync rate (an fsync costs ~150 µs of CPU on this project's machines)
	// at the price of that much more in the crash window. 0 = commit at once.
	MinInterval time.Duration
}

// WriteBehind is the GroupConfig of stores whose writes nobody waits for
// (device events and history): at most 50 commits a second each, written
// without fsync (storage syncs the WAL within its WriteBehindSync), so a
// crash can lose up to ~70 ms of them.
var WriteBehind = GroupConfig{MinInterval: 20 * time.Millisecond}

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
	g := &GroupCommitter[T]{in: make(chan T, cfg.Queue), apply: apply, done: done, max: cfg.MaxGroup, gap: cfg.MinInterval}
	g.wg.Add(1)
	go g.run()
	return g
}

// Add queues an item. It must not be called after Close.
func (g *GroupCommitter[T]) Add(item T) { g.in <- item }

// Close commits everything queued and stops the goroutine, waiting for it.
func (g *GroupCommitter[T]) Close() {
	g.once.Do(func() { close(g.in) })
	g.wg.Wait()
}

// Stats reports how many groups (fsyncs) and items were committed so far.
func (g *GroupCommitter[T]) Stats() (groups, items uint64) {
	return g.groups.Load(), g.items.Load()
}

func (g *GroupCommitter[T]) run() {
	defer g.wg.Done()
	buf := make([]T, 0, 64)
	var zero T
	var last time.Time
	for {
		item, ok := <-g.in
		if !ok {
			return
		}
		if g.gap > 0 {
			if wait := g.gap - time.Since(last); wait > 0 {
				time.Sleep(wait)
			}
			last = time.Now()
		}
		buf = append(buf[:0], item)
	gather:
		for len(buf) < g.max {
			select {
			case item, ok := <-g.in:
				if !ok {
					break gather
				}
				buf = append(buf, item)
			default:
				break gather
			}
		}
		err := g.apply(buf)
		g.done(buf, err)
		g.groups.Add(1)
		g.items.Add(uint64(len(buf)))
		for i := range buf {
			buf[i] = zero // drop references for the GC
		}
	}
}
