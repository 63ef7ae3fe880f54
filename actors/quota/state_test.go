package quota

import (
	"reflect"
	"testing"
	"time"

	"github.com/fraudd/fraudd/storage"
)

var t0 = time.Date(2026, 12, 10, 9, 30, 0, 0, time.UTC)

type warnLog []Warning

func (w *warnLog) add(x Warning) { *w = append(*w, x) }

func (w warnLog) kinds() []WarnKind {
	var k []WarnKind
	for _, x := range w {
		k = append(k, x.Kind)
	}
	return k
}

func newAcct(now time.Time) *account { return &account{id: "a", month: storage.MonthOf(now)} }

func custom(h, m int64) Limits {
	var hp, mp *int64
	if h >= 0 {
		hp = &h
	}
	if m >= 0 {
		mp = &m
	}
	return LimitsFor(PlanCustom, hp, mp, t0, t0)
}

func TestHourlyWindow(t *testing.T) {
	a := newAcct(t0)
	l := custom(3, -1)
	ch := func(now time.Time, b Bucket) ChargeResult {
		r, _ := a.charge(&Charge{Account: "a", Bucket: b, Limits: l, Hourly: true, Now: now}, nil)
		return r
	}
	end := t0.Add(time.Hour).Unix()
	want := []ChargeResult{
		{Allowed: true, Capped: true, Limit: 3, Remaining: 2, Reset: end},
		{Allowed: true, Capped: true, Limit: 3, Remaining: 1, Reset: end},
		{Allowed: true, Capped: true, Limit: 3, Remaining: 0, Reset: end},
		{Refusal: RefusedHourly, Capped: true, Limit: 3, Remaining: 0, Reset: end, RetryAfter: 3600 - 30},
	}
	for i, w := range want {
		if got := ch(t0.Add(time.Duration(i)*10*time.Second), Live); got != w {
			t.Fatalf("charge %d: %+v, want %+v", i, got, w)
		}
	}
	// The test key has its own window.
	if r := ch(t0.Add(time.Minute), Test); !r.Allowed || r.Remaining != 2 || r.Reset != t0.Add(time.Minute+time.Hour).Unix() {
		t.Fatalf("test bucket: %+v", r)
	}
	// The last second of the window is still refused; the window then restarts at the next call.
	if r := ch(t0.Add(time.Hour-time.Nanosecond), Live); r.Allowed || r.RetryAfter != 1 {
		t.Fatalf("end of window: %+v", r)
	}
	later := t0.Add(time.Hour + 17*time.Minute)
	if r := ch(later, Live); !r.Allowed || r.Remaining != 2 || r.Reset != later.Add(time.Hour).Unix() {
		t.Fatalf("new window: %+v", r)
	}
	if a.totals.LimitHits != 2 {
		t.Fatalf("limit hits %d", a.totals.LimitHits)
	}
	u := a.usage(Live, l, later.Add(time.Minute))
	if u.UsedThisHour != 1 || *u.Remaining != 2 || !u.ResetsAt.Equal(later.Add(time.Hour)) || u.LimitHits != 2 || u.Uncapped {
		t.Fatalf("usage: %+v", u)
	}
	if u := a.usage(Live, l, later.Add(time.Hour)); u.UsedThisHour != 0 || u.ResetsAt != nil || *u.Remaining != 3 {
		t.Fatalf("usage after window: %+v", u)
	}
}

// TestHourlyWindowStagger: charges reach the shard in another order than
// they were stamped (concurrent requests; in a cluster, requests stamped on
// other nodes). One stamped a little before the window's start counts in
// the window instead of starting a new one, which admitted a call over the
// cap; a clock moved back further than Stagger still starts a new window.
func TestHourlyWindowStagger(t *testing.T) {
	a := newAcct(t0)
	l := custom(2, -1)
	ch := func(now time.Time) ChargeResult {
		r, _ := a.charge(&Charge{Account: "a", Bucket: Live, Limits: l, Hourly: true, Now: now}, nil)
		return r
	}
	if r := ch(t0); !r.Allowed || r.Remaining != 1 {
		t.Fatalf("first: %+v", r)
	}
	if r := ch(t0.Add(-40 * time.Millisecond)); !r.Allowed || r.Remaining != 0 {
		t.Fatalf("stamped 40 ms before the window's start: %+v", r)
	}
	if r := ch(t0.Add(-Stagger + time.Millisecond)); r.Allowed {
		t.Fatalf("third within the stagger: %+v, want refused", r)
	}
	if r := ch(t0.Add(-Stagger - time.Second)); !r.Allowed || r.Remaining != 1 {
		t.Fatalf("clock moved back past the stagger: %+v, want a new window", r)
	}
}

