package quota

import (
	"sync/atomic"
	"time"

	"github.com/fraudd/fraudd/storage"
)

// Allowance leases (docs/cluster.md, "Hot accounts"): in a cluster, the
// owner of an account lends another node a slice of the account's
// remaining hourly and monthly allowance, which that node then charges
// without asking. The owner counts every slice it lent as used until the
// holder reports what it used of it, so the slices and the owner's own
// admissions never add up to more than the limit. This file is the owner's
// half; cluster/rpc holds the holder's.

// Lease asks the account's owner for a slice of its allowance, reporting
// first what the holder used of its previous one (Report.Seq zero: none).
type Lease struct {
	Account string
	// Holder is the member that will charge the slice.
	Holder string
	Bucket Bucket
	Kind   Kind
	// Hourly, Monthly and Total are the flags of the charges the slice
	// is for (Charge's): each unit of the slice is one such charge.
	Hourly, Monthly, Total bool
	Limits                 Limits
	Now                    time.Time
	// Members is how many members may hold slices: each slice is at most
	// the remaining allowance / (2 × Members).
	Members int
	// For is how long the holder may use the slice; the owner keeps it
	// reserved for Keep (at least For) unless the holder reports first.
	For, Keep time.Duration
	// Want is how many units the holder asks for; 0 returns the previous
	// slice's rest without asking for another.
	Want   int64
	Report LeaseReport
}

// LeaseReport is what a holder used of a slice.
type LeaseReport struct {
	// Seq names the slice (LeaseGrant.Seq); zero is no report.
	Seq  uint64
	Used int64
	// SameClaim: the slice was lent under the owner's current claim of the
	// shard. A slice lent under an earlier claim is one this owner never
	// reserved: its monthly and total use are already in the holder's
	// share, which this owner's G-counter read when it loaded the account
	// (the holder stops using a slice before it answers that read), so
	// only its hourly use is counted.
	SameClaim bool
	// Until is when the holder's use of the slice ended, on its clock
	// (zero: not said). A slice lent under an earlier claim whose use
	// ended before the hourly window running here began was used in an
	// earlier window: it counts in none here.
	Until time.Time
}

// LeaseGrant is the owner's answer: a slice of Units charges (zero: none,
// the holder charges through the owner), and the rate-limit headers as of
// the grant, which the holder counts down from.
type LeaseGrant struct {
	Seq   uint64
	Units int64
	// Capped, Limit, Remaining and Reset are ChargeResult's as of the
	// grant, with Remaining counted before this slice.
	Capped                  bool
	Limit, Remaining, Reset int64
}

// grant is a slice the owner lent and reserves until it is reported or
// kept long enough.
type grant struct {
	holder          string
	seq             uint64
	bucket          Bucket
	kind            Kind
	hourly, monthly bool
	total           bool
	units           int64
	wstart          time.Time     // the hourly window it was lent in (zero: none running)
	month           storage.Month // the month it was lent in
	until           time.Time
}

// leaseSeq numbers slices for the life of the process; a report names the
// slice it settles, so a repeated report settles nothing twice.
var leaseSeq atomic.Uint64

// lent is what the account's outstanding slices reserve of b's hourly
// window and of kind's month, as of now; slices kept past their time are
// let go (their holder did not report: it is gone, and what it used is in
// its persisted share, counted when the account loads again).
func (a *account) lent(b Bucket, k Kind, now time.Time) (hourly, monthly int64) {
	a.dropLapsed(now)
	w := &a.hour[b&1]
	for _, g := range a.grants {
		// A slice lent in a window that has ended was kept no longer
		// than the window (lend).
		if g.hourly && g.bucket == b && (w.n == 0 || g.wstart.IsZero() || g.wstart.Equal(w.start)) {
			hourly += g.units
		}
		// One lent in the month before is that month's (settle).
		if g.monthly && g.kind == k && g.month == a.month {
			monthly += g.units
		}
	}
	return hourly, monthly
}

// dropLapsed lets go of the slices kept past their time.
func (a *account) dropLapsed(now time.Time) {
	if len(a.grants) == 0 {
		return
	}
	keep := a.grants[:0]
	for _, g := range a.grants {
		if now.Before(g.until) {
			keep = append(keep, g)
		}
	}
	clear(a.grants[len(keep):])
	a.grants = keep
}

