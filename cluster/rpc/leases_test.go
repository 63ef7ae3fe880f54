package rpc

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/storage"
)

// held reports whether the node holds or owes anything of its slices: a
// slice in use, a report not yet settled, a call under way.
func (ls *leases) held() bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for _, e := range ls.m {
		if e.cur.seq != 0 || len(e.done) > 0 || e.asking || e.inflight.Load() > 0 {
			return true
		}
	}
	return false
}

func leasing(after int64) func(*QuotaConfig) {
	return func(c *QuotaConfig) { c.LeaseAfter, c.LeaseFor = after, 300*time.Millisecond }
}

// localQuota starts a node's quota actors.
func localQuota(t *testing.T) *quota.Client {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quietLog }))
	local := quota.New(sys.Root, quota.Config{Shards: 2, Logger: quietLog})
	t.Cleanup(func() { local.Stop() })
	return local
}

// leaseHolder is node b, charging accounts of owner a (listening at addr)
// with local as its quota actors: it asks for slices past 3 charges a
// second, each for leaseFor.
func leaseHolder(t *testing.T, addr string, local LocalQuota, leaseFor time.Duration) *Quota {
	q, err := NewQuota(QuotaConfig{Local: local, Owners: &fakeOwners{self: "b", owner: "a", token: 7, addrs: map[string]string{"a": addr}},
		Timeout: 2 * time.Second, Logger: quietLog, LeaseAfter: 3, LeaseFor: leaseFor})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(q.Close)
	return q
}

