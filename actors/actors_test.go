package actors

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/internal/clock"
)

func quiet() *actor.ActorSystem {
	return actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
}

func TestShardCount(t *testing.T) {
	for in, want := range map[int]int{1: 1, 2: 2, 3: 4, 8: 8, 9: 16, 5000: MaxShards} {
		if got := ShardCount(in); got != want {
			t.Errorf("ShardCount(%d) = %d, want %d", in, got, want)
		}
	}
	if n := ShardCount(0); n < 2*runtime.GOMAXPROCS(0) || n&(n-1) != 0 {
		t.Errorf("ShardCount(0) = %d", n)
	}
}

func TestHashSpread(t *testing.T) {
	const shards = 16
	var byStr, byAddr [shards]int
	for i := 0; i < 16000; i++ {
		byStr[HashString("acc_"+string(rune('a'+i%26))+string(rune(i)))%shards]++
		// Addresses that differ only in their /64 prefix must still spread.
		a := netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, byte(i >> 8), byte(i), 0, 0, 0, 0, 0, 0, 0, 0, 0, 1})
		byAddr[HashAddr(a)%shards]++
	}
	for i := range byStr {
		if byStr[i] < 700 || byAddr[i] < 700 {
			t.Fatalf("uneven spread: strings %v addrs %v", byStr, byAddr)
		}
	}
	v4 := netip.MustParseAddr("192.0.2.1")
	if HashAddr(v4) != HashAddr(netip.MustParseAddr("::ffff:192.0.2.1")) {
		t.Fatal("mapped address hashes apart from its IPv4 form")
	}
	if HashString("a") == HashString("b") {
		t.Fatal("collision")
	}
}

type counter struct{ n *int }

type probe = Call[int, int]

func (c counter) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *probe:
		*c.n += m.Req
		m.Reply(*c.n, nil)
	case Tick:
		*c.n = 0
	}
}

