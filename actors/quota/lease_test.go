package quota

import (
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/storage"
)

// admit charges the owner until it refuses, answering how many it admitted.
func admit(t *testing.T, c *Client, ch Charge, most int) int {
	t.Helper()
	for i := range most {
		r, err := c.Charge(ch)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Allowed {
			return i
		}
	}
	return most
}

func TestLeaseSlicesNeverExceedTheCap(t *testing.T) {
	db := openMem(t, vfs.NewMem())
	defer db.Close()
	c := New(quietSystem().Root, Config{Shards: 2, Store: db})
	defer c.Stop()
	l := custom(100, 1000)
	lease := Lease{Account: "a", Holder: "b", Limits: l, Hourly: true, Monthly: true, Total: true, Now: t0, Members: 3, For: time.Second, Want: 1000}
	g, err := c.Lease(lease)
	if err != nil {
		t.Fatal(err)
	}
	// 100 / (2 × 3) = 16 of the hourly cap, the tighter limit.
	if g.Units != 16 || g.Seq == 0 || !g.Capped || g.Limit != 100 || g.Remaining != 100 {
		t.Fatalf("first slice: %+v", g)
	}
	ch := Charge{Account: "a", Limits: l, Hourly: true, Monthly: true, Total: true, Now: t0.Add(time.Millisecond)}
	// The owner admits what the slice leaves.
	if n := admit(t, c, ch, 200); n != 84 {
		t.Fatalf("owner admitted %d beside a slice of 16; want 84", n)
	}
	// No slice is lent once nothing remains.
	if g2, _ := c.Lease(lease); g2.Units != 0 {
		t.Fatalf("a slice lent past the cap: %+v", g2)
	}
	// The holder used 10 of its 16: the 6 it did not use are the owner's again.
	rep := lease
	rep.Want, rep.Report = 0, LeaseReport{Seq: g.Seq, Used: 10, SameClaim: true}
	if _, err := c.Lease(rep); err != nil {
		t.Fatal(err)
	}
	if n := admit(t, c, ch, 200); n != 6 {
		t.Fatalf("after the report the owner admitted %d; want the 6 unused", n)
	}
	// A repeated report settles nothing twice.
	if _, err := c.Lease(rep); err != nil {
		t.Fatal(err)
	}
	v, err := c.Usage(Usage{Account: "a", Limits: l, Now: t0.Add(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if v.UsedThisHour != 100 || v.MonthUsed != 100 || v.TotalEvaluations != 100 {
		t.Fatalf("usage after slices: hour %d month %d total %d; want 100 each", v.UsedThisHour, v.MonthUsed, v.TotalEvaluations)
	}
	// The owner stored only what it charged itself (90): the holder's 10
	// are its own share.
	stored(t, c)
	if counts, _, err := db.LoadUsage("a", storage.MonthOf(t0)); err != nil || counts.Used != 90 {
		t.Fatalf("owner's stored share %+v, %v; want 90", counts, err)
	}
}

func TestLeaseUnreportedSliceIsLetGo(t *testing.T) {
	c := New(quietSystem().Root, Config{Shards: 2})
	defer c.Stop()
	l := custom(60, 1000)
	g, err := c.Lease(Lease{Account: "a", Holder: "b", Limits: l, Hourly: true, Monthly: true, Now: t0, Members: 1, For: time.Second, Keep: 3 * time.Second, Want: 100})
	if err != nil || g.Units != 30 {
		t.Fatalf("slice %+v %v; want 30", g, err)
	}
	ch := Charge{Account: "a", Limits: l, Hourly: true, Monthly: true, Now: t0}
	if n := admit(t, c, ch, 100); n != 30 {
		t.Fatalf("owner admitted %d beside the slice; want 30", n)
	}
	// The holder never reports (it died): after Keep the reservation ends.
	ch.Now = t0.Add(3 * time.Second)
	if n := admit(t, c, ch, 100); n != 30 {
		t.Fatalf("owner admitted %d after the slice was let go; want 30", n)
	}
}

func TestLeaseFromAnEarlierClaimCountsOnlyTheHour(t *testing.T) {
	c := New(quietSystem().Root, Config{Shards: 2})
	defer c.Stop()
	l := custom(100, 1000)
	ch := Charge{Account: "a", Limits: l, Hourly: true, Monthly: true, Total: true, Now: t0}
	if n := admit(t, c, ch, 5); n != 5 {
		t.Fatal(n)
	}
	// A slice lent by the previous owner: its month and totals are in the
	// holder's share (loaded with the account); its hour is news here.
	if _, err := c.Lease(Lease{Account: "a", Holder: "b", Limits: l, Hourly: true, Monthly: true, Total: true, Now: t0, Members: 3, For: time.Second,
		Report: LeaseReport{Seq: 12345, Used: 7}}); err != nil {
		t.Fatal(err)
	}
	v, err := c.Usage(Usage{Account: "a", Limits: l, Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	if v.UsedThisHour != 12 || v.MonthUsed != 5 || v.TotalEvaluations != 5 {
		t.Fatalf("hour %d month %d total %d; want 12, 5, 5", v.UsedThisHour, v.MonthUsed, v.TotalEvaluations)
	}
}

// TestLeaseEndsWithinItsWindow: a holder uses a slice for For after it
// asked, whatever the owner's window does meanwhile. A slice lent in the
// last moments of an hourly window would be used in the next one, where
// nothing counts it (the owner's new window starts afresh, and the
// report's hour belongs to the old one): the window's last For lends
// nothing, and the next window admits no more than the cap.
func TestLeaseEndsWithinItsWindow(t *testing.T) {
	c := New(quietSystem().Root, Config{Shards: 2})
	defer c.Stop()
	l := custom(100, 100_000)
	ch := Charge{Account: "a", Limits: l, Hourly: true, Monthly: true, Total: true, Now: t0}
	if n := admit(t, c, ch, 1); n != 1 {
		t.Fatal(n)
	}
	end := t0.Add(Window)
	lease := Lease{Account: "a", Holder: "b", Limits: l, Hourly: true, Monthly: true, Total: true, Now: end.Add(-100 * time.Millisecond),
		Members: 1, For: time.Second, Keep: 3 * time.Second, Want: 1000}
	g, err := c.Lease(lease)
	if err != nil {
		t.Fatal(err)
	}
	// The holder uses the whole slice within For of its request, after the
	// window ended; the owner charges the new window meanwhile.
	ch.Now = end.Add(10 * time.Millisecond)
	n := admit(t, c, ch, 200)
	rep := lease
	rep.Now, rep.Want, rep.Report = end.Add(500*time.Millisecond), 0, LeaseReport{Seq: g.Seq, Used: g.Units, SameClaim: true}
	if _, err := c.Lease(rep); err != nil {
		t.Fatal(err)
	}
	if int64(n)+g.Units > 100 {
		t.Fatalf("hourly cap 100: the next window admitted %d at the owner and %d from a slice lent %v before it", n, g.Units, end.Sub(lease.Now))
	}
}

// TestLeaseEndsWithinItsMonth: as for the hourly window, a slice lent in
// the month's last For would be used in the next month, whose load reads
// the holder's share (with those units) and whose count the report would
// add them to again: nothing is lent then, capped or not.
func TestLeaseEndsWithinItsMonth(t *testing.T) {
	c := New(quietSystem().Root, Config{Shards: 2})
	defer c.Stop()
	end := storage.MonthOf(t0).End()
	for _, l := range []Limits{custom(-1, 100_000), custom(-1, -1)} {
		lease := Lease{Account: "a", Holder: "b", Limits: l, Monthly: true, Total: true,
			Members: 1, For: time.Second, Keep: 3 * time.Second, Want: 10}
		lease.Now = end.Add(-2 * time.Second)
		if g, err := c.Lease(lease); err != nil || g.Units == 0 {
			t.Fatalf("limits %+v: a lease %v before the month's end: %+v %v; want a slice", l, end.Sub(lease.Now), g, err)
		}
		lease.Now = end.Add(-100 * time.Millisecond)
		if g, err := c.Lease(lease); err != nil || g.Units != 0 {
			t.Fatalf("limits %+v: a lease %v before the month's end: %+v %v; want none", l, end.Sub(lease.Now), g, err)
		}
	}
}

// TestLateReportOpensNoWindow: a report that reaches the owner after the
// window its slice was lent in has ended, with no window running, counts
// its uses in that ended window only: the next window starts empty.
func TestLateReportOpensNoWindow(t *testing.T) {
	c := New(quietSystem().Root, Config{Shards: 2})
	defer c.Stop()
	l := custom(100, 100_000)
	ch := Charge{Account: "a", Limits: l, Hourly: true, Monthly: true, Total: true, Now: t0}
	if n := admit(t, c, ch, 1); n != 1 {
		t.Fatal(n)
	}
	lease := Lease{Account: "a", Holder: "b", Limits: l, Hourly: true, Monthly: true, Total: true, Now: t0.Add(time.Minute),
		Members: 1, For: time.Second, Keep: 3 * time.Second, Want: 40}
	g, err := c.Lease(lease)
	if err != nil || g.Units == 0 {
		t.Fatalf("lease: %+v %v", g, err)
	}
	// The holder used the slice within its second; its report comes after
	// the window ended and before anything opened the next one.
	rep := lease
	rep.Now, rep.Want, rep.Report = t0.Add(Window+time.Second), 0, LeaseReport{Seq: g.Seq, Used: g.Units, SameClaim: true}
	if _, err := c.Lease(rep); err != nil {
		t.Fatal(err)
	}
	ch.Now = rep.Now
	if n := admit(t, c, ch, 200); n != 100 {
		t.Fatalf("the window after a late report admitted %d; want the cap of 100", n)
	}
}

// TestLeaseReportAfterTheMonthEnds: a slice lent 1.5 s before the month's
// end (For is 1 s: allowed), used in full in that month and reported
// 200 ms after its end, is that month's: the new month's count and what
// it admits are untouched (the holder stored the units in its share of
// the old month). Before, the report's units joined the new month's count.
func TestLeaseReportAfterTheMonthEnds(t *testing.T) {
	c := New(quietSystem().Root, Config{Shards: 2})
	defer c.Stop()
	end := storage.MonthOf(t0).End()
	l := custom(-1, 1000)
	lease := Lease{Account: "a", Holder: "b", Limits: l, Monthly: true, Total: true,
		Members: 1, For: time.Second, Keep: 3 * time.Second, Want: 100, Now: end.Add(-1500 * time.Millisecond)}
	g, err := c.Lease(lease)
	if err != nil || g.Units == 0 {
		t.Fatalf("lease %+v %v", g, err)
	}
	rep := lease
	rep.Now, rep.Want, rep.Report = end.Add(200*time.Millisecond), 0, LeaseReport{Seq: g.Seq, Used: g.Units, SameClaim: true}
	if _, err := c.Lease(rep); err != nil {
		t.Fatal(err)
	}
	v, err := c.Usage(Usage{Account: "a", Limits: l, Now: rep.Now})
	if err != nil {
		t.Fatal(err)
	}
	ch := Charge{Account: "a", Limits: l, Monthly: true, Total: true, Now: rep.Now}
	n := admit(t, c, ch, 2000)
	if v.MonthUsed != 0 || n != 1000 {
		t.Fatalf("old month's slice counted in the new month: MonthUsed %d, admitted %d; want 0, 1000", v.MonthUsed, n)
	}
}

// TestUnreportedSliceLetsTheAccountGo: a slice whose report never comes
// (its holder stopped, or its call failed) no longer keeps its account in
// memory once kept past its time: the sweep lets it go. Before, only a
// lend or a charge pruned slices, and an idle account kept one for good.
func TestUnreportedSliceLetsTheAccountGo(t *testing.T) {
	db := openMem(t, vfs.NewMem())
	defer db.Close()
	c := New(quietSystem().Root, Config{Shards: 2, Store: db})
	defer c.Stop()
	l := custom(-1, 1000)
	if g, err := c.Lease(Lease{Account: "a", Holder: "b", Limits: l, Monthly: true, Now: t0, Members: 1, For: time.Second, Keep: 3 * time.Second, Want: 10}); err != nil || g.Units == 0 {
		t.Fatal(g, err)
	}
	if _, err := c.Lease(Lease{Account: "z", Holder: "b", Limits: l, Monthly: true, Now: t0, Members: 1, For: time.Second, Keep: 3 * time.Second}); err != nil {
		t.Fatal(err)
	}
	stored(t, c)
	c.Sweep(t0.Add(24 * time.Hour))
	time.Sleep(100 * time.Millisecond)
	if n := c.resident(); n != 0 {
		t.Fatalf("%d accounts resident a day after their slices' Keep ran out", n)
	}
}

// TestLeaseEarlierClaimReportKeepsThisOwnersSlice: a report of a slice an
// earlier owner lent (SameClaim false) that happens to carry the number
// of a slice this owner lent the same holder releases nothing, used or
// not: each owner numbers its own slices. Before, an unused one released
// this owner's slice, whose units the holder went on charging beside the
// owner's own admissions.
func TestLeaseEarlierClaimReportKeepsThisOwnersSlice(t *testing.T) {
	c := New(quietSystem().Root, Config{Shards: 2})
	defer c.Stop()
	l := custom(100, 1000)
	lease := Lease{Account: "a", Holder: "b", Limits: l, Hourly: true, Monthly: true, Total: true, Now: t0, Members: 3, For: time.Second, Keep: 3 * time.Second, Want: 1000}
	g, err := c.Lease(lease)
	if err != nil || g.Units != 16 {
		t.Fatalf("slice: %+v %v", g, err)
	}
	old := lease
	old.Want, old.Report = 0, LeaseReport{Seq: g.Seq, Used: 0, SameClaim: false}
	if _, err := c.Lease(old); err != nil {
		t.Fatal(err)
	}
	ch := Charge{Account: "a", Limits: l, Hourly: true, Monthly: true, Total: true, Now: t0.Add(time.Millisecond)}
	if n := admit(t, c, ch, 200); n != 84 {
		t.Fatalf("the owner admitted %d beside its slice of 16; want 84", n)
	}
}

// TestLeaseFromAnEarlierClaimInAnEarlierWindow: a slice an earlier owner
// lent, whose use ended before the hourly window running here began (its
// report waited out a failover), counts in no window here; one whose use
// ended inside it counts there, as does one from a holder that does not
// say when its use ended. Before, every such report counted in whichever
// window ran when it came: up to a slice stricter than the cap.
func TestLeaseFromAnEarlierClaimInAnEarlierWindow(t *testing.T) {
	c := New(quietSystem().Root, Config{Shards: 2})
	defer c.Stop()
	l := custom(100, 100_000)
	start := t0.Add(Window + time.Second) // this window's first charge
	ch := Charge{Account: "a", Limits: l, Hourly: true, Monthly: true, Total: true, Now: start}
	if n := admit(t, c, ch, 1); n != 1 {
		t.Fatal(n)
	}
	now := start.Add(time.Second)
	report := func(seq uint64, used int64, until time.Time) {
		t.Helper()
		if _, err := c.Lease(Lease{Account: "a", Holder: "b", Limits: l, Hourly: true, Monthly: true, Total: true, Now: now, Members: 3, For: time.Second,
			Report: LeaseReport{Seq: seq, Used: used, Until: until}}); err != nil {
			t.Fatal(err)
		}
	}
	hour := func() int64 {
		t.Helper()
		v, err := c.Usage(Usage{Account: "a", Limits: l, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		return v.UsedThisHour
	}
	report(12345, 16, start.Add(-time.Minute))
	if h := hour(); h != 1 {
		t.Fatalf("an earlier window's slice counted here: %d used this hour, want 1", h)
	}
	report(12346, 4, start.Add(500*time.Millisecond))
	if h := hour(); h != 5 {
		t.Fatalf("%d used this hour, want 5 (1 + a slice of this window's 4)", h)
	}
	report(12347, 2, time.Time{})
	if h := hour(); h != 7 {
		t.Fatalf("%d used this hour, want 7 (and 2 from a holder that does not say when)", h)
	}
}
