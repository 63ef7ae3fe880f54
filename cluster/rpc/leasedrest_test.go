package rpc

import (
	"testing"

	"github.com/fraudd/fraudd/actors/checks"
	"github.com/fraudd/fraudd/actors/devicehist"
	"github.com/fraudd/fraudd/actors/events"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/intel/device"
)

// TestLeasedEvaluationAtOwner: with a slice of a hot account's allowance
// in hand, an evaluation whose event the owner stored makes one round trip
// (EvaluateLeased) that resolves the event and observes the owner's
// history, charging nothing there; one whose event this node stored makes
// none and observes here.
func TestLeasedEvaluationAtOwner(t *testing.T) {
	ids := []string{"a", "b", "c"}
	nodes := settledNodes(t, leasing(20), ids...)
	a, b := nodes[0], nodes[1]
	acct := accountOwnedBy("a", ids)
	c := quota.Charge{Account: acct, Kind: quota.Evaluate, Hourly: true, Monthly: true, Total: true, Now: testNow,
		Limits: quota.LimitsFor(quota.PlanCustom, limit(1e6), limit(1e7), testNow, testNow)}
	for i := 0; b.q.LeasedCharges() == 0; i++ {
		if i == 1000 {
			t.Fatalf("no charge served from a slice after %d", i)
		}
		if _, err := b.q.Charge(c); err != nil {
			t.Fatal(err)
		}
	}
	atOwner, err := a.ev.Collect(events.Collected{Account: acct, Now: testNow, Signals: []byte("{}"), Verdict: &device.Verdict{VisitorID: "visitor-a", Complete: true}})
	if err != nil {
		t.Fatal(err)
	}
	here, err := b.ev.Collect(events.Collected{Account: acct, Now: testNow, Signals: []byte("{}"), Verdict: &device.Verdict{VisitorID: "visitor-b", Complete: true}})
	if err != nil {
		t.Fatal(err)
	}
	eval := func(id events.EventID, user string) (checks.OwnerResult, bool, int64, int64) {
		st := &ownerStep{c: c, out: make(chan checks.OwnerResult, 1), w: checks.OwnerWork{
			Resolve: &events.Resolve{ID: id, Account: acct, Now: testNow},
			Observe: &devicehist.Observation{Customer: acct, AccountID: user, Now: testNow},
		}}
		hops, leased := b.q.RemoteCalls(), b.q.LeasedCharges()
		b.q.ChargeThen(st)
		r := <-st.out
		return r, st.charged, b.q.RemoteCalls() - hops, b.q.LeasedCharges() - leased
	}
	// The slices last 300 ms of wall clock, which a busy machine can spend
	// on a few round trips: each loop goes on until a slice served one.
	ownerSaw := len(a.hist.observed())
	leasedAtOwner, evals := 0, 0
	for i := 0; i < 20 || leasedAtOwner == 0; i++ {
		if i == 1000 {
			t.Fatal("no evaluation was served from a slice: the test proves nothing")
		}
		evals++
		r, charged, hops, leased := eval(atOwner, "alice")
		if charged || r.ChargeErr != nil || !r.Charge.Allowed || !r.Resolved.Found || r.Resolved.Event.VisitorID != "visitor-a" || r.HistErr != nil || r.Facts.History.Visits != ownerSaw+i+1 {
			t.Fatalf("evaluation %d with the owner's event: %+v (answered by Charged: %v)", i, r, charged)
		}
		if hops != 1 {
			t.Fatalf("evaluation %d with the owner's event: %d round trips, want 1 (leased: %d)", i, hops, leased)
		}
		leasedAtOwner += int(leased)
	}
	if got := a.hist.observed(); len(got) != ownerSaw+evals {
		t.Fatalf("the owner observed %d, want %d", len(got), ownerSaw+evals)
	}
	if n := len(b.hist.observed()); n != 0 {
		t.Fatalf("the holder observed %d of them itself", n)
	}
	// The event this node stored: a leased charge makes no hop, and the
	// chain goes on here (answered by Charged: it resolves the event and
	// observes this node's history itself).
	leasedHere := 0
	for i := 0; i < 10 || leasedHere == 0; i++ {
		if i == 1000 {
			t.Fatal("no evaluation with this node's event was served from a slice")
		}
		r, charged, hops, leased := eval(here, "bob")
		if !r.Charge.Allowed {
			t.Fatalf("evaluation %d with this node's event: %+v", i, r)
		}
		if leased == 1 && (!charged || hops != 0) {
			t.Fatalf("a leased evaluation with this node's event: %d round trips, answered by Charged: %v", hops, charged)
		}
		leasedHere += int(leased)
	}
}
