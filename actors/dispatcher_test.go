package actors

import (
	"bytes"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// goid is the current goroutine's id, read from its stack header (tests only).
func goid() uint64 {
	var b [64]byte
	n := runtime.Stack(b[:], false)
	f := bytes.Fields(b[:n])
	id, _ := strconv.ParseUint(string(f[1]), 10, 64)
	return id
}

// where is a message asking the shard which goroutine ran it.
type where chan uint64

// inlineProbe answers where on the goroutine it runs, and checks that no two
// runs of one shard overlap.
type inlineProbe struct {
	busy    *atomic.Int32
	overlap *atomic.Bool
	n       *atomic.Int64
}

func (p inlineProbe) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case where:
		m <- goid()
	case int:
		if p.busy.Add(1) != 1 {
			p.overlap.Store(true)
		}
		for range m {
			runtime.Gosched() // widen the window for an overlapping run
		}
		p.n.Add(1)
		p.busy.Add(-1)
	}
}

func newInlineProbe(t *testing.T, opts ...ShardOption) (*Shards, inlineProbe) {
	t.Helper()
	sys := quiet()
	t.Cleanup(sys.Shutdown)
	p := inlineProbe{busy: new(atomic.Int32), overlap: new(atomic.Bool), n: new(atomic.Int64)}
	s := SpawnShards(sys.Root, 1, func(int) actor.Actor { return p }, opts...)
	t.Cleanup(func() { _ = s.Stop() })
	return s, p
}

// TestInlineRunsOnTheSender: with InlineRuns an idle shard's mailbox runs on
// the goroutine that sends to it, and without it on the shard's worker.
func TestInlineRunsOnTheSender(t *testing.T) {
	for _, inline := range []bool{true, false} {
		var opts []ShardOption
		if inline {
			opts = append(opts, InlineRuns())
		}
		s, _ := newInlineProbe(t, opts...)
		ch := make(where, 1)
		s.Send(0, ch)
		if got := <-ch == goid(); got != inline {
			t.Errorf("InlineRuns %v: ran on the sender's goroutine: %v", inline, got)
		}
	}
}

// TestHoldInlineUsesTheWorker: inside HoldInline, and on a group committer's
// done callback (a shard's handler may Add to that committer, so it must not
// run on the committer's goroutine), the shard runs on its worker.
func TestHoldInlineUsesTheWorker(t *testing.T) {
	s, _ := newInlineProbe(t, InlineRuns())
	ch := make(where, 1)
	HoldInline(func() { s.Send(0, ch) })
	if <-ch == goid() {
		t.Fatal("a send inside HoldInline ran the shard on the sender's goroutine")
	}

	ran := make(chan [2]uint64, 1)
	g := NewGroupCommitter(GroupConfig{}, func([]int) error { return nil }, func([]int, error) {
		w := make(where, 1)
		s.Send(0, w)
		ran <- [2]uint64{goid(), <-w}
	})
	defer g.Close()
	g.Add(1)
	select {
	case ids := <-ran:
		if ids[0] == ids[1] {
			t.Fatal("a send from a group committer's done ran the shard on the committer's goroutine")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the group committer did not call done")
	}
}

// TestInlineRunsKeepOneOwner: many senders racing to an inline shard never
// run its handler twice at once, and every message is handled.
func TestInlineRunsKeepOneOwner(t *testing.T) {
	s, p := newInlineProbe(t, InlineRuns())
	const senders, each = 8, 200
	var wg sync.WaitGroup
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				s.Send(0, 3)
			}
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for p.n.Load() < senders*each && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := p.n.Load(); n != senders*each {
		t.Fatalf("handled %d of %d messages", n, senders*each)
	}
	if p.overlap.Load() {
		t.Fatal("two runs of one shard overlapped")
	}
}
