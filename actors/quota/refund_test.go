package quota

import (
	"errors"
	"log/slog"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/storage"
)

// TestRefundUndoesACharge: a refunded charge gives back the month's count,
// the day's, the total and the hourly request it took, in memory and in
// the store; a refunded refusal gives back its limit hit; an account no
// longer in memory is refunded in the store alone; a failed store keeps
// the charge.
func TestRefundUndoesACharge(t *testing.T) {
	db := openMem(t, vfs.NewMem())
	defer db.Close()
	fl := &flakyStore{Store: db}
	c := New(quietSystem().Root, Config{Shards: 2, Store: fl})
	defer c.Stop()
	l := custom(10, 2)
	ch := Charge{Account: "a", Limits: l, Hourly: true, Monthly: true, Total: true, Now: t0}
	var kept ChargeResult
	for i := range 2 {
		r, err := c.Charge(ch)
		if err != nil || !r.Allowed {
			t.Fatalf("charge %d: %+v %v", i, r, err)
		}
		kept = r
	}
	refused, err := c.Charge(ch)
	if err != nil || refused.Allowed {
		t.Fatalf("third charge over a monthly cap of 2: %+v %v", refused, err)
	}
	if err := c.Refund(Refund{Charge: ch, Result: kept}); err != nil {
		t.Fatal(err)
	}
	if err := c.Refund(Refund{Charge: ch, Result: refused}); err != nil {
		t.Fatal(err)
	}
	u, err := c.Usage(Usage{Account: "a", Limits: l, Now: t0})
	if err != nil || u.MonthUsed != 1 || u.TotalEvaluations != 1 || u.UsedThisHour != 1 || u.LimitHits != 0 {
		t.Fatalf("in memory after the refunds: %+v %v", u, err)
	}
	m := storage.MonthOf(t0)
	if cnt, tot, _ := db.LoadUsage("a", m); cnt.Used != 1 || tot.Evaluations != 1 || tot.LimitHits != 0 {
		t.Fatalf("stored after the refunds: %+v %+v", cnt, tot)
	}
	if days, err := db.DailyUsage("a", storage.DayOf(t0), storage.DayOf(t0)); err != nil || len(days) != 1 || days[0].Used != 1 {
		t.Fatalf("stored days after the refunds: %+v %v", days, err)
	}
	// The refund freed the month's second call: it is admitted again.
	if r, err := c.Charge(ch); err != nil || !r.Allowed {
		t.Fatalf("charge after the refund: %+v %v", r, err)
	}

	// Not in memory: the store alone gives it back.
	if _, err := c.Drop(func(string) bool { return true }, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c.Refund(Refund{Charge: ch, Result: kept}); err != nil {
		t.Fatal(err)
	}
	if cnt, tot, _ := db.LoadUsage("a", m); cnt.Used != 1 || tot.Evaluations != 1 {
		t.Fatalf("stored after refunding a dropped account: %+v %+v", cnt, tot)
	}

	fl.failApply.Store(true)
	if err := c.Refund(Refund{Charge: ch, Result: kept}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("refund on a failing store: %v", err)
	}
	fl.failApply.Store(false)
	u, err = c.Usage(Usage{Account: "a", Limits: l, Now: t0})
	if err != nil || u.MonthUsed != 1 || u.TotalEvaluations != 1 {
		t.Fatalf("a failed refund changed memory: %+v %v", u, err)
	}
}

// TestRefundLeavesANewWindow: a refund of a charge made in an hourly
// window that has ended takes nothing from the window running now.
func TestRefundLeavesANewWindow(t *testing.T) {
	c := New(quietSystem().Root, Config{Shards: 1})
	defer c.Stop()
	l := custom(10, 100)
	old := Charge{Account: "a", Limits: l, Hourly: true, Now: t0}
	r, err := c.Charge(old)
	if err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	later := old
	later.Now = t0.Add(Window + time.Minute)
	if _, err := c.Charge(later); err != nil {
		t.Fatal(err)
	}
	if err := c.Refund(Refund{Charge: old, Result: r}); err != nil {
		t.Fatal(err)
	}
	if u, _ := c.Usage(Usage{Account: "a", Limits: l, Now: later.Now}); u.UsedThisHour != 1 {
		t.Fatalf("the new window lost a request to an old charge's refund: %+v", u)
	}
}

// TestFailedRefundUndoesNothing: a refund whose store write fails leaves
// the hourly request too (the failure's rollback takes it again), so the
// retry that follows gives back one call, not two.
func TestFailedRefundUndoesNothing(t *testing.T) {
	db := openMem(t, vfs.NewMem())
	defer db.Close()
	fl := &flakyStore{Store: db}
	c := New(quietSystem().Root, Config{Shards: 2, Store: fl})
	defer c.Stop()
	l := custom(10, 100)
	ch := Charge{Account: "a", Limits: l, Hourly: true, Monthly: true, Total: true, Now: t0}
	var kept ChargeResult
	for range 3 {
		r, err := c.Charge(ch)
		if err != nil || !r.Allowed {
			t.Fatal(r, err)
		}
		kept = r
	}
	fl.failApply.Store(true)
	if err := c.Refund(Refund{Charge: ch, Result: kept}); !errors.Is(err, ErrUnavailable) {
		t.Fatal(err)
	}
	fl.failApply.Store(false)
	if u, _ := c.Usage(Usage{Account: "a", Limits: l, Now: t0}); u.UsedThisHour != 3 || u.MonthUsed != 3 {
		t.Fatalf("after a failed refund: this hour %d, month %d; want 3 and 3", u.UsedThisHour, u.MonthUsed)
	}
	if err := c.Refund(Refund{Charge: ch, Result: kept}); err != nil {
		t.Fatal(err)
	}
	if u, _ := c.Usage(Usage{Account: "a", Limits: l, Now: t0}); u.UsedThisHour != 2 || u.MonthUsed != 2 {
		t.Fatalf("after a failed refund and its retry: this hour %d, month %d; want 2 and 2", u.UsedThisHour, u.MonthUsed)
	}
}

// TestDiscountOnlyInTheLoadNamed: a discount takes a call out of the
// account's counts in memory while the load it names is held, and nowhere
// else: not in the store (which holds this node's own share), not in a
// later load (which read the share without the call), not for a load never
// named (tag 0).
func TestDiscountOnlyInTheLoadNamed(t *testing.T) {
	db := openMem(t, vfs.NewMem())
	defer db.Close()
	var loads atomic.Uint64
	c := New(quietSystem().Root, Config{Shards: 2, Store: windowStore{DB: db, loads: &loads}})
	defer c.Stop()
	l := custom(10, 3)
	ch := Charge{Account: "a", Limits: l, Monthly: true, Total: true, Now: t0}
	for i := range 3 {
		if r, err := c.Charge(ch); err != nil || !r.Allowed {
			t.Fatalf("charge %d: %+v %v", i, r, err)
		}
	}
	if r, err := c.Charge(ch); err != nil || r.Allowed {
		t.Fatalf("a fourth charge over a monthly cap of 3: %+v %v", r, err)
	}
	// Another member's call, counted in load 1, given back there.
	taken := (&Refund{Charge: ch, Result: ChargeResult{Allowed: true}}).Taken()
	for _, tag := range []uint64{0, 2} {
		if ok, err := c.Discount(Discount{Account: "a", From: "m", Tag: tag, Taken: taken}); err != nil || ok {
			t.Fatalf("discount under load %d, not held: %v %v", tag, ok, err)
		}
	}
	if ok, err := c.Discount(Discount{Account: "a", From: "x", Tag: 1, Taken: taken}); err != nil || ok {
		t.Fatalf("discount from a member whose share the load did not sum: %v %v", ok, err)
	}
	if ok, err := c.Discount(Discount{Account: "a", From: "m", Tag: 1, Taken: taken}); err != nil || !ok {
		t.Fatalf("discount under the load held: %v %v", ok, err)
	}
	u, err := c.Usage(Usage{Account: "a", Limits: l, Now: t0})
	if err != nil || u.MonthUsed != 2 || u.TotalEvaluations != 2 || u.LimitHits != 1 {
		t.Fatalf("in memory after the discount: %+v %v", u, err)
	}
	if r, err := c.Charge(ch); err != nil || !r.Allowed {
		t.Fatalf("the call the discount freed: %+v %v", r, err)
	}
	stored(t, c)
	if cnt, tot, _ := db.LoadUsage("a", storage.MonthOf(t0)); cnt.Used != 4 || tot.Evaluations != 4 {
		t.Fatalf("the store holds this node's own charges, discount or not: %+v %+v", cnt, tot)
	}
	// A later load is not the one the discount named.
	if _, err := c.Drop(func(string) bool { return true }, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.Discount(Discount{Account: "a", From: "m", Tag: 1, Taken: taken}); err != nil || ok {
		t.Fatalf("discount after the account was dropped: %v %v", ok, err)
	}
	if _, err := c.Usage(Usage{Account: "a", Limits: l, Now: t0}); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.Discount(Discount{Account: "a", From: "m", Tag: 1, Taken: taken}); err != nil || ok {
		t.Fatalf("discount of load 1 applied to load %d: %v %v", loads.Load(), ok, err)
	}
}

// TestDiscountGivesBackAResumedHour: a discounted hourly call comes out of
// the bucket's window only when the load resumed that window (the member
// handed it over with the call in it) and the window had started by the
// call's stamp; a window this node opened itself keeps its count.
func TestDiscountGivesBackAResumedHour(t *testing.T) {
	db := openMem(t, vfs.NewMem())
	defer db.Close()
	var loads atomic.Uint64
	now := t0.Add(30 * time.Minute)
	store := windowStore{DB: db, loads: &loads, hour: [2]HourWindow{Live: {Start: t0, N: 8}}}
	c := New(quietSystem().Root, Config{Shards: 2, Store: store})
	defer c.Stop()
	l := custom(10, 1000)
	hourUsed := func(acc string, b Bucket) int64 {
		t.Helper()
		u, err := c.Usage(Usage{Account: acc, Bucket: b, Limits: l, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		return u.UsedThisHour
	}
	if n := hourUsed("a", Live); n != 8 {
		t.Fatalf("resumed window holds %d; want 8", n)
	}
	taken := storage.UsageDelta{Account: "a", Month: storage.MonthOf(now)}
	d := Discount{Account: "a", From: "m", Tag: 1, Taken: taken, Hourly: true, Bucket: Live, At: t0.Add(-time.Second)}
	if ok, err := c.Discount(d); err != nil || !ok {
		t.Fatalf("discount: %v %v", ok, err)
	}
	if n := hourUsed("a", Live); n != 8 {
		t.Fatalf("a call stamped before the resumed window started was given back: %d", n)
	}
	d.At = t0.Add(10 * time.Minute)
	if ok, err := c.Discount(d); err != nil || !ok {
		t.Fatalf("discount: %v %v", ok, err)
	}
	if n := hourUsed("a", Live); n != 7 {
		t.Fatalf("resumed window after the discount holds %d; want 7", n)
	}
	d.At = t0.Add(Window + time.Second)
	if ok, err := c.Discount(d); err != nil || !ok {
		t.Fatalf("discount: %v %v", ok, err)
	}
	if n := hourUsed("a", Live); n != 7 {
		t.Fatalf("a call stamped after the resumed window ended was given back: %d", n)
	}
	// A window this node opened: nothing handed over for bucket Test.
	ch := Charge{Account: "a", Bucket: Test, Limits: l, Hourly: true, Now: now}
	if r, err := c.Charge(ch); err != nil || !r.Allowed {
		t.Fatalf("charge: %+v %v", r, err)
	}
	d.Bucket, d.At = Test, now
	if ok, err := c.Discount(d); err != nil || !ok {
		t.Fatalf("discount: %v %v", ok, err)
	}
	if n := hourUsed("a", Test); n != 1 {
		t.Fatalf("a window this node opened gave back a call it never held: %d", n)
	}
}

// TestDiscountAcrossAMonthChange: after the month changes the month's
// counts come from a new load, while the totals and the resumed windows
// stay those of the first. A discount naming the first load takes the
// call out of the totals (its month's count is gone with the month), one
// naming the new load out of the month's count only.
func TestDiscountAcrossAMonthChange(t *testing.T) {
	db := openMem(t, vfs.NewMem())
	defer db.Close()
	var loads atomic.Uint64
	store := windowStore{DB: db, loads: &loads, hour: [2]HourWindow{Live: {Start: t0, N: 3}}}
	c := New(quietSystem().Root, Config{Shards: 2, Store: store})
	defer c.Stop()
	l := custom(10, 1000)
	ch := Charge{Account: "a", Bucket: Live, Limits: l, Monthly: true, Total: true, Now: t0}
	if r, err := c.Charge(ch); err != nil || !r.Allowed { // load 1, month of t0
		t.Fatalf("charge: %+v %v", r, err)
	}
	next := time.Date(t0.Year(), t0.Month()+1, 1, 0, 10, 0, 0, time.UTC)
	ch.Now = next
	for range 2 { // load 2: the new month's counts
		if r, err := c.Charge(ch); err != nil || !r.Allowed {
			t.Fatalf("charge: %+v %v", r, err)
		}
	}
	usage := func() UsageView {
		t.Helper()
		u, err := c.Usage(Usage{Account: "a", Bucket: Live, Limits: l, Now: next})
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	if u := usage(); u.MonthUsed != 2 || u.TotalEvaluations != 3 || loads.Load() != 2 {
		t.Fatalf("after the month changed: %+v, %d loads", u, loads.Load())
	}
	old := (&Refund{Charge: Charge{Account: "a", Monthly: true, Total: true, Now: t0}, Result: ChargeResult{Allowed: true}}).Taken()
	if ok, err := c.Discount(Discount{Account: "a", From: "m", Tag: 1, Taken: old}); err != nil || !ok {
		t.Fatalf("discount of the first load: %v %v", ok, err)
	}
	if u := usage(); u.MonthUsed != 2 || u.TotalEvaluations != 2 {
		t.Fatalf("after a discount of last month's call: %+v; want 2 used this month, 2 in total", u)
	}
	cur := (&Refund{Charge: Charge{Account: "a", Monthly: true, Total: true, Now: next}, Result: ChargeResult{Allowed: true}}).Taken()
	if ok, err := c.Discount(Discount{Account: "a", From: "m", Tag: 2, Taken: cur, Hourly: true, Bucket: Live, At: next}); err != nil || !ok {
		t.Fatalf("discount of the month's load: %v %v", ok, err)
	}
	if u := usage(); u.MonthUsed != 1 || u.TotalEvaluations != 2 {
		t.Fatalf("after a discount of this month's call: %+v; want 1 used this month, 2 in total", u)
	}
}

// TestRefundOfALostIncrement: a charge answered ahead of its commit whose
// batch failed stays counted in memory but never reached the store; its
// refund then gives it back in memory and must not take from the store a
// unit the store never got (that would leave the stored count one below
// the calls served). A refund of a stored charge still does.
func TestRefundOfALostIncrement(t *testing.T) {
	s := newAheadStore(t)
	c := New(quietSystem().Root, Config{Shards: 1, Store: s, Logger: slog.New(slog.DiscardHandler)})
	defer c.Stop()
	l := custom(10, 100)
	ch := Charge{Account: "a", Limits: l, Hourly: true, Monthly: true, Total: true, Now: t0}
	if _, err := c.Charge(ch); err != nil { // loaded and stored
		t.Fatal(err)
	}
	stored(t, c)

	s.fail.Store(true)
	lost, err := c.Charge(ch)
	if err != nil || !lost.Allowed {
		t.Fatalf("charge answered ahead of a failing commit: %+v %v", lost, err)
	}
	stored(t, c) // its batch failed: the increment is lost to the store
	// A refund whose own batch fails did not happen: the lost unit is
	// still owed to the one that follows.
	if err := c.Refund(Refund{Charge: ch, Result: lost}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("refund on a failing store: %v", err)
	}
	s.fail.Store(false)
	if err := c.Refund(Refund{Charge: ch, Result: lost}); err != nil {
		t.Fatal(err)
	}
	m, day := storage.MonthOf(t0), storage.DayOf(t0)
	check := func(when string, want int64) {
		t.Helper()
		u, err := c.Usage(Usage{Account: "a", Limits: l, Now: t0})
		if err != nil || u.MonthUsed != want || u.TotalEvaluations != want || u.UsedThisHour != want {
			t.Fatalf("%s: in memory %+v %v; want %d", when, u, err, want)
		}
		cnt, tot, err := s.DB.LoadUsage("a", m)
		if err != nil || cnt.Used != want || tot.Evaluations != want {
			t.Fatalf("%s: stored %+v %+v %v; want %d", when, cnt, tot, err, want)
		}
		if days, err := s.DB.DailyUsage("a", day, day); err != nil || len(days) != 1 || days[0].Used != want {
			t.Fatalf("%s: stored days %+v %v; want %d", when, days, err, want)
		}
	}
	check("after refunding the lost charge", 1)

	// A stored charge's refund takes its unit from the store again.
	kept, err := c.Charge(ch)
	if err != nil || !kept.Allowed {
		t.Fatalf("charge after the store recovered: %+v %v", kept, err)
	}
	stored(t, c)
	check("charged again", 2)
	if err := c.Refund(Refund{Charge: ch, Result: kept}); err != nil {
		t.Fatal(err)
	}
	stored(t, c)
	check("after refunding a stored charge", 1)
}

// poisonAheadStore is an aheadStore whose LoadUsage panics for the account
// "poison": a bug that restarts the shard, which then loads its accounts
// from the store again.
type poisonAheadStore struct{ *aheadStore }

func (p poisonAheadStore) LoadUsage(a string, m storage.Month) (storage.MonthCounts, storage.Totals, error) {
	if a == "poison" {
		panic("injected panic loading " + a)
	}
	return p.aheadStore.LoadUsage(a, m)
}

// TestRefundOfALostIncrementAfterAReload: the account is loaded from the
// store again (here after a shard restart) between the failed batch of a
// charge answered ahead and that charge's refund. The reload must count
// the lost increment as memory did before it (the committer still owes it
// to a refund), or the refund, taken from memory and not from the store,
// leaves memory one below the store.
func TestRefundOfALostIncrementAfterAReload(t *testing.T) {
	s := newAheadStore(t)
	sys := quietSystem()
	c := New(sys.Root, Config{Shards: 1, Store: poisonAheadStore{s}, Timeout: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	defer c.Stop()
	l := custom(10, 100)
	ch := Charge{Account: "a", Limits: l, Hourly: true, Monthly: true, Total: true, Now: t0}
	if _, err := c.Charge(ch); err != nil { // loaded and stored
		t.Fatal(err)
	}
	stored(t, c)
	s.fail.Store(true)
	lost, err := c.Charge(ch)
	if err != nil || !lost.Allowed {
		t.Fatalf("charge answered ahead of a failing commit: %+v %v", lost, err)
	}
	stored(t, c) // its batch failed: the increment is lost to the store
	s.fail.Store(false)

	m := storage.MonthOf(t0)
	check := func(when string, mem, store int64) {
		t.Helper()
		u, err := c.Usage(Usage{Account: "a", Limits: l, Now: t0})
		if err != nil || u.MonthUsed != mem || u.TotalEvaluations != mem {
			t.Fatalf("%s: in memory %+v %v; want %d", when, u, err, mem)
		}
		cnt, tot, err := s.DB.LoadUsage("a", m)
		if err != nil || cnt.Used != store || tot.Evaluations != store {
			t.Fatalf("%s: stored %+v %+v %v; want %d", when, cnt, tot, err, store)
		}
	}
	check("after the lost charge", 2, 1)
	if _, err := c.Charge(Charge{Account: "poison", Limits: l, Hourly: true, Now: t0}); !errors.Is(err, actors.ErrTimeout) {
		t.Fatalf("the panicking call: %v", err)
	}
	check("reloaded after the restart", 2, 1)
	if err := c.Refund(Refund{Charge: ch, Result: lost}); err != nil {
		t.Fatal(err)
	}
	stored(t, c)
	check("after refunding the lost charge", 1, 1)
}

// TestHugeLimitsDoNotWrap: a custom monthly limit past MaxInt64/10 (an
// operator's "as good as unlimited") gives the largest lookup allowance,
// not one wrapped negative that refuses every lookup, and limits near
// MaxInt64 send no 80% warning on the first call (80% of them wrapped to
// nothing, clamped to 1).
func TestHugeLimitsDoNotWrap(t *testing.T) {
	big := int64(1_000_000_000_000_000_000) // 1e18: an operator's "effectively unlimited"
	l := LimitsFor(PlanCustom, nil, &big, t0, t0)
	if l.MonthlyLookups != math.MaxInt64 {
		t.Errorf("lookup allowance of a 1e18 monthly limit: %d", l.MonthlyLookups)
	}
	a := newAcct(t0)
	var w warnLog
	r, _ := a.charge(&Charge{Account: "a", Kind: Lookup, Limits: l, Monthly: true, Now: t0}, w.add)
	if !r.Allowed {
		t.Errorf("first lookup refused: %+v", r)
	}
	max := int64(math.MaxInt64)
	l2 := LimitsFor(PlanCustom, &max, &max, t0, t0)
	a2 := newAcct(t0)
	var w2 warnLog
	r2, _ := a2.charge(&Charge{Account: "a", Kind: Evaluate, Limits: l2, Hourly: true, Monthly: true, Now: t0}, w2.add)
	if !r2.Allowed || len(w2) != 0 {
		t.Errorf("first call under limits of %d: %+v, warned %v", max, r2, w2.kinds())
	}
}

// TestRefundKeepsToItsWindow: a refund of a charge made in the last
// seconds of a window, arriving after the next window began (within
// Stagger of the charge's stamp), gives nothing back to the new window,
// which never held the charge. Before, the new window gave back a request
// and admitted one over its cap.
func TestRefundKeepsToItsWindow(t *testing.T) {
	c := New(quietSystem().Root, Config{Shards: 1})
	defer c.Stop()
	l := custom(2, -1)
	ch := func(now time.Time) (Charge, ChargeResult) {
		m := Charge{Account: "a", Limits: l, Hourly: true, Now: now}
		r, err := c.Charge(m)
		if err != nil {
			t.Fatal(err)
		}
		return m, r
	}
	ch(t0)
	late, lr := ch(t0.Add(time.Hour - 2*time.Second)) // last in W1
	w2 := t0.Add(time.Hour + time.Second)
	ch(w2) // opens W2
	if err := c.Refund(Refund{Charge: late, Result: lr}); err != nil {
		t.Fatal(err)
	}
	n := 1
	for i := 0; i < 3; i++ {
		if _, r := ch(w2.Add(time.Minute)); r.Allowed {
			n++
		}
	}
	if n > 2 {
		t.Errorf("window starting %v admitted %d with an hourly limit of 2", w2, n)
	}
}
