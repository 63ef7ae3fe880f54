package quota

import (
	"testing"
	"time"
)

// TestLimitsAt: limits computed on one side of the end of grandfathering
// apply as those of the other side at a time there; other limits do not
// change with time.
func TestLimitsAt(t *testing.T) {
	old := time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC)
	nov := GrandfatheredUntil.Add(900 * time.Millisecond)
	dec := GrandfatheredUntil.Add(time.Second)
	oct := time.Date(2026, 10, 5, 0, 0, 0, 0, time.UTC)
	for _, plan := range []string{PlanFree, PlanStarter, PlanGrowth, PlanScale} {
		for _, at := range []time.Time{oct, nov, dec} {
			for _, from := range []time.Time{oct, nov, dec} {
				if got, want := LimitsFor(plan, nil, nil, old, from).At(at), LimitsFor(plan, nil, nil, old, at); got != want {
					t.Errorf("%s computed at %v, at %v: %+v, want %+v", plan, from, at, got, want)
				}
			}
		}
	}
	for _, l := range []Limits{
		LimitsFor(PlanFree, nil, nil, GrandfatherCutoff, nov),
		LimitsFor(PlanCustom, i64(300), i64(7000), old, nov),
		LimitsFor(PlanPublicInterest, nil, nil, old, nov),
	} {
		if got := l.At(dec); got != l {
			t.Errorf("%+v at %v: %+v", l, dec, got)
		}
	}
}

// TestChargeAtTheOwnersInstant: a cluster node computes the limits at its
// clock and the owner charges at its own. A node already in December
// asking an owner still in November to charge a grandfathered account
// that used 10,000 checks in November: the check is November's, with no
// monthly cap — before, December's 10,000 refused it and the owner mailed
// the cap reached. And the other way round, an owner in December applies
// December's cap whatever the asking node's clock said.
func TestChargeAtTheOwnersInstant(t *testing.T) {
	rec := &recorder{}
	c := New(quietSystem().Root, Config{Shards: 1, Notifier: rec})
	defer c.Stop()
	old := time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC)
	nov := GrandfatheredUntil.Add(-time.Hour)
	dec := GrandfatheredUntil.Add(time.Second)
	gNov, gDec := LimitsFor(PlanFree, nil, nil, old, nov), LimitsFor(PlanFree, nil, nil, old, dec)
	ch := Charge{Account: "a", Kind: Evaluate, Limits: gNov, Monthly: true, Now: nov}
	for range 10_000 {
		if r, err := c.Charge(ch); err != nil || !r.Allowed {
			t.Fatalf("November: %+v %v", r, err)
		}
	}
	ch.Limits, ch.Now = gDec, GrandfatheredUntil.Add(500*time.Millisecond)
	if r, err := c.Charge(ch); err != nil || !r.Allowed {
		t.Fatalf("a November check with December's limits: %+v %v", r, err)
	}
	u, err := c.Usage(Usage{Account: "a", Limits: gDec, Now: ch.Now})
	if err != nil || u.MonthlyLimit != nil || u.MonthUsed != 10_001 || u.GrandfatheredUntil == nil {
		t.Fatalf("November usage read with December's limits: %+v %v", u, err)
	}
	// A slice's report in November, the holder's limits December's.
	l := Lease{Account: "a", Holder: "b", Limits: gNov, Monthly: true, Members: 1, For: time.Second, Keep: 3 * time.Second, Want: 100, Now: GrandfatheredUntil.Add(-5 * time.Second)}
	g, err := c.Lease(l)
	if err != nil || g.Units == 0 {
		t.Fatalf("lease %+v %v", g, err)
	}
	l.Limits, l.Now, l.Want, l.Report = gDec, GrandfatheredUntil.Add(-3*time.Second), 0, LeaseReport{Seq: g.Seq, Used: g.Units, SameClaim: true}
	if _, err := c.Lease(l); err != nil {
		t.Fatal(err)
	}
	if ws := rec.get(); len(ws) != 0 {
		t.Fatalf("warnings sent in November under December's cap: %+v", ws)
	}
	// December: its cap, whatever the limits were computed at.
	ch.Limits, ch.Now = gNov, dec
	for i := range 10_000 {
		if r, err := c.Charge(ch); err != nil || !r.Allowed {
			t.Fatalf("December check %d: %+v %v", i+1, r, err)
		}
	}
	if r, err := c.Charge(ch); err != nil || r.Refusal != RefusedMonthly {
		t.Fatalf("December check past 10,000 with November's limits: %+v %v", r, err)
	}
	if u, err := c.Usage(Usage{Account: "a", Limits: gNov, Now: dec}); err != nil || u.MonthlyLimit == nil || *u.MonthlyLimit != 10_000 || u.MonthUsed != 10_000 {
		t.Fatalf("December usage read with November's limits: %+v %v", u, err)
	}
	if ws := warnKinds(rec.get()); len(ws) != 2 || ws[0] != WarnMonthly80 || ws[1] != WarnMonthlyCap {
		t.Fatalf("December's warnings: %v", ws)
	}
}
