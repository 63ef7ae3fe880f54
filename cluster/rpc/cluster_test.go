package rpc

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/actors/traffic"
	"github.com/fraudd/fraudd/cluster"
	"github.com/fraudd/fraudd/storage"
)

// step is a chained charge as the pipeline sends one (quota.ChargeStep).
type step struct {
	c    quota.Charge
	res  quota.ChargeResult
	err  error
	done chan struct{}
}

func (s *step) ChargeReq() *quota.Charge { return &s.c }
func (s *step) Charged(r quota.ChargeResult, err error) {
	s.res, s.err = r, err
	close(s.done)
}
func (s *step) Fail(err error) { s.Charged(quota.ChargeResult{}, err) }

// chargeThen runs c through q.ChargeThen and waits for the step's answer.
func chargeThen(q *Quota, c quota.Charge) (quota.ChargeResult, error) {
	st := &step{c: c, done: make(chan struct{})}
	q.ChargeThen(st)
	select {
	case <-st.done:
		return st.res, st.err
	case <-time.After(10 * time.Second):
		return quota.ChargeResult{}, errors.New("chained charge: no answer in 10 s")
	}
}

var testNow = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func limit(n int64) *int64 { return &n }

// capAcrossNodes charges 3n calls spread over three nodes, half blocking and
// half chained, all at once, and returns how many were admitted and how each
// refusal went.
func capAcrossNodes(t *testing.T, nodes []*node, c quota.Charge, n int) (allowed int, refusals map[quota.Refusal]int) {
	t.Helper()
	var mu sync.Mutex
	refusals = map[quota.Refusal]int{}
	var wg sync.WaitGroup
	for _, nd := range nodes {
		for i := range n {
			wg.Go(func() {
				var res quota.ChargeResult
				var err error
				if i%2 == 0 {
					res, err = nd.q.Charge(c)
				} else {
					res, err = chargeThen(nd.q, c)
				}
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Errorf("charge at %s: %v", nd.id, err)
					return
				}
				if res.Allowed {
					allowed++
				} else {
					refusals[res.Refusal]++
				}
			})
		}
	}
	wg.Wait()
	return allowed, refusals
}

// TestCapsAcrossNodes: an hourly cap of N and a monthly cap of N, charged
// 3N times across three nodes at once, admit exactly N each; the owner
// makes no remote call and every other node exactly one per charge; the
// owner's store holds the month's count as its share, and the others hold
// none.
func TestCapsAcrossNodes(t *testing.T) {
	ids := []string{"a", "b", "c"}
	nodes := settledNodes(t, nil, ids...)
	const n = 40

	account := accountOwnedBy("a", ids)
	hourly := quota.Charge{Account: account, Kind: quota.Evaluate, Hourly: true, Now: testNow,
		Limits: quota.LimitsFor(quota.PlanCustom, limit(n), nil, testNow, testNow)}
	allowed, refusals := capAcrossNodes(t, nodes, hourly, n)
	if allowed != n || refusals[quota.RefusedHourly] != 2*n {
		t.Fatalf("hourly cap %d over 3 nodes: %d admitted, refusals %v", n, allowed, refusals)
	}
	if got := []int64{nodes[0].q.RemoteCalls(), nodes[1].q.RemoteCalls(), nodes[2].q.RemoteCalls()}; got[0] != 0 || got[1] != n || got[2] != n {
		t.Fatalf("remote round trips (owner, b, c) = %v, want [0 %d %d]", got, n, n)
	}
	// The owner loaded the account once: one Shares request to each other
	// member. The others never loaded it.
	if got := []int64{nodes[0].q.ShareCalls(), nodes[1].q.ShareCalls(), nodes[2].q.ShareCalls()}; got[0] != 2 || got[1] != 0 || got[2] != 0 {
		t.Fatalf("Shares requests (owner, b, c) = %v, want [2 0 0]", got)
	}

	account = accountOwnedBy("b", ids)
	monthly := quota.Charge{Account: account, Kind: quota.Evaluate, Monthly: true, Total: true, Now: testNow,
		Limits: quota.LimitsFor(quota.PlanCustom, nil, limit(n), testNow, testNow)}
	allowed, refusals = capAcrossNodes(t, nodes, monthly, n)
	if allowed != n || refusals[quota.RefusedMonthly] != 2*n {
		t.Fatalf("monthly cap %d over 3 nodes: %d admitted, refusals %v", n, allowed, refusals)
	}
	v, err := nodes[2].q.Usage(quota.Usage{Account: account, Limits: monthly.Limits, Now: testNow})
	if err != nil || v.MonthUsed != n || v.LimitHits != 2*n || v.MonthlyLimit == nil || *v.MonthlyLimit != n {
		t.Fatalf("usage read from c: %+v, %v", v, err)
	}

	month := storage.MonthOf(testNow)
	shares, missing := nodes[0].q.Shares(context.Background(), account, month, 0)
	if len(missing) != 0 || len(shares) != 2 {
		t.Fatalf("shares from a: %+v, missing %v", shares, missing)
	}
	own, tot, err := nodes[0].db.LoadUsage(account, month)
	if err != nil {
		t.Fatal(err)
	}
	shares = append(shares, Share{Node: "a", Counts: own, Totals: tot})
	for _, s := range shares {
		if want := map[string]int64{"a": 0, "b": n, "c": 0}[s.Node]; s.Counts.Used != want {
			t.Errorf("%s's share: %d used, want %d", s.Node, s.Counts.Used, want)
		}
	}
	// Merged twice over (a repeated answer) the count is still N.
	if c, tot := Merge(append(shares, shares...)...); c.Used != n || tot.Evaluations != n {
		t.Fatalf("merged shares: %+v %+v, want %d used and evaluated", c, tot, n)
	}
}