// TestLateChargeKeepsTheWindow: a charge that reaches its shard seconds
// after it was stamped (a stalled shard; the chain waits up to 5 s after
// the request was stamped, read and authenticated), after a window began
// at a later stamp, counts in that window: it does not empty it, which
// admitted a whole hour's cap again.
func TestLateChargeKeepsTheWindow(t *testing.T) {
	a := newAcct(t0)
	l := custom(3, -1)
	ch := func(now time.Time) ChargeResult {
		r, _ := a.charge(&Charge{Account: "a", Bucket: Live, Limits: l, Hourly: true, Now: now}, nil)
		return r
	}
	for i := range 3 {
		if r := ch(t0.Add(time.Duration(i) * time.Millisecond)); !r.Allowed {
			t.Fatalf("charge %d: %+v", i, r)
		}
	}
	if r := ch(t0.Add(-7 * time.Second)); r.Allowed {
		t.Fatalf("a charge stamped 7 s before the full window's start: %+v, want refused in it", r)
	}
	if r := ch(t0.Add(time.Second)); r.Allowed {
		t.Fatalf("after the late charge: %+v, want the window still full", r)
	}
}

func TestMonthlyAllowance(t *testing.T) {
	now := time.Date(2026, 12, 31, 23, 59, 0, 0, time.UTC)
	a := newAcct(now)
	l := custom(-1, 2)
	var ws warnLog
	c := Charge{Account: "a", Limits: l, Hourly: true, Monthly: true, Total: true, Now: now}
	r1, d1 := a.charge(&c, ws.add)
	r2, _ := a.charge(&c, ws.add)
	r3, d3 := a.charge(&c, ws.add)
	jan := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	if want := (ChargeResult{Allowed: true, Capped: true, Limit: 2, Remaining: 1, Reset: jan}); r1 != want {
		t.Fatalf("first: %+v want %+v", r1, want)
	}
	if d1 != (storage.UsageDelta{Account: "a", Month: 202612, Counts: storage.MonthCounts{Used: 1}, Totals: storage.Totals{Evaluations: 1}, Day: storage.DayOf(now)}) {
		t.Fatalf("first delta %+v", d1)
	}
	if !r2.Allowed || r2.Remaining != 0 {
		t.Fatalf("second: %+v", r2)
	}
	if r3.Allowed || r3.Refusal != RefusedMonthly || r3.RetryAfter != 60 {
		t.Fatalf("third: %+v", r3)
	}
	if d3 != (storage.UsageDelta{Account: "a", Month: 202612, Totals: storage.Totals{LimitHits: 1}}) {
		t.Fatalf("refusal delta %+v", d3)
	}
	if !reflect.DeepEqual(ws.kinds(), []WarnKind{WarnMonthly80, WarnMonthlyCap}) {
		t.Fatalf("warnings %v", ws.kinds())
	}
	// Lookups have their own monthly allowance (10×) and do not touch month_used.
	lk := c
	lk.Kind = Lookup
	if r, _ := a.charge(&lk, ws.add); !r.Allowed || r.Limit != 20 || r.Remaining != 19 {
		t.Fatalf("lookup: %+v", r)
	}
	// An uncounted call is not refused by the monthly allowance.
	free := c
	free.Monthly, free.Total = false, false
	if r, _ := a.charge(&free, nil); !r.Allowed {
		t.Fatalf("uncounted call refused: %+v", r)
	}
	u := a.usage(Live, l, now)
	if u.MonthUsed != 2 || u.MonthLookupsUsed != 1 || u.TotalEvaluations != 3 || u.LimitHits != 1 ||
		*u.MonthlyLimit != 2 || *u.MonthlyLookupLimit != 20 || u.HourlyLimit != nil || u.Remaining != nil ||
		u.UsedThisHour != 4 || u.Uncapped || !u.MonthResetsAt.Equal(time.Unix(jan, 0)) || u.GrandfatheredUntil != nil {
		t.Fatalf("usage %+v", u)
	}
	if a.counts.Warned != warnBit(WarnMonthly80)|warnBit(WarnMonthlyCap) {
		t.Fatalf("warned bits %b", a.counts.Warned)
	}
}

func TestMonthlyBeforeHourly(t *testing.T) {
	a := newAcct(t0)
	l := custom(1, 1)
	c := Charge{Account: "a", Limits: l, Hourly: true, Monthly: true, Now: t0}
	a.charge(&c, nil)
	if r, _ := a.charge(&c, nil); r.Refusal != RefusedMonthly {
		t.Fatalf("both exhausted: %+v", r)
	}
	if r, _ := a.charge(&Charge{Limits: l, Hourly: true, Now: t0}, nil); r.Refusal != RefusedHourly {
		t.Fatalf("hourly only: %+v", r)
	}
}