// settle applies a holder's report: what it used of a slice joins the
// counts (in memory only: the holder persisted it as its own share), and
// the slice's reservation ends.
func (a *account) settle(l *Lease, d *storage.UsageDelta, warn func(Warning)) {
	r := &l.Report
	if r.Seq == 0 {
		return
	}
	used := min(r.Used, 1<<40)
	if !r.SameClaim {
		// Lent under another claim: monthly and totals are in the shares
		// this owner loaded; only the hourly use is news. Nothing of it
		// is reserved here: a slice of this owner's with the same number
		// (each owner numbers its own) is another, and stays lent.
		if l.Hourly && used > 0 {
			if w := a.win(l.Bucket, l.Now); w.n > 0 && (r.Until.IsZero() || r.Until.After(w.start)) {
				w.n += used
			}
		}
		return
	}
	g, ok := a.release(l.Holder, r.Seq)
	if !ok || used <= 0 {
		return // settled already, kept past its time and let go, or unused
	}
	used = min(used, g.units)
	if g.hourly {
		w := a.win(g.bucket, l.Now)
		switch {
		case w.n == 0 && g.wstart.IsZero():
			// Lent with no window running: its uses opened one.
			w.start, w.n = l.Now, used
		case w.n == 0:
			// The window the slice was lent in has ended (a slice ends
			// with it): its uses counted there, and open no new one.
		case g.wstart.IsZero() || g.wstart.Equal(w.start):
			w.n += used
		}
	}
	if g.monthly && g.month == a.month {
		// A slice lent in the month before (lend stops lending For before
		// a month's end, but its report comes up to a pass and a round
		// trip after its time) was used in that month: its units are in
		// the holder's share of that month, and the counts are this
		// month's. Its totals count all the same.
		p := &a.counts.Used
		if g.kind == Lookup {
			p = &a.counts.Lookups
		}
		*p += used
		a.warnMonthly(g.kind, g.bucket, l.Limits.monthlyFor(g.kind), *p, l.Now, d, warn)
	}
	if g.total {
		a.totals.Evaluations += used
	}
}

// release ends the slice seq lent to holder, answering it.
func (a *account) release(holder string, seq uint64) (grant, bool) {
	for i, g := range a.grants {
		if g.seq == seq && g.holder == holder {
			a.grants = append(a.grants[:i], a.grants[i+1:]...)
			return g, true
		}
	}
	return grant{}, false
}

// lend settles l's report, then lends a slice of what remains: at most
// remaining / (2 × Members) of each limit the charges count toward, after
// the slices already out. The delta holds the monthly warnings the report
// crossed (the counts themselves are the holder's to store).
func (a *account) lend(l *Lease, warn func(Warning)) (LeaseGrant, storage.UsageDelta) {
	d := storage.UsageDelta{Account: a.id, Month: a.month}
	// The holder's limits are of its last charge, on its clock: the
	// report's warnings and the slice take those of the owner's now, as a
	// charge does.
	l.Limits = l.Limits.At(l.Now)
	a.settle(l, &d, warn)
	lim := &l.Limits
	w := a.win(l.Bucket, l.Now)
	oh, om := a.lent(l.Bucket, l.Kind, l.Now)
	monthly := lim.monthlyFor(l.Kind)
	used := a.counts.Used
	if l.Kind == Lookup {
		used = a.counts.Lookups
	}
	var g LeaseGrant
	switch {
	case l.Hourly && lim.Hourly != NoLimit:
		g.Capped, g.Limit, g.Remaining = true, lim.Hourly, max(lim.Hourly-w.n-oh, 0)
		end := l.Now.Add(Window)
		if w.n > 0 {
			end = w.end()
		}
		g.Reset = unixCeil(end)
	case l.Monthly && monthly != NoLimit:
		g.Capped, g.Limit, g.Remaining = true, monthly, max(monthly-used-om, 0)
		g.Reset = a.month.End().Unix()
	}
	if l.Want <= 0 {
		return g, d
	}
	if l.Hourly && w.n > 0 && w.end().Sub(l.Now) < l.For {
		// The holder uses a slice for For after it asked, whatever the
		// window does: units it used after the window ended would count
		// in no window (the next starts afresh here, and the report's
		// hour is the old one's). Nothing is lent until the window ends.
		return g, d
	}
	if l.Monthly && a.month.End().Sub(l.Now) < l.For {
		// Likewise at the month's end, for any monthly count (it is
		// billed even without a cap): units used in the next month are
		// stored in the holder's share of it, which that month's load
		// reads, and the report would add them a second time.
		return g, d
	}
	units := l.Want
	parts := 2 * int64(max(l.Members, 1))
	if l.Hourly && lim.Hourly != NoLimit {
		units = min(units, max(lim.Hourly-w.n-oh, 0)/parts)
	}
	if l.Monthly && monthly != NoLimit {
		units = min(units, max(monthly-used-om, 0)/parts)
	}
	if units <= 0 {
		return g, d
	}
	g.Seq, g.Units = leaseSeq.Add(1), units
	keep := max(l.Keep, l.For)
	if l.Hourly && w.n > 0 {
		// A slice ends with the window it was lent in.
		keep = min(keep, w.end().Sub(l.Now))
	}
	a.grants = append(a.grants, grant{
		holder: l.Holder, seq: g.Seq, bucket: l.Bucket, kind: l.Kind,
		hourly: l.Hourly, monthly: l.Monthly, total: l.Total,
		units: units, wstart: w.start, month: a.month, until: l.Now.Add(keep),
	})
	if w.n == 0 {
		a.grants[len(a.grants)-1].wstart = time.Time{}
	}
	return g, d
}