// lagging is a node's ownership whose view still shows a stale owner of one
// shard until the client refreshes it (reads its revision or waits), as a
// view the watch has not yet moved would.
type lagging struct {
	Ownership
	mu    sync.Mutex
	shard int
	node  string
	token int64
	addrA string
}

func (l *lagging) Owner(shard int) (string, int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if shard == l.shard && l.node != "" {
		return l.node, l.token, true
	}
	return l.Ownership.Owner(shard)
}

// Addr still knows the stale owner's address: its member view lags too.
func (l *lagging) Addr(node string) (string, bool) {
	if node == "a" && l.addrA != "" {
		return l.addrA, true
	}
	return l.Ownership.Addr(node)
}

func (l *lagging) caughtUp() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.node = ""
}

func (l *lagging) Revision() int64 { l.caughtUp(); return l.Ownership.Revision() }

func (l *lagging) Wait(ctx context.Context, rev int64) error {
	l.caughtUp()
	return l.Ownership.Wait(ctx, rev)
}

func (l *lagging) stale(shard int, node string, token int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.shard, l.node, l.token = shard, node, token
}

// TestStaleOwnerRefused is the fencing half of the pause scenario: the owner
// of an account's shard stops renewing (SIGSTOP) while its gRPC server and
// quota actors still run; after its lease ran out and another node took the
// shard, a charge sent to it under its old token is refused with
// FailedPrecondition and changes nothing there, and a caller whose view
// still names it retries once at the new owner, which admits the charge.
func TestStaleOwnerRefused(t *testing.T) {
	root := testRoot(t)
	ids := []string{"a", "b", "c"}
	var lag *lagging
	a := startNode(t, root, "a", nil)
	b := startNode(t, root, "b", nil)
	c := startNode(t, root, "c", func(o Ownership) Ownership { lag = &lagging{Ownership: o, shard: -1}; return lag })
	settle(t, []*node{a, b, c}, ids)

	// An account a owns now and b will own once a is gone.
	account := accountOwnedBy("a", ids, "b", ids[1:])
	shard := cluster.ShardOf(cluster.KindAccount, account)
	ch := quota.Charge{Account: account, Kind: quota.Evaluate, Hourly: true, Now: testNow,
		Limits: quota.LimitsFor(quota.PlanCustom, limit(100), nil, testNow, testNow)}
	if res, err := c.q.Charge(ch); err != nil || !res.Allowed || res.Remaining != 99 {
		t.Fatalf("charge at the live owner a: %+v, %v", res, err)
	}
	_, oldToken, _ := c.view.Owner(cluster.KindAccount, shard)

	a.halt()
	settle(t, []*node{b, c}, ids[1:])
	_, newToken, _ := c.view.Owner(cluster.KindAccount, shard)
	if newToken <= oldToken {
		t.Fatalf("b's claim has token %d, a's had %d", newToken, oldToken)
	}

	// The stale owner refuses, under its old token, and charges nothing.
	conn, err := grpc.NewClient(a.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = NewNodeClient(conn).Charge(context.Background(), chargeMsg(&ch, oldToken))
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("stale owner a answered %v, want FailedPrecondition", err)
	}
	if v, err := a.local.Usage(quota.Usage{Account: account, Limits: ch.Limits, Now: testNow}); err != nil || v.UsedThisHour != 1 {
		t.Fatalf("a's own count after the refused charge: %+v, %v (want the 1 from before)", v, err)
	}

	// c's view still names a: one refused hop, one hop to b.
	lag.addrA = a.addr
	lag.stale(shard, "a", oldToken)
	before := c.q.RemoteCalls()
	res, err := c.q.Charge(ch)
	if err != nil || !res.Allowed {
		t.Fatalf("charge from c with a stale view: %+v, %v", res, err)
	}
	if got := c.q.RemoteCalls() - before; got != 2 {
		t.Fatalf("%d round trips for a refused hop and its retry, want 2", got)
	}
	v, err := b.local.Usage(quota.Usage{Account: account, Limits: ch.Limits, Now: testNow})
	if err != nil || v.UsedThisHour != 1 {
		t.Fatalf("the new owner b counted %+v, %v; want the retried charge", v, err)
	}
}

