package rpc

import (
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/fraudd/fraudd/actors/checks"
	"github.com/fraudd/fraudd/actors/devicehist"
	"github.com/fraudd/fraudd/actors/events"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/intel/device"
	"github.com/fraudd/fraudd/storage"
)

// TestCollectBudgetAcrossNodes: an account's daily collection budget of N
// events, taken 3N times at once across three nodes, admits exactly N:
// the budget is counted at the owner, one round trip from the others.
func TestCollectBudgetAcrossNodes(t *testing.T) {
	ids := []string{"a", "b", "c"}
	nodes := settledNodes(t, nil, ids...)
	const n = 30
	m := quota.Collect{Account: accountOwnedBy("b", ids), Budget: quota.CollectBudget{Events: n, Bytes: 1 << 20}, Bytes: 900, Now: testNow}
	var mu sync.Mutex
	allowed := 0
	var wg sync.WaitGroup
	for _, nd := range nodes {
		for range n {
			wg.Go(func() {
				r, err := nd.q.Collect(m)
				if err != nil || (!r.Allowed && r.RetryAfter < 1) {
					t.Errorf("collect at %s: %+v %v", nd.id, r, err)
					return
				}
				if r.Allowed {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	if allowed != n {
		t.Fatalf("a budget of %d events over three nodes admitted %d", n, allowed)
	}
	if got := []int64{nodes[0].q.RemoteCalls(), nodes[1].q.RemoteCalls(), nodes[2].q.RemoteCalls()}; got[0] != n || got[1] != 0 || got[2] != n {
		t.Fatalf("round trips (a, owner b, c) = %v; want [%d 0 %d]", got, n, n)
	}
}

// TestCollectStoresAtOwner: a device event collected on any node is stored
// at the account's owner, in the budget's round trip, under an id naming
// the owner; an evaluation on a third node then makes one round trip, with
// no second hop at the owner. A refused budget stores nothing.
func TestCollectStoresAtOwner(t *testing.T) {
	ids := []string{"a", "b", "c"}
	nodes := settledNodes(t, nil, ids...)
	a, b, c := nodes[0], nodes[1], nodes[2]
	acct := accountOwnedBy("a", ids)
	m := quota.Collect{Account: acct, Budget: quota.CollectBudget{Events: 2, Bytes: 1 << 20}, Bytes: 10, Now: testNow}
	ev := events.Collected{Account: acct, Now: testNow, Signals: []byte("{}"), Verdict: &device.Verdict{VisitorID: "visitor-3", Complete: true}}
	for _, n := range []*node{a, b} {
		before := n.q.RemoteCalls()
		res, id, err := n.q.CollectEvent(m, ev)
		if err != nil || !res.Allowed || events.NodeOf(&id) != NodeRoute("a") {
			t.Fatalf("collect on %s: %+v %x %v (want an id naming a)", n.id, res, id, err)
		}
		if hops := n.q.RemoteCalls() - before; hops != map[string]int64{"a": 0, "b": 1}[n.id] {
			t.Fatalf("collect on %s: %d round trips", n.id, hops)
		}
		// Evaluated on c: one Evaluate, the event resolved where the owner is.
		cBefore, aBefore := c.q.RemoteCalls(), a.q.RemoteCalls()
		st := &ownerStep{c: uncapped, out: make(chan checks.OwnerResult, 1), w: checks.OwnerWork{Resolve: &events.Resolve{ID: id, Account: acct, Now: testNow},
			Observe: &devicehist.Observation{Customer: acct, AccountID: "u", Now: testNow}}}
		st.c.Account = acct
		c.q.ChargeThen(st)
		r := <-st.out
		if !r.Charge.Allowed || r.EventErr != nil || !r.Resolved.Found || r.Resolved.Event.VisitorID != "visitor-3" {
			t.Fatalf("evaluated on c: %+v", r)
		}
		if c.q.RemoteCalls()-cBefore != 1 || a.q.RemoteCalls() != aBefore {
			t.Fatalf("evaluated on c: %d round trips from c, %d from the owner", c.q.RemoteCalls()-cBefore, a.q.RemoteCalls()-aBefore)
		}
	}
	// The budget of two is spent: refused, nothing stored.
	res, id, err := c.q.CollectEvent(m, ev)
	if err != nil || res.Allowed || id != (events.EventID{}) {
		t.Fatalf("past the budget: %+v %x %v", res, id, err)
	}
}

// FuzzCollectRequest: whatever bytes a peer sends, checking the event a
// Collect carries never panics, and an event that passes is for the
// request's account, without an id or uses.
func FuzzCollectRequest(f *testing.F) {
	e := events.EventOf(events.Collected{Account: "acct_1", Now: testNow, Signals: []byte("{}"), Verdict: &device.Verdict{VisitorID: "v"}})
	for _, ev := range [][]byte{storage.MarshalEvent(nil, &e), nil, {1, 2, 3}} {
		b, err := proto.Marshal(collectMsg(&quota.Collect{Account: "acct_1", Budget: quota.CollectBudget{Events: 1, Bytes: 1}}, 3, ev))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var r CollectRequest
		if proto.Unmarshal(b, &r) != nil || r.Event == nil {
			return
		}
		e, err := eventOf(&r)
		if err != nil {
			return
		}
		if e.Account != r.Account || e.ID != (events.EventID{}) || e.Uses != 0 {
			t.Fatalf("a collected event passed: %+v", e)
		}
	})
}

// TestCollectedEventVisitorBounded: a peer's collected event whose visitor
// hash is longer than storage keeps is refused: stored, its sightings would
// fail the whole device write of that sync interval (every shard's events
// and sightings in it).
func TestCollectedEventVisitorBounded(t *testing.T) {
	e := events.EventOf(events.Collected{Account: "acct_1", Now: testNow, Signals: []byte("{}"),
		Verdict: &device.Verdict{VisitorID: strings.Repeat("v", storage.MaxVisitorLen+1)}})
	r := collectMsg(&quota.Collect{Account: "acct_1", Budget: quota.CollectBudget{Events: 1, Bytes: 1}}, 3, storage.MarshalEvent(nil, &e))
	if _, err := eventOf(r); err == nil {
		t.Fatal("a collected event with a visitor hash past storage's bound passed")
	}
}