// TestLeasedHotAccountCap: a hot account charged from the two nodes that
// do not own it gets slices of its allowance, charged there with no round
// trip; charged 3N times at once across the three nodes, it admits no
// more than its hourly cap of N, and once the slices are reported the
// owner admits exactly the rest: N in all, in the hour, the month and the
// totals, whose shares the holders persisted themselves.
func TestLeasedHotAccountCap(t *testing.T) {
	ids := []string{"a", "b", "c"}
	nodes := settledNodes(t, leasing(20), ids...)
	const n = 600
	account := accountOwnedBy("a", ids)
	c := quota.Charge{Account: account, Kind: quota.Evaluate, Hourly: true, Monthly: true, Total: true, Now: testNow,
		Limits: quota.LimitsFor(quota.PlanCustom, limit(n), limit(10*n), testNow, testNow)}

	// Warm-up: b and c each charge until they hold a slice.
	allowed := 0
	for _, nd := range nodes[1:] {
		for i := 0; nd.q.LeasedCharges() == 0; i++ {
			if i == 1000 {
				t.Fatalf("%s: no charge served from a slice after %d", nd.id, i)
			}
			res, err := nd.q.Charge(c)
			if err != nil {
				t.Fatal(err)
			}
			if res.Allowed {
				allowed++
			}
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, nd := range nodes {
		for w := range 4 {
			wg.Go(func() {
				for i := range 3 * n / 12 {
					var res quota.ChargeResult
					var err error
					if (w+i)%2 == 0 {
						res, err = nd.q.Charge(c)
					} else {
						res, err = chargeThen(nd.q, c)
					}
					if err != nil {
						t.Errorf("charge at %s: %v", nd.id, err)
						return
					}
					if res.Allowed {
						mu.Lock()
						allowed++
						mu.Unlock()
					}
				}
			})
		}
	}
	wg.Wait()
	if allowed > n {
		t.Fatalf("hourly cap %d with slices out: %d admitted", n, allowed)
	}
	if nodes[0].q.LeasedCharges() != 0 {
		t.Fatalf("the owner charged %d from slices", nodes[0].q.LeasedCharges())
	}
	t.Logf("%d admitted; b and c: %d charges from slices, %d round trips, %d lease calls", allowed,
		nodes[1].q.LeasedCharges()+nodes[2].q.LeasedCharges(), nodes[1].q.RemoteCalls()+nodes[2].q.RemoteCalls(), nodes[1].q.LeaseCalls()+nodes[2].q.LeaseCalls())

	// Idle, the holders report their slices and return what they did not
	// use; then the owner admits exactly what remains.
	eventually(t, "the holders settle their slices", func() bool {
		return !nodes[1].q.leases.held() && !nodes[2].q.leases.held()
	})
	for {
		res, err := nodes[0].q.Charge(c)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Allowed {
			break
		}
		allowed++
	}
	if allowed != n {
		t.Fatalf("hourly cap %d: %d admitted in all", n, allowed)
	}
	v, err := nodes[1].q.Usage(quota.Usage{Account: account, Limits: c.Limits, Now: testNow})
	if err != nil || v.UsedThisHour != n || v.MonthUsed != n || v.TotalEvaluations != n {
		t.Fatalf("usage: hour %d month %d total %d (%v); want %d each", v.UsedThisHour, v.MonthUsed, v.TotalEvaluations, err, n)
	}
	// The G-counter: every member's share, the holders' included, sums to N.
	month := storage.MonthOf(testNow)
	shares, missing := nodes[0].q.Shares(context.Background(), account, month, 0)
	own, tot, err := nodes[0].db.LoadUsage(account, month)
	if err != nil || len(missing) != 0 {
		t.Fatal(err, missing)
	}
	shares = append(shares, Share{Node: "a", Counts: own, Totals: tot})
	if sum, tot := Merge(shares...); sum.Used != n || tot.Evaluations != n {
		t.Fatalf("shares %+v sum to %d used, %d evaluated; want %d", shares, sum.Used, tot.Evaluations, n)
	}
	for _, s := range shares {
		if s.Node != "a" && s.Counts.Used == 0 {
			t.Errorf("%s holds no share of the leased charges", s.Node)
		}
	}
}

// TestLeasedChargesNeedNoHop: a hot account far from its caps is charged
// on a node that does not own it almost entirely from slices: the round
// trips per charge fall from one to a few per thousand.
func TestLeasedChargesNeedNoHop(t *testing.T) {
	ids := []string{"a", "b"}
	nodes := settledNodes(t, leasing(50), ids...)
	account := accountOwnedBy("a", ids)
	c := quota.Charge{Account: account, Kind: quota.Evaluate, Hourly: true, Monthly: true, Total: true, Now: testNow,
		Limits: quota.LimitsFor(quota.PlanCustom, limit(1_000_000), limit(10_000_000), testNow, testNow)}
	b := nodes[1]
	const each, workers = 1500, 4
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				if res, err := chargeThen(b.q, c); err != nil || !res.Allowed {
					t.Errorf("charge: %+v %v", res, err)
					return
				}
			}
		})
	}
	wg.Wait()
	total := int64(each * workers)
	leased, hops, calls := b.q.LeasedCharges(), b.q.RemoteCalls(), b.q.LeaseCalls()
	t.Logf("%d charges on b: %d from slices, %d round trips, %d lease calls: %.4f hops per charge", total, leased, hops, calls, float64(hops+calls)/float64(total))
	if leased+hops != total || float64(hops+calls) > 0.1*float64(total) {
		t.Fatalf("%d charges: %d from slices, %d round trips, %d lease calls", total, leased, hops, calls)
	}
	eventually(t, "b settles its slices", func() bool { return !b.q.leases.held() })
	v, err := b.q.Usage(quota.Usage{Account: account, Limits: c.Limits, Now: testNow})
	if err != nil || v.UsedThisHour != total || v.MonthUsed != total || v.TotalEvaluations != total {
		t.Fatalf("usage: hour %d month %d total %d (%v); want %d each", v.UsedThisHour, v.MonthUsed, v.TotalEvaluations, err, total)
	}
}

// heldLease holds the hold-th Lease call until its gate opens; with
// lendOnce, calls after the first only report (they ask for nothing), so
// no slice is lent but the first.
type heldLease struct {
	*Server
	hold     int32
	lendOnce bool
	calls    atomic.Int32
	in       chan struct{}
	gate     chan struct{}
}

func newHeldLease(s *Server, hold int32, lendOnce bool) *heldLease {
	return &heldLease{Server: s, hold: hold, lendOnce: lendOnce, in: make(chan struct{}, 1), gate: make(chan struct{})}
}

func (n *heldLease) Lease(ctx context.Context, r *LeaseRequest) (*LeaseReply, error) {
	c := n.calls.Add(1)
	if c == n.hold {
		n.in <- struct{}{}
		<-n.gate
	}
	if n.lendOnce && c > 1 {
		r.Want = 0
	}
	return n.Server.Lease(ctx, r)
}