// TestMonthlyCapAcrossRebalance is the G-counter rebuild: an account's
// month is half used at its owner a; d joins and takes the account's
// shard; d loads the month as the sum of every member's persisted share,
// so across the move the cap of N still admits exactly N.
func TestMonthlyCapAcrossRebalance(t *testing.T) {
	root := testRoot(t)
	ids := []string{"a", "b", "c"}
	nodes := []*node{startNode(t, root, "a", nil), startNode(t, root, "b", nil), startNode(t, root, "c", nil)}
	settle(t, nodes, ids)
	four := append(ids[:3:3], "d")
	account := accountOwnedBy("a", ids, "d", four)
	const n = 30
	ch := quota.Charge{Account: account, Kind: quota.Evaluate, Monthly: true, Total: true, Now: testNow,
		Limits: quota.LimitsFor(quota.PlanCustom, nil, limit(n), testNow, testNow)}
	for i := range n / 2 {
		if res, err := nodes[1+i%2].q.Charge(ch); err != nil || !res.Allowed {
			t.Fatalf("charge %d before the move: %+v, %v", i, res, err)
		}
	}

	d := startNode(t, root, "d", nil)
	nodes = append(nodes, d)
	settle(t, nodes, four)
	before := d.q.ShareCalls()
	allowed, refusals := capAcrossNodes(t, nodes[1:], ch, n)
	if allowed != n/2 || refusals[quota.RefusedMonthly] != 3*n-n/2 {
		t.Fatalf("after the move to d: %d admitted (want %d), refusals %v", allowed, n/2, refusals)
	}
	if got := d.q.ShareCalls() - before; got != 3 {
		t.Fatalf("d asked %d members for their shares, want 3", got)
	}
	// Charges are answered ahead of their commit: the store holds them once
	// the committer has run.
	if err := d.local.Flush(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	own, _, err := d.db.LoadUsage(account, storage.MonthOf(testNow))
	if err != nil || own.Used != n/2 {
		t.Fatalf("d's own share: %+v, %v; want the %d it charged", own, err, n/2)
	}
}

// TestLeaverSharesOutliveIt: the owner of an account leaves after handing
// its shares over (twice: a repeated hand-over changes nothing). The next
// owner loads the account after the leaver is gone and counts what it
// charged: the cap admits exactly what is left of it.
func TestLeaverSharesOutliveIt(t *testing.T) {
	root := testRoot(t)
	ids := []string{"a", "b", "c"}
	nodes := []*node{startNode(t, root, "a", nil), startNode(t, root, "b", nil), startNode(t, root, "c", nil)}
	settle(t, nodes, ids)
	account := accountOwnedBy("c", ids)
	const n = 30
	ch := quota.Charge{Account: account, Kind: quota.Evaluate, Monthly: true, Total: true, Now: testNow,
		Limits: quota.LimitsFor(quota.PlanCustom, nil, limit(n), testNow, testNow)}
	for i := range n / 2 {
		if res, err := nodes[i%2].q.Charge(ch); err != nil || !res.Allowed {
			t.Fatalf("charge %d before the leave: %+v, %v", i, res, err)
		}
	}

	c := nodes[2]
	c.stop()
	<-c.done
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.m.SetLeaving(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.bal.ReleaseAll(ctx); err != nil {
		t.Fatal(err)
	}
	var shares []storage.OriginShare
	if err := c.db.ExportShares("c", []storage.Month{storage.MonthOf(testNow)}, func(s storage.OriginShare) error {
		shares = append(shares, s)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(shares) != 1 || shares[0].Counts.Used != n/2 {
		t.Fatalf("c's shares: %+v", shares)
	}
	for range 2 {
		if stored, err := c.q.HandOver(ctx, shares); err != nil || stored != 2 {
			t.Fatalf("hand-over: stored by %d members, %v", stored, err)
		}
	}
	if err := c.m.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	settle(t, nodes[:2], ids[:2])
	allowed, refusals := capAcrossNodes(t, nodes[:2], ch, n)
	if allowed != n/2 || refusals[quota.RefusedMonthly] != 2*n-n/2 {
		t.Fatalf("after c left: %d admitted (want %d), refusals %v", allowed, n/2, refusals)
	}
	for _, nd := range nodes[:2] {
		got, err := nd.db.AdoptedShares(account, storage.MonthOf(testNow))
		if err != nil || len(got) != 1 || got[0].Origin != "c" || got[0].Counts.Used != n/2 {
			t.Fatalf("%s holds %+v (%v) of c's share", nd.id, got, err)
		}
	}
}

// TestHourlyCapAcrossRebalance: an account's shard moves to a joining
// member halfway through an hourly cap. The old owner hands the running
// window over with its shares, the new owner resumes it, and the cap
// admits exactly what is left of it (a window started afresh would admit a
// whole cap again).
func TestHourlyCapAcrossRebalance(t *testing.T) {
	root := testRoot(t)
	ids := []string{"a", "b", "c"}
	nodes := []*node{startNode(t, root, "a", nil), startNode(t, root, "b", nil), startNode(t, root, "c", nil)}
	settle(t, nodes, ids)
	four := append(ids[:3:3], "d")
	account := accountOwnedBy("a", ids, "d", four)
	const n = 30
	ch := quota.Charge{Account: account, Kind: quota.Evaluate, Hourly: true, Now: testNow,
		Limits: quota.LimitsFor(quota.PlanCustom, limit(n), nil, testNow, testNow)}
	for i := range n / 2 {
		if res, err := nodes[i%3].q.Charge(ch); err != nil || !res.Allowed {
			t.Fatalf("charge %d before the move: %+v, %v", i, res, err)
		}
	}
	d := startNode(t, root, "d", nil)
	nodes = append(nodes, d)
	settle(t, nodes, four)
	if got := nodes[0].windows.Get(account, testNow); got[quota.Live].N != n/2 || !got[quota.Live].Start.Equal(testNow) {
		t.Fatalf("a handed over %+v; want the live window of %d from %v", got, n/2, testNow)
	}
	allowed, refusals := capAcrossNodes(t, nodes, ch, n)
	if allowed != n/2 || refusals[quota.RefusedHourly] != 4*n-n/2 {
		t.Fatalf("after the move to d: %d admitted (want %d), refusals %v", allowed, n/2, refusals)
	}
	u, err := d.q.Usage(quota.Usage{Account: account, Limits: ch.Limits, Now: testNow})
	if err != nil || u.UsedThisHour != n || u.ResetsAt == nil || !u.ResetsAt.Equal(testNow.Add(quota.Window)) {
		t.Fatalf("usage at d: %+v, %v; want %d used this hour, resetting an hour after the window's start", u, err, n)
	}
}

// TestHandedWindows: the registry answers running windows only, forgets
// those over, and the merge of several members' answers takes the running
// window that admitted the most.
func TestHandedWindows(t *testing.T) {
	h := NewHandedWindows()
	old := testNow.Add(-2 * quota.Window)
	h.Put([]quota.Handed{
		{Account: "x", Hour: [2]quota.HourWindow{quota.Live: {Start: testNow, N: 4}, quota.Test: {Start: old, N: 9}}},
		{Account: "y", Hour: [2]quota.HourWindow{quota.Live: {Start: old, N: 1}}},
	}, testNow)
	if got := h.Get("x", testNow); got[quota.Live].N != 4 || got[quota.Test].N != 0 {
		t.Fatalf("x: %+v", got)
	}
	if h.Len() != 1 {
		t.Fatalf("%d accounts kept; y's only window was over", h.Len())
	}
	later := testNow.Add(quota.Window + time.Minute)
	h.Put(nil, later)
	if h.Len() != 0 {
		t.Fatalf("%d accounts kept after their windows ended", h.Len())
	}
	a := [2]quota.HourWindow{quota.Live: {Start: testNow, N: 4}}
	b := [2]quota.HourWindow{quota.Live: {Start: testNow, N: 7}, quota.Test: {Start: old, N: 50}}
	m := mergeWindows(testNow.Add(time.Minute), a, b, [2]quota.HourWindow{})
	if m[quota.Live].N != 7 || m[quota.Test].N != 0 {
		t.Fatalf("merged %+v; want live 7, no test window", m)
	}
	if _, ok := windowsOf([]*HourWindow{{Bucket: 0, StartUnixNano: 1, N: 1}, {Bucket: 0, StartUnixNano: 1, N: 1}}); ok {
		t.Fatal("a bucket answered twice was accepted")
	}
	if _, ok := windowsOf([]*HourWindow{{Bucket: 2, StartUnixNano: 1, N: 1}}); ok {
		t.Fatal("bucket 2 was accepted")
	}
}

// fakeFeed is a node's own threat-feed counts.
type fakeFeed struct {
	mu sync.Mutex
	f  traffic.Feed
}

func (f *fakeFeed) Feed(time.Time) (traffic.Feed, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.f, nil
}

func (f *fakeFeed) set(total, threats uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.f = traffic.Feed{Today: storage.TrafficCounts{Total: total, Threats: threats, VPN: threats}, WeekTotal: 2 * total, WeekThreats: threats}
}

// TestClusterFeedSums: a node's threat feed is the sum of every member's
// counts; a member that does not answer is left out and named.
func TestClusterFeedSums(t *testing.T) {
	root := testRoot(t)
	nodes := []*node{startNode(t, root, "a", nil), startNode(t, root, "b", nil), startNode(t, root, "c", nil)}
	settle(t, nodes, []string{"a", "b", "c"})
	for i, n := range nodes {
		n.feed.set(uint64(10*(i+1)), uint64(i+1))
	}
	sum := &ClusterFeed{Local: nodes[0].feed, Peers: nodes[0].q}
	f, missing, err := sum.FeedFrom(context.Background(), testNow)
	if err != nil || len(missing) != 0 {
		t.Fatalf("feed: %v, missing %v", err, missing)
	}
	want := traffic.Feed{Today: storage.TrafficCounts{Total: 60, Threats: 6, VPN: 6}, WeekTotal: 120, WeekThreats: 6}
	if f != want {
		t.Fatalf("summed feed %+v, want %+v", f, want)
	}
	nodes[2].srv.Stop()
	f, missing, err = sum.FeedFrom(context.Background(), testNow)
	if err != nil || len(missing) != 1 || missing[0] != "c" || f.Today.Total != 30 || f.WeekTotal != 60 {
		t.Fatalf("with c not answering: %+v, missing %v, %v", f, missing, err)
	}
}
