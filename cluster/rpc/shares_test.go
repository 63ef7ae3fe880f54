package rpc

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/cluster"
	"github.com/fraudd/fraudd/storage"
)

// serveAgain has a member whose gRPC server stopped answer again on its
// address (its membership never lapsed): a member back from a pause or a
// network blip.
func (n *node) serveAgain(tb testing.TB) {
	tb.Helper()
	l, err := net.Listen("tcp", n.addr)
	if err != nil {
		tb.Fatal(err)
	}
	n.srv = grpc.NewServer()
	n.server.Register(n.srv)
	go n.srv.Serve(l)
}

// TestShareCountedWhenMemberReturns: a live member that does not answer
// when the owner loads an account is left out of the sum (the count errs
// permissive for the outage), and its share counts once it answers again
// (docs/cluster.md: "its share is counted when it returns"), not only
// when the account happens to be loaded anew.
func TestShareCountedWhenMemberReturns(t *testing.T) {
	ids := []string{"a", "b", "c"}
	nodes := settledNodes(t, nil, ids...)
	a, b := nodes[0], nodes[1]
	account := accountOwnedBy("a", ids)
	// b's persisted share: 8 calls it charged while it owned the account.
	if err := b.db.ApplyUsage([]storage.UsageDelta{{Account: account, Month: storage.MonthOf(testNow), Day: storage.DayOf(testNow),
		Counts: storage.MonthCounts{Used: 8}}}); err != nil {
		t.Fatal(err)
	}
	ch := quota.Charge{Account: account, Kind: quota.Evaluate, Hourly: true, Monthly: true, Now: testNow,
		Limits: quota.LimitsFor(quota.PlanCustom, limit(100), limit(10), testNow, testNow)}

	b.srv.Stop() // b does not answer; its membership stays
	if res, err := a.q.Charge(ch); err != nil || !res.Allowed {
		t.Fatalf("charge while b does not answer: %+v, %v", res, err)
	}
	b.serveAgain(t)
	h := &MemberHealth{Peers: a.q, Shares: a.shared}
	eventually(t, "a hears from b again", func() bool {
		h.Round(context.Background())
		return len(h.Down()) == 0
	})
	allowed := 0
	for range 10 {
		res, err := a.q.Charge(ch)
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed {
			allowed++
		}
	}
	if allowed != 1 {
		t.Fatalf("%d admitted once b answers again; b's 8 and the 1 before leave 1 of the cap of 10", allowed)
	}
	// The reload resumed the hour a was counting: the call before b's
	// return and the one after (1 alone: the hour started afresh).
	u, err := a.q.Usage(quota.Usage{Account: account, Limits: ch.Limits, Now: testNow})
	if err != nil || u.UsedThisHour != 2 || u.MonthUsed != 10 {
		t.Fatalf("usage after the reload: hour %d, month %d, %v; want 2 and 10", u.UsedThisHour, u.MonthUsed, err)
	}
}

// TestShareCountedWhenLeaverHandsItOver: a member that did not answer an
// account's load and then leaves for good, handing its shares over, never
// answers a health round again; its share counts once the owner adopts it.
func TestShareCountedWhenLeaverHandsItOver(t *testing.T) {
	ids := []string{"a", "b", "c"}
	nodes := settledNodes(t, nil, ids...)
	a, b := nodes[0], nodes[1]
	account := accountOwnedBy("a", ids)
	m := storage.MonthOf(testNow)
	if err := b.db.ApplyUsage([]storage.UsageDelta{{Account: account, Month: m, Day: storage.DayOf(testNow),
		Counts: storage.MonthCounts{Used: 8}}}); err != nil {
		t.Fatal(err)
	}
	ch := quota.Charge{Account: account, Kind: quota.Evaluate, Monthly: true, Now: testNow,
		Limits: quota.LimitsFor(quota.PlanCustom, nil, limit(10), testNow, testNow)}

	b.srv.Stop()
	if res, err := a.q.Charge(ch); err != nil || !res.Allowed {
		t.Fatalf("charge while b does not answer: %+v, %v", res, err)
	}
	var shares []storage.OriginShare
	if err := b.db.ExportShares("b", []storage.Month{m}, func(s storage.OriginShare) error { shares = append(shares, s); return nil }); err != nil {
		t.Fatal(err)
	}
	if n, err := b.q.HandOver(context.Background(), shares); err != nil || n != 2 {
		t.Fatalf("hand-over stored by %d members: %v", n, err)
	}
	allowed := 0
	for range 10 {
		res, err := a.q.Charge(ch)
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed {
			allowed++
		}
	}
	if allowed != 1 {
		t.Fatalf("%d admitted once a adopted b's share; b's 8 and the 1 before leave 1 of the cap of 10", allowed)
	}
}

// TestShareCountedWhenAbsentMemberReturns: a member that holds a share
// but is not in the member list when the owner loads the account (its
// lease expired: it is restarting, or cut off) is noted as missing like
// one that does not answer, and its share counts once it is back and
// answers a health round.
func TestShareCountedWhenAbsentMemberReturns(t *testing.T) {
	ids := []string{"a", "b", "c"}
	nodes := settledNodes(t, nil, ids...)
	a, b := nodes[0], nodes[1]
	// An account a owns with b in the cluster or not.
	account := accountOwnedBy("a", ids, "a", []string{"a", "c"})
	if err := b.db.ApplyUsage([]storage.UsageDelta{{Account: account, Month: storage.MonthOf(testNow), Day: storage.DayOf(testNow),
		Counts: storage.MonthCounts{Used: 8}}}); err != nil {
		t.Fatal(err)
	}
	ch := quota.Charge{Account: account, Kind: quota.Evaluate, Monthly: true, Now: testNow,
		Limits: quota.LimitsFor(quota.PlanCustom, nil, limit(10), testNow, testNow)}

	b.halt() // b's lease runs out: it leaves the member list, still serving
	eventually(t, "b is no longer a member", func() bool { return slices.Equal(a.m.MemberIDs(), []string{"a", "c"}) })
	if res, err := a.q.Charge(ch); err != nil || !res.Allowed {
		t.Fatalf("charge while b is absent: %+v, %v", res, err)
	}
	// b registers again on the same address (a restart on its data dir).
	cli, err := clientv3.New(clientv3.Config{Endpoints: sharedEtcd(t), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	back, err := cluster.Join(ctx, cluster.MemberConfig{Client: cli, Root: a.m.Root(), ID: "b", Addr: b.addr, TTL: time.Second, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	eventually(t, "b is a member again", func() bool { return slices.Contains(a.m.MemberIDs(), "b") })
	h := &MemberHealth{Peers: a.q, Shares: a.shared}
	eventually(t, "a hears from b again", func() bool {
		h.Round(context.Background())
		return len(h.Down()) == 0
	})
	allowed := 0
	for range 10 {
		res, err := a.q.Charge(ch)
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed {
			allowed++
		}
	}
	if allowed != 1 {
		t.Fatalf("%d admitted once b is back; b's 8 and the 1 before leave 1 of the cap of 10", allowed)
	}
}