func TestShardsRouteAndCall(t *testing.T) {
	sys := quiet()
	counts := make([]int, 4)
	s := SpawnShards(sys.Root, 3, func(i int) actor.Actor { return counter{&counts[i]} })
	if s.Len() != 4 {
		t.Fatalf("len %d", s.Len())
	}
	calls := NewCalls[int, int](time.Second)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				c := calls.Get(1)
				s.Send(uint64(i), c)
				if _, err := calls.Wait(c); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	total := 0
	for h := uint64(0); h < 4; h++ {
		c := calls.Get(0)
		s.Send(h, c)
		n, _ := calls.Wait(c)
		total += n
	}
	if total != 800 {
		t.Fatalf("total %d", total)
	}
	s.Tick(clock.Fixed{T: time.Unix(1, 0)}, time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	for i, n := range counts {
		if n != 0 {
			t.Fatalf("shard %d not ticked: %d", i, n)
		}
	}
}

func TestCallTimeout(t *testing.T) {
	calls := NewCalls[int, int](10 * time.Millisecond)
	c := calls.Get(1)
	if _, err := calls.Wait(c); !errors.Is(err, ErrTimeout) {
		t.Fatalf("want timeout, got %v", err)
	}
	c.Reply(1, nil) // a late reply must not block or panic
	c = calls.Get(2)
	c.Reply(3, nil)
	if v, err := calls.Wait(c); v != 3 || err != nil {
		t.Fatalf("%d %v", v, err)
	}
}

// TestTableTrim: a trim keeps the most recently touched entries and never
// evicts one that may not go; the bound checks again only a quarter later.
func TestTableTrim(t *testing.T) {
	tb := NewTable[int, int64](0) // value: last touch; odd keys may not go
	for i := range 100 {
		tb.Put(i, int64(i))
	}
	touched := func(v int64) (int64, bool) { return v, v%2 == 0 }
	if n := tb.Trim(75, touched); n != 25 || tb.Len() != 75 {
		t.Fatalf("trimmed %d, left %d", n, tb.Len())
	}
	for i := range 100 {
		_, ok := tb.Get(i)
		if gone := i%2 == 0 && i < 50; ok == gone {
			t.Fatalf("entry %d: held %v", i, ok)
		}
	}
	if n := tb.Trim(10, touched); n != 25 || tb.Len() != 50 {
		t.Fatalf("the entries that may not go were trimmed: %d, left %d", n, tb.Len())
	}
	b := Bound{Max: 40}
	if !b.Over(50) {
		t.Fatal("a table over its bound is not due a trim")
	}
	b.Reset(50) // nothing more could go
	if b.Over(55) || !b.Over(60) {
		t.Fatal("the next check is not a quarter of the bound later")
	}
	if (&Bound{}).Over(1 << 30) {
		t.Fatal("no bound trims")
	}
}

func TestTableSweepShrinks(t *testing.T) {
	// The heap is the process's: measured from a base taken before the
	// table, and again after another collection when what other tests'
	// goroutines still allocate gets in the way.
	var ms runtime.MemStats
	heap := func() int64 { runtime.GC(); runtime.ReadMemStats(&ms); return int64(ms.HeapAlloc) }
	base := heap()
	tb := NewTable[int, [4]int64](0)
	for i := 0; i < 100000; i++ {
		tb.Put(i, [4]int64{int64(i)})
	}
	full := heap() - base
	if n := tb.Sweep(func(k int, _ [4]int64) bool { return k >= 10 }); n != 99990 || tb.Len() != 10 {
		t.Fatalf("swept %d, left %d", n, tb.Len())
	}
	after := heap() - base
	for try := 0; try < 3 && after > full/4; try++ {
		after = heap() - base
	}
	if after > full/4 {
		t.Fatalf("heap grew by %d with the table, still %d after the sweep: the map did not shrink", full, after)
	}
	if v, ok := tb.Get(3); !ok || v[0] != 3 {
		t.Fatal("survivor lost")
	}
	runtime.KeepAlive(tb)
}

func TestGroupCommitter(t *testing.T) {
	var mu sync.Mutex
	var applied []int
	fail := errors.New("x")
	var failed int
	release := make(chan struct{})
	g := NewGroupCommitter(GroupConfig{Queue: 1024, MaxGroup: 100}, func(items []int) error {
		<-release
		if items[0] < 0 {
			return fail
		}
		mu.Lock()
		applied = append(applied, items...)
		mu.Unlock()
		return nil
	}, func(items []int, err error) {
		if err != nil {
			failed += len(items)
		}
	})
	g.Add(1) // the first group holds one item while it "syncs"...
	for i := 2; i <= 301; i++ {
		g.Add(i) // ...and the rest gather behind it
	}
	close(release)
	g.Close()
	groups, items := g.Stats()
	if items != 301 || groups > 5 || len(applied) != 301 || failed != 0 {
		t.Fatalf("groups %d items %d applied %d", groups, items, len(applied))
	}
	for i, v := range applied {
		if v != i+1 {
			t.Fatalf("order broken at %d: %d", i, v)
		}
	}
}

// TestGroupCommitterBarrier: a barrier returns only after every item queued
// before it went through apply and done.
func TestGroupCommitterBarrier(t *testing.T) {
	var done atomic.Int64
	release := make(chan struct{})
	g := NewGroupCommitter(GroupConfig{}, func(items []int) error {
		<-release
		return nil
	}, func(items []int, _ error) { done.Add(int64(len(items))) })
	defer g.Close()
	for i := 0; i < 100; i++ {
		g.Add(i)
	}
	if err := g.Barrier(20 * time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Fatalf("barrier behind a stuck apply: %v", err)
	}
	close(release)
	if err := g.Barrier(5 * time.Second); err != nil || done.Load() != 100 {
		t.Fatalf("barrier: %v, %d items done", err, done.Load())
	}
	if err := g.Barrier(time.Second); err != nil {
		t.Fatalf("barrier on an idle committer: %v", err)
	}
}

// TestGroupCommitterAfterClose: a sender that runs on after Close (a shard
// whose Stop timed out) is refused, and a barrier answers ErrStopped,
// instead of a send on the closed channel panicking.
func TestGroupCommitterAfterClose(t *testing.T) {
	var applied atomic.Int64
	g := NewGroupCommitter(GroupConfig{}, func(items []int) error {
		applied.Add(int64(len(items)))
		return nil
	}, func([]int, error) {})
	if !g.TryAdd(1) || !g.TryAddLazy(2) || !g.Add(0) || g.Closed() {
		t.Fatal("refused before Close")
	}
	g.Close()
	if applied.Load() != 3 || !g.Closed() {
		t.Fatalf("Close applied %d items, closed %v", applied.Load(), g.Closed())
	}
	if g.TryAdd(3) || g.TryAddLazy(4) || g.Add(5) {
		t.Fatal("an item taken after Close")
	}
	if err := g.Barrier(time.Second); !errors.Is(err, ErrStopped) {
		t.Fatalf("barrier after Close: %v", err)
	}
	if g.Open() != 0 {
		t.Fatalf("open after Close: %d", g.Open())
	}
}

// TestGroupCommitterAddDuringClose: Adds blocked on a full queue when
// Close begins are taken and applied; those that come after are refused;
// none panics, and every item Add took is applied.
func TestGroupCommitterAddDuringClose(t *testing.T) {
	gate := make(chan struct{})
	var applied atomic.Int64
	g := NewGroupCommitter(GroupConfig{Queue: 1, MaxGroup: 1}, func(items []int) error {
		<-gate
		applied.Add(int64(len(items)))
		return nil
	}, func([]int, error) {})
	var taken atomic.Int64
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if g.Add(i) {
				taken.Add(1)
			}
		}()
	}
	time.Sleep(10 * time.Millisecond) // one in Apply, one queued, the rest blocked
	closed := make(chan struct{})
	go func() { g.Close(); close(closed) }()
	for !g.Closed() {
		time.Sleep(time.Millisecond)
	}
	if g.Add(100) {
		taken.Add(1)
		t.Error("an Add after Close began was taken")
	}
	close(gate)
	wg.Wait()
	<-closed
	if taken.Load() != applied.Load() || g.Open() != 0 {
		t.Fatalf("taken %d, applied %d, open %d", taken.Load(), applied.Load(), g.Open())
	}
}