// TestLeaseGrantedAcrossAFreeze: a slice whose Lease call was under way
// when another member read this node's share (Freeze) is not used once it
// arrives: the reader (a new owner) loaded a share without its units and
// never reserved them, so a charge from it would be counted nowhere.
func TestLeaseGrantedAcrossAFreeze(t *testing.T) {
	s, _ := newTestServer(t, &fakeOwners{self: "a", owner: "a", token: 7})
	owner := newHeldLease(s, 1, true)
	q := leaseHolder(t, listenNode(t, owner), localQuota(t), 2*time.Second)
	c := capped
	c.Limits = quota.LimitsFor(quota.PlanCustom, limit(1000), nil, testNow, testNow)
	for range 3 {
		if res, err := q.Charge(c); err != nil || !res.Allowed {
			t.Fatalf("charge: %+v %v", res, err)
		}
	}
	select {
	case <-owner.in:
	case <-time.After(5 * time.Second):
		t.Fatal("no Lease call after a busy second")
	}
	// A member loads the account and reads this node's share while the
	// Lease call is under way.
	q.Freeze(context.Background(), c.Account)
	close(owner.gate)
	eventually(t, "the Lease call returns", func() bool {
		q.leases.mu.Lock()
		defer q.leases.mu.Unlock()
		e := q.leases.m[keyOf(&c)]
		return e != nil && !e.asking && owner.calls.Load() >= 1
	})
	if res, err := q.Charge(c); err != nil || !res.Allowed {
		t.Fatalf("charge after the freeze: %+v %v", res, err)
	}
	if n := q.LeasedCharges(); n != 0 {
		t.Fatalf("%d charges made from a slice lent before the share was read", n)
	}
	// The slice goes back to the owner unused.
	eventually(t, "the holder reports the slice", func() bool { return !q.leases.held() })
}

// queuedLocal holds the leased chained charges while hold is set, as a
// busy quota shard's mailbox would, until the test hands them on.
type queuedLocal struct {
	*quota.Client
	hold  atomic.Bool
	steps chan quota.ChargeStep
}

func (l *queuedLocal) ChargeThen(st quota.ChargeStep) {
	if st.ChargeReq().Lent && l.hold.Load() {
		l.steps <- st
		return
	}
	l.Client.ChargeThen(st)
}

// givingUp is a chained step whose caller may stop waiting
// (quota.Beginner), as the pipeline's chain is.
type givingUp struct {
	step
	begun atomic.Bool
}

func (s *givingUp) Begin() bool { return s.begun.CompareAndSwap(false, true) }

// TestLeasedChargeAfterTheCallerGaveUp: a leased chained charge still
// queued at the quota shard when its caller gives up (its deadline: the
// caller answers 503, nothing charged) is not made, as a charge at the
// owner is not; its unit goes back to the slice.
func TestLeasedChargeAfterTheCallerGaveUp(t *testing.T) {
	s, _ := newTestServer(t, &fakeOwners{self: "a", owner: "a", token: 7})
	local := &queuedLocal{Client: localQuota(t), steps: make(chan quota.ChargeStep, 1)}
	q := leaseHolder(t, listen(t, s), local, 5*time.Second)
	c := capped
	c.Limits = quota.LimitsFor(quota.PlanCustom, limit(100_000), nil, testNow, testNow)
	for i := 0; q.LeasedCharges() == 0; i++ {
		if i == 1000 {
			t.Fatal("no charge served from a slice")
		}
		if _, err := q.Charge(c); err != nil {
			t.Fatal(err)
		}
	}
	used := func() int64 {
		q.leases.mu.Lock()
		defer q.leases.mu.Unlock()
		return q.leases.m[keyOf(&c)].cur.used
	}
	before, charged := used(), q.LeasedCharges()

	local.hold.Store(true)
	st := &givingUp{step: step{c: c, done: make(chan struct{})}}
	q.ChargeThen(st)
	queued := <-local.steps
	// The caller's deadline passes with the charge still queued: it
	// answers 503 and nothing may be charged.
	if !st.begun.CompareAndSwap(false, true) {
		t.Fatal("the charge began before it left the queue")
	}
	local.hold.Store(false)
	local.Client.ChargeThen(queued)
	select {
	case <-st.done:
		t.Fatalf("a charge its caller gave up on was answered: %+v %v", st.res, st.err)
	case <-time.After(200 * time.Millisecond):
	}
	if n := q.LeasedCharges(); n != charged {
		t.Fatalf("%d leased charges made after the caller gave up", n-charged)
	}
	if u := used(); u != before {
		t.Fatalf("the slice counts %d used, %d before the charge its caller gave up on", u, before)
	}
}