func TestHourlyWarnings(t *testing.T) {
	a := newAcct(t0)
	l := custom(10, -1)
	var ws warnLog
	burst := func(now time.Time, b Bucket, n int) {
		for i := 0; i < n; i++ {
			a.charge(&Charge{Account: "a", Bucket: b, Limits: l, Hourly: true, Now: now}, ws.add)
		}
	}
	burst(t0, Test, 12) // the test key never sends hourly warnings
	if len(ws) != 0 {
		t.Fatalf("test bucket warned: %v", ws.kinds())
	}
	burst(t0, Live, 7)
	if len(ws) != 0 {
		t.Fatalf("warned at 70%%: %v", ws.kinds())
	}
	burst(t0, Live, 1)
	burst(t0, Live, 5)
	if !reflect.DeepEqual(ws.kinds(), []WarnKind{WarnHourly80, WarnHourlyCap}) || ws[0].Used != 8 || ws[1].Used != 10 {
		t.Fatalf("warnings %+v", ws)
	}
	burst(t0.Add(2*time.Hour), Live, 10) // within 24 h: nothing new
	if len(ws) != 2 {
		t.Fatalf("repeated within 24h: %v", ws.kinds())
	}
	if a.idle(t0.Add(23*time.Hour), time.Hour) {
		t.Fatal("evictable while a warning is remembered")
	}
	burst(t0.Add(24*time.Hour), Live, 10)
	if len(ws) != 4 {
		t.Fatalf("after 24h: %v", ws.kinds())
	}
}

func TestUncappedAndGrandfathered(t *testing.T) {
	a := newAcct(t0)
	pi := LimitsFor(PlanPublicInterest, nil, nil, t0, t0)
	r, _ := a.charge(&Charge{Limits: pi, Hourly: true, Monthly: true, Total: true, Now: t0}, nil)
	if r != (ChargeResult{Allowed: true}) {
		t.Fatalf("public interest: %+v", r)
	}
	u := a.usage(Live, pi, t0)
	if !u.Uncapped || u.HourlyLimit != nil || u.Remaining != nil || u.MonthlyLimit != nil || u.UsedThisHour != 1 || u.Plan != "public_interest" {
		t.Fatalf("public interest usage %+v", u)
	}
	oct := time.Date(2026, 10, 20, 0, 0, 0, 0, time.UTC)
	g := LimitsFor(PlanFree, nil, nil, time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), oct)
	b := newAcct(oct)
	for i := 0; i < 20000; i++ {
		b.charge(&Charge{Limits: g, Monthly: true, Now: oct}, nil)
	}
	if b.counts.Used != 20000 {
		t.Fatalf("grandfathered month capped at %d", b.counts.Used)
	}
	u = b.usage(Test, g, oct)
	if u.KeyType != "test" || *u.HourlyLimit != 1000 || u.MonthlyLimit != nil || !u.GrandfatheredUntil.Equal(GrandfatheredUntil) || u.Uncapped {
		t.Fatalf("grandfathered usage %+v", u)
	}
	// After its end the plan's limits apply and grandfathered_until still
	// names the end (SPEC 2.4); November's count is not December's.
	dec := GrandfatheredUntil.Add(time.Second)
	gd := LimitsFor(PlanFree, nil, nil, time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), dec)
	b.month = storage.MonthOf(dec)
	b.counts = storage.MonthCounts{}
	u = b.usage(Live, gd, dec)
	if u.MonthlyLimit == nil || *u.MonthlyLimit != 10000 || u.MonthUsed != 0 || u.GrandfatheredUntil == nil || !u.GrandfatheredUntil.Equal(GrandfatheredUntil) {
		t.Fatalf("usage after grandfathering %+v", u)
	}
}

func TestRollbackAndIdle(t *testing.T) {
	a := newAcct(t0)
	l := custom(5, 5)
	c := Charge{Limits: l, Hourly: true, Monthly: true, Total: true, Now: t0}
	_, d := a.charge(&c, nil)
	a.touch(t0)
	a.rollback(&d, Live, true, a.hour[Live].start)
	if a.counts.Used != 0 || a.totals.Evaluations != 0 || a.hour[Live].n != 0 {
		t.Fatalf("after rollback: %+v", a)
	}
	a.charge(&c, nil)
	if a.idle(t0.Add(59*time.Minute), time.Hour) {
		t.Fatal("idle with a running window")
	}
	a.inflight.Add(1)
	if a.idle(t0.Add(3*time.Hour), time.Hour) {
		t.Fatal("idle with a delta in flight")
	}
	a.inflight.Add(-1)
	if !a.idle(t0.Add(3*time.Hour), time.Hour) {
		t.Fatal("not idle")
	}
}