// TestGroupCommitterLinger: lazy items wait for a barrier, an item
// somebody waits on, LingerItems or the linger's end, and go as one group;
// Close commits what lingers.
func TestGroupCommitterLinger(t *testing.T) {
	groups := make(chan []int, 16)
	newG := func(linger time.Duration) *GroupCommitter[int] {
		return NewGroupCommitter(GroupConfig{Linger: linger, LingerItems: 4}, func(items []int) error {
			groups <- append([]int(nil), items...)
			return nil
		}, func([]int, error) {})
	}
	none := func(why string) {
		t.Helper()
		select {
		case got := <-groups:
			t.Fatalf("%s: a group went early: %v", why, got)
		case <-time.After(50 * time.Millisecond):
		}
	}
	want := func(why string, items ...int) {
		t.Helper()
		select {
		case got := <-groups:
			if fmt.Sprint(got) != fmt.Sprint(items) {
				t.Fatalf("%s: group %v; want %v", why, got, items)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no group; want %v", why, items)
		}
	}
	g := newG(time.Hour)
	for i := 1; i <= 3; i++ {
		g.TryAddLazy(i)
	}
	none("three lazy items")
	if err := g.Barrier(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	want("a barrier", 1, 2, 3)

	g.TryAddLazy(4)
	none("a lazy item after a barrier")
	g.TryAdd(5) // somebody waits on it
	want("an item somebody waits on", 4, 5)

	// LingerItems queued end the linger (however the five split).
	var got []int
	for i := 6; i <= 10; i++ {
		g.TryAddLazy(i)
	}
	for len(got) < 5 {
		select {
		case gr := <-groups:
			got = append(got, gr...)
		case <-time.After(5 * time.Second):
			t.Fatalf("%d lazy items, LingerItems 4: committed %v", 5, got)
		}
	}
	if fmt.Sprint(got) != "[6 7 8 9 10]" {
		t.Fatalf("lazy items committed as %v", got)
	}

	g.Close()

	// A fresh committer: the last step may have left a kick.
	g = newG(time.Hour)
	g.TryAddLazy(11)
	none("one lazy item")
	g.Close()
	want("Close", 11)

	short := newG(20 * time.Millisecond)
	defer short.Close()
	short.TryAddLazy(1)
	want("the linger's end", 1)
}

// TestGroupCommitterLingerAfterBarrier: a linger's kick may stand for
// several items (the slot holds one); when its gather stops at a barrier,
// an item somebody waits on queued behind the barrier and a lazy item is
// committed at once, not after the next group's linger.
func TestGroupCommitterLingerAfterBarrier(t *testing.T) {
	groups := make(chan []int, 16)
	gate, entered := make(chan struct{}), make(chan struct{})
	g := NewGroupCommitter(GroupConfig{Linger: time.Hour, LingerItems: 100}, func(items []int) error {
		if items[0] == 0 {
			close(entered)
			<-gate // the first group holds the committer while the rest queue
		}
		groups <- append([]int(nil), items...)
		return nil
	}, func([]int, error) {})
	defer g.Close()
	g.TryAdd(0)
	// The committer applies 0's group and waits at the gate. (Queued() == 0
	// said only that it had received 0: still gathering, it took 1 and the
	// barrier into the same group, and the wait below never ended.)
	<-entered
	g.TryAddLazy(1)
	barrier := make(chan error, 1)
	go func() { barrier <- g.Barrier(10 * time.Second) }()
	for deadline := time.Now().Add(10 * time.Second); g.Queued() != 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("queued %d, want the lazy item and the barrier", g.Queued())
		}
	}
	g.TryAddLazy(2)
	g.TryAdd(3) // somebody waits on it; its kick finds the slot full
	close(gate)
	var got []int
	for len(got) < 4 {
		select {
		case gr := <-groups:
			got = append(got, gr...)
		case <-time.After(5 * time.Second):
			t.Fatalf("committed %v; the item somebody waits on lingers behind a lazy one", got)
		}
	}
	if fmt.Sprint(got) != "[0 1 2 3]" {
		t.Fatalf("committed %v", got)
	}
	if err := <-barrier; err != nil {
		t.Fatal(err)
	}
}
