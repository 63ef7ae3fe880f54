package cluster

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type node struct {
	m        *Member
	view     *OwnerView
	b        *Balancer
	stop     context.CancelFunc
	done     chan struct{}
	released atomic.Int64
	acquired atomic.Int64
}

func startNode(t *testing.T, root, id string) *node {
	t.Helper()
	cli := newClient(t)
	n := &node{m: join(t, cli, root, id, time.Second), done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	n.stop = cancel
	view, err := NewOwnerView(cli, root)
	if err != nil {
		t.Fatal(err)
	}
	if err := view.Start(ctx); err != nil {
		t.Fatal(err)
	}
	n.view = view
	n.b, err = NewBalancer(BalancerConfig{
		Member: n.m, View: view, Kinds: []Kind{KindAddr}, Every: 100 * time.Millisecond,
		Acquired:  func(context.Context, Claim) { n.acquired.Add(1) },
		Releasing: func(context.Context, Claim) error { n.released.Add(1); return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() { defer close(n.done); n.b.Run(ctx) }()
	return n
}

// halt stops the node's balancer; kill also stops renewing without revoking,
// as kill -9 does.
func (n *node) halt() { n.stop(); <-n.done }

func (n *node) kill() { n.halt(); n.m.Close() }

// settled: the owner view of obs matches the rendezvous assignment over ids.
func settled(obs *node, ids []string) bool {
	want := Assign(KindAddr, ids)
	got := obs.view.Owners(KindAddr)
	if len(got) != len(want) {
		return false
	}
	for s, o := range want {
		if got[s] != o {
			return false
		}
	}
	return true
}

// TestBalancerJoinKillLeave: three nodes settle on the assignment; a fourth
// joins and takes only its shards, each handed over after the old owner's
// flush hook; a killed node's shards move once its lease runs out; a node
// leaving gracefully hands over every shard first.
func TestBalancerJoinKillLeave(t *testing.T) {
	root := testRoot(t)
	var nodes []*node
	var mu sync.Mutex
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, n := range nodes {
			n.halt()
			n.m.Close()
		}
	}()
	add := func(id string) *node {
		n := startNode(t, root, id)
		mu.Lock()
		nodes = append(nodes, n)
		mu.Unlock()
		return n
	}
	a, b, c := add("a"), add("b"), add("c")
	eventually(t, "three nodes settle", func() bool { return settled(a, []string{"a", "b", "c"}) })
	before := Assign(KindAddr, []string{"a", "b", "c"})
	// Nodes started one after another hand shards on as each arrives; count
	// from here.
	handedBefore := a.released.Load() + b.released.Load() + c.released.Load()

	d := add("d")
	four := []string{"a", "b", "c", "d"}
	moved := 0
	for s, o := range Assign(KindAddr, four) {
		if o != before[s] {
			moved++
		}
	}
	handed := func() int64 { return a.released.Load() + b.released.Load() + c.released.Load() - handedBefore }
	// The owner keys reach a's view before d's Acquired hooks have all
	// run: wait for the hooks too, then check that nothing more moved.
	eventually(t, "four nodes settle", func() bool {
		return settled(a, four) && d.acquired.Load() >= int64(moved) && handed() >= int64(moved)
	})
	if handed := handed(); handed != int64(moved) || d.acquired.Load() != int64(moved) {
		t.Fatalf("%d shards moved; old owners flushed %d, d acquired %d", moved, handed, d.acquired.Load())
	}
	t.Logf("join: %d of %d shards moved", moved, AddrShards)

	killed := time.Now()
	c.kill()
	eventually(t, "c's shards move after its lease", func() bool { return settled(a, []string{"a", "b", "d"}) })
	t.Logf("kill: the others own c's shards %v after the kill (TTL 1s)", time.Since(killed).Round(10*time.Millisecond))

	d.halt()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dOwned := d.b.Owned(KindAddr)
	flushed := d.released.Load()
	if err := d.b.ReleaseAll(ctx); err != nil {
		t.Fatal(err)
	}
	if got := d.released.Load() - flushed; got != int64(dOwned) || d.b.Owned(KindAddr) != 0 {
		t.Fatalf("graceful leave flushed %d of %d shards, still owns %d", got, dOwned, d.b.Owned(KindAddr))
	}
	if err := d.m.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "d's shards move after its leave", func() bool { return settled(a, []string{"a", "b"}) })
	if !slices.Equal(b.m.MemberIDs(), []string{"a", "b"}) {
		t.Fatalf("b sees %v", b.m.MemberIDs())
	}
}

// TestBalancerReleaseStopsTheClaimFirst: while Releasing runs, Claim no
// longer reports the shard (the node's routing and gRPC service refuse new
// owner-only work for it, so the flush is of everything admitted); a
// Releasing that fails keeps the shard, reported as before, and the next
// pass hands it over.
func TestBalancerReleaseStopsTheClaimFirst(t *testing.T) {
	root := testRoot(t)
	cli := newClient(t)
	m := join(t, cli, root, "a", time.Second)
	defer m.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	view, err := NewOwnerView(cli, root)
	if err != nil {
		t.Fatal(err)
	}
	if err := view.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var (
		b                 *Balancer
		stillClaimed      atomic.Int64
		releases, refused atomic.Int64
		failOnce          sync.Map // shard → failed already
	)
	b, err = NewBalancer(BalancerConfig{Member: m, View: view, Kinds: []Kind{KindAddr}, Every: 50 * time.Millisecond,
		Releasing: func(_ context.Context, c Claim) error {
			releases.Add(1)
			if _, ok := b.Claim(c.Kind, c.Shard); ok {
				stillClaimed.Add(1)
			}
			if _, failed := failOnce.LoadOrStore(c.Shard, true); !failed {
				refused.Add(1)
				return context.DeadlineExceeded // keep it this time
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); b.Run(ctx) }()
	defer func() { cancel(); <-done }()
	eventually(t, "a owns every shard", func() bool { return b.Owned(KindAddr) == AddrShards })

	other := startNode(t, root, "b")
	defer func() { other.halt(); other.m.Close() }()
	two := []string{"a", "b"}
	eventually(t, "two nodes settle", func() bool { return settled(other, two) && b.Owned(KindAddr)+other.b.Owned(KindAddr) == AddrShards })
	moved := 0
	for _, o := range Assign(KindAddr, two) {
		if o == "b" {
			moved++
		}
	}
	if stillClaimed.Load() != 0 {
		t.Fatalf("Claim reported the shard during %d of %d Releasing calls", stillClaimed.Load(), releases.Load())
	}
	if refused.Load() != int64(moved) || releases.Load() != 2*int64(moved) {
		t.Fatalf("%d shards moved: %d Releasing calls, %d refused; want every shard refused once, then handed over", moved, releases.Load(), refused.Load())
	}
}

// TestBalancerLeavingMemberIsNotAssigned: a member marked leaving stays a
// member (it still answers the others) but the assignment leaves it out, so
// the others claim each shard it releases at once, not after its lease.
func TestBalancerLeavingMemberIsNotAssigned(t *testing.T) {
	root := testRoot(t)
	a, b := startNode(t, root, "a"), startNode(t, root, "b")
	defer func() {
		for _, n := range []*node{a, b} {
			n.halt()
			n.m.Close()
		}
	}()
	eventually(t, "two nodes settle", func() bool { return settled(a, []string{"a", "b"}) })
	b.halt()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.m.SetLeaving(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a sees b leaving", func() bool { return slices.Equal(a.m.ActiveIDs(), []string{"a"}) })
	if !slices.Equal(a.m.MemberIDs(), []string{"a", "b"}) {
		t.Fatalf("a sees members %v; b is still one", a.m.MemberIDs())
	}
	if err := b.b.ReleaseAll(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a owns every shard while b is still a member", func() bool { return settled(a, []string{"a"}) })
	if !b.m.Held(time.Now()) || !slices.Contains(a.m.MemberIDs(), "b") {
		t.Fatalf("b's membership went before its shards moved: held %v, members %v", b.m.Held(time.Now()), a.m.MemberIDs())
	}
	if mi, ok := a.m.Info("b"); !ok || !mi.Leaving || mi.Epoch != b.m.Epoch() {
		t.Fatalf("b's record as a sees it: %+v %v", mi, ok)
	}
}

// TestBalancerTakesBackClaimsAfterALapse: the validity deadline can pass
// while etcd still holds the lease (a renewal answered late, a leader change
// that extends every lease). The balancer drops its claims then, as it must;
// once a renewal of the same lease is acknowledged, the owner keys are still
// this member's, so it must take the shards up again. Before, the view
// showed the member as the owner, so no pass claimed them and none released
// them: the shards had an owner key and no owner until the lease ended.
func TestBalancerTakesBackClaimsAfterALapse(t *testing.T) {
	root := testRoot(t)
	cli := newClient(t)
	var ahead atomic.Int64 // nanoseconds the member's clock runs ahead
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m, err := Join(ctx, MemberConfig{Client: cli, Root: root, ID: "a", Addr: "127.0.0.1:1", TTL: 2 * time.Second,
		Now: func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	view, err := NewOwnerView(cli, root)
	if err != nil {
		t.Fatal(err)
	}
	if err := view.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var lost, acquired atomic.Int64
	b, err := NewBalancer(BalancerConfig{Member: m, View: view, Kinds: []Kind{KindAddr}, Every: 20 * time.Millisecond,
		Acquired: func(context.Context, Claim) { acquired.Add(1) },
		Lost:     func(Claim) { lost.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); b.Run(ctx) }()
	defer func() { cancel(); <-done }()
	eventually(t, "a owns every shard", func() bool { return b.Owned(KindAddr) == AddrShards })

	// The deadline passes with the lease alive in etcd: no renewal, the
	// clock a TTL ahead, for well under the TTL of real time.
	m.pause(true)
	ahead.Store(int64(3 * time.Second))
	eventually(t, "the claims are dropped while the lease is not held", func() bool { return lost.Load() == AddrShards })
	ahead.Store(0)
	m.pause(false)
	eventually(t, "a renewal of the same lease is acknowledged", func() bool { return m.Held(time.Now()) })
	if m.Epoch() != 1 || m.Losses() != 0 {
		t.Fatalf("the lease did not survive the lapse (epoch %d, losses %d): the test needs it to", m.Epoch(), m.Losses())
	}
	eventually(t, "a takes its shards up again", func() bool { return b.Owned(KindAddr) == AddrShards })
	if got := acquired.Load(); got != 2*AddrShards {
		t.Fatalf("Acquired ran %d times, want %d: the state dropped with the claims is rebuilt", got, 2*AddrShards)
	}
	if o := view.Owners(KindAddr); len(o) != AddrShards {
		t.Fatalf("%d shards owned in etcd, want %d", len(o), AddrShards)
	}
}

// TestBalancerReleaseFencedByALapseIsRetried: a release whose local fence
// refuses because the validity deadline passed during Releasing (its
// flush may wait up to a TTL) leaves the owner key in etcd while the same
// lease lives on. The balancer must hand the shard over once the lease is
// held again. Before, it forgot the shard: the key stayed under its lease,
// the next owner waited for a release that never came.
func TestBalancerReleaseFencedByALapseIsRetried(t *testing.T) {
	root := testRoot(t)
	cli := newClient(t)
	var ahead atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m, err := Join(ctx, MemberConfig{Client: cli, Root: root, ID: "a", Addr: "127.0.0.1:1", TTL: 2 * time.Second,
		Now: func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	view, err := NewOwnerView(cli, root)
	if err != nil {
		t.Fatal(err)
	}
	if err := view.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var lapsed atomic.Bool
	b, err := NewBalancer(BalancerConfig{Member: m, View: view, Kinds: []Kind{KindAddr}, Every: 20 * time.Millisecond,
		Releasing: func(context.Context, Claim) error {
			if lapsed.CompareAndSwap(false, true) {
				// The flush outlasts the deadline; the lease lives on.
				m.pause(true)
				ahead.Store(int64(3 * time.Second))
				time.AfterFunc(100*time.Millisecond, func() { ahead.Store(0); m.pause(false) })
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); b.Run(ctx) }()
	defer func() { cancel(); <-done }()
	eventually(t, "a owns every shard", func() bool { return b.Owned(KindAddr) == AddrShards })

	// b joins without a balancer: a hands b's shards back, nobody claims them.
	other := join(t, newClient(t), root, "b", 2*time.Second)
	defer other.Close()
	want := Assign(KindAddr, []string{"a", "b"})
	eventually(t, "a releases every shard of b's", func() bool {
		got := view.Owners(KindAddr)
		for s, o := range want {
			if (o == "a") != (got[s] == "a") {
				return false
			}
		}
		return true
	})
	if !lapsed.Load() || m.Epoch() != 1 || m.Losses() != 0 {
		t.Fatalf("lapsed %v, epoch %d, losses %d: the test needs a lapse the lease survives", lapsed.Load(), m.Epoch(), m.Losses())
	}
}

// admitRelease is node a owning every address shard, with moving the
// shard that moves once node b joins (start), and releasedAt the time
// a's Releasing ran for it (0: not yet). wait bounds a release's wait for
// admitted actions.
type admitRelease struct {
	b          *Balancer
	moving     int
	releasedAt atomic.Int64
	start      func() *node
}

func newAdmitRelease(t *testing.T, wait time.Duration) *admitRelease {
	t.Helper()
	root := testRoot(t)
	cli := newClient(t)
	m := join(t, cli, root, "a", time.Second)
	t.Cleanup(func() { m.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	view, err := NewOwnerView(cli, root)
	if err != nil {
		t.Fatal(err)
	}
	if err := view.Start(ctx); err != nil {
		t.Fatal(err)
	}
	r := &admitRelease{moving: -1}
	for s, o := range Assign(KindAddr, []string{"a", "b"}) {
		if o == "b" {
			r.moving = s
			break
		}
	}
	r.b, err = NewBalancer(BalancerConfig{Member: m, View: view, Kinds: []Kind{KindAddr}, Every: 50 * time.Millisecond,
		Releasing: func(_ context.Context, c Claim) error {
			if c.Shard == r.moving {
				r.releasedAt.Store(time.Now().UnixNano())
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	r.b.admitWait = wait
	done := make(chan struct{})
	go func() { defer close(done); r.b.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	eventually(t, "a owns every shard", func() bool { return r.b.Owned(KindAddr) == AddrShards })
	r.start = func() *node {
		other := startNode(t, root, "b")
		t.Cleanup(func() { other.halt(); other.m.Close() })
		eventually(t, "a drops the moving shard's claim", func() bool {
			_, held := r.b.Claim(KindAddr, r.moving)
			return !held
		})
		return other
	}
	return r
}

// TestBalancerReleaseWaitsForAdmitted: an owner-side action admitted
// under a claim (Admit) before a release dropped it holds Releasing back
// until it is done, so that Releasing flushes it; Admit refuses once the
// claim is dropped.
func TestBalancerReleaseWaitsForAdmitted(t *testing.T) {
	r := newAdmitRelease(t, time.Minute)
	_, admitted, ok := r.b.Admit(KindAddr, r.moving)
	if !ok {
		t.Fatal("no admission under a claim held")
	}
	other := r.start()
	if _, _, ok := r.b.Admit(KindAddr, r.moving); ok {
		t.Fatal("admitted under a claim dropped")
	}
	time.Sleep(200 * time.Millisecond)
	if r.releasedAt.Load() != 0 {
		t.Fatal("Releasing ran while an action admitted under the claim was under way")
	}
	end := time.Now()
	admitted()
	eventually(t, "the shard is released once the action is done", func() bool { return r.releasedAt.Load() >= end.UnixNano() })
	eventually(t, "two nodes settle", func() bool {
		return settled(other, []string{"a", "b"}) && r.b.Owned(KindAddr)+other.b.Owned(KindAddr) == AddrShards
	})
}

// TestBalancerReleaseWaitBounded: an admitted action that never ends
// holds a release back for admitWait at most, not for good.
func TestBalancerReleaseWaitBounded(t *testing.T) {
	r := newAdmitRelease(t, 300*time.Millisecond)
	_, admitted, ok := r.b.Admit(KindAddr, r.moving)
	if !ok {
		t.Fatal("no admission under a claim held")
	}
	defer admitted()
	dropped := time.Now()
	r.start()
	eventually(t, "the shard is released past the bound", func() bool { return r.releasedAt.Load() != 0 })
	if waited := time.Duration(r.releasedAt.Load() - dropped.UnixNano()); waited < 250*time.Millisecond {
		t.Fatalf("Releasing ran %v after the join, within the bound, with an action under way", waited)
	}
}