// TestLeaseRenewedWithoutAGap: a holder asks for its next slice while it
// goes on charging the one it holds, so a steady load is never charged
// through the owner while the renewal is under way; the slice it replaced
// is reported once the next arrives, and the counts stay exact.
func TestLeaseRenewedWithoutAGap(t *testing.T) {
	s, _ := newTestServer(t, &fakeOwners{self: "a", owner: "a", token: 7})
	owner := newHeldLease(s, 2, false)
	q := leaseHolder(t, listenNode(t, owner), localQuota(t), 4*time.Second)
	c := capped
	c.Limits = quota.LimitsFor(quota.PlanCustom, limit(100_000), nil, testNow, testNow)
	charges := 0
	charge := func() {
		t.Helper()
		if res, err := q.Charge(c); err != nil || !res.Allowed {
			t.Fatalf("charge: %+v %v", res, err)
		}
		charges++
	}
	slice := func() slice {
		q.leases.mu.Lock()
		defer q.leases.mu.Unlock()
		if e := q.leases.m[keyOf(&c)]; e != nil {
			return e.cur
		}
		return slice{}
	}
	for q.LeasedCharges() == 0 {
		if charges == 1000 {
			t.Fatal("no charge served from a slice")
		}
		charge()
	}
	first := slice()
	// Charged to half, the holder asks for the next slice: the owner
	// holds that call.
	for s := slice(); s.seq == first.seq && s.used*2 < s.units; s = slice() {
		charge()
	}
	select {
	case <-owner.in:
	case <-time.After(5 * time.Second):
		t.Fatal("the renewal call did not reach the owner")
	}
	cur := slice()
	if cur.seq != first.seq {
		t.Fatalf("the holder let its slice go (seq %d, was %d) while the renewal was under way", cur.seq, first.seq)
	}
	hops, leased := q.RemoteCalls(), q.LeasedCharges()
	left := cur.units - cur.used
	for range left {
		charge()
	}
	if q.RemoteCalls() != hops || q.LeasedCharges() != leased+left {
		t.Fatalf("while the renewal was under way: %d charges through the owner, %d from the slice; want 0 and %d",
			q.RemoteCalls()-hops, q.LeasedCharges()-leased, left)
	}
	close(owner.gate)
	eventually(t, "the next slice replaces the first", func() bool {
		s := slice()
		return s.seq != 0 && s.seq != first.seq
	})
	charge()
	eventually(t, "the holder reports its slices", func() bool { return !q.leases.held() })
	v, err := q.Usage(quota.Usage{Account: c.Account, Limits: c.Limits, Now: testNow})
	if err != nil || v.UsedThisHour != int64(charges) {
		t.Fatalf("usage: hour %d (%v); want %d", v.UsedThisHour, err, charges)
	}
}

// TestLeasedChargeGivenUpAfterSliceClosed: a leased chained charge waits
// in the quota shard's queue past its slice's time, and its caller then
// gives up (Begin answers false): the unit goes back to the slice, whose
// report waited for the charge to settle, so the owner counts only the
// charges made. Before, the pass reported the closed slice with the queued
// unit in it, and the owner counted a charge nobody made.
func TestLeasedChargeGivenUpAfterSliceClosed(t *testing.T) {
	s, ownerLocal := newTestServer(t, &fakeOwners{self: "a", owner: "a", token: 7})
	local := &queuedLocal{Client: localQuota(t), steps: make(chan quota.ChargeStep, 1)}
	q := leaseHolder(t, listen(t, s), local, 300*time.Millisecond)
	c := capped
	c.Limits = quota.LimitsFor(quota.PlanCustom, limit(100_000), nil, testNow, testNow)
	made := int64(0)
	for i := 0; q.LeasedCharges() == 0; i++ {
		if i == 1000 {
			t.Fatal("no charge served from a slice")
		}
		if res, err := q.Charge(c); err != nil || !res.Allowed {
			t.Fatal(res, err)
		}
		made++
	}
	local.hold.Store(true)
	st := &givingUp{step: step{c: c, done: make(chan struct{})}}
	q.ChargeThen(st)
	queued := <-local.steps
	// The slice closes (its time, 300 ms, passes) with the charge still
	// queued: its report waits for it.
	eventually(t, "the slice closed, its report waiting", func() bool {
		q.leases.mu.Lock()
		defer q.leases.mu.Unlock()
		for _, e := range q.leases.m {
			if len(e.done) > 0 && e.done[0].inflight > 0 {
				return true
			}
		}
		return false
	})
	time.Sleep(50 * time.Millisecond) // a pass or two
	if !st.begun.CompareAndSwap(false, true) {
		t.Fatal("began")
	}
	local.hold.Store(false)
	local.Client.ChargeThen(queued)
	eventually(t, "the holder settles its slices", func() bool { return !q.leases.held() })
	got := hourCount(t, ownerLocal, c)
	if got != made {
		t.Fatalf("owner counts %d, %d charges were made (the given-up one counted)", got, made)
	}
}
