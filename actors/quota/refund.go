package quota

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/storage"
)

// A refund undoes a charge whose answer never reached the one who asked:
// a cluster member's call that broke after it was sent, which the caller
// answered 503 (SPEC §7: nothing evaluated, no quota used). The owner that
// charged it learns so from the caller and gives back what the charge
// took, so the call is not counted.

// Refund is one charge to undo: the Charge as the shard ran it (its Now
// is the owner's stamp) and the answer it gave.
type Refund struct {
	Charge Charge
	Result ChargeResult
	// HourEnds is the Unix second the hourly window the charge counted in
	// ends, when the caller kept it (the answer's reset under an hourly
	// cap; Result's own is read when it has one); zero: the window running
	// at the charge's stamp is taken.
	HourEnds int64
}

type refundCall = actors.Call[Refund, ChargeResult]

// HourEndsOf is when the hourly window that charge c counted in ends, Unix
// seconds, as its answer r says it: its reset when an hourly cap set it;
// zero otherwise (Refund.HourEnds).
func HourEndsOf(c *Charge, r *ChargeResult) int64 {
	if r.Capped && c.Limits.Hourly != NoLimit {
		return r.Reset
	}
	return 0
}

// hourEnds is HourEnds, or HourEndsOf the refund's charge and answer.
func (r *Refund) hourEnds() int64 {
	if r.HourEnds != 0 {
		return r.HourEnds
	}
	return HourEndsOf(&r.Charge, &r.Result)
}

// countedDelta is what an allowed charge stores: the month's count and the
// day's when it counts toward the month, the total when it counts there.
func countedDelta(c *Charge) storage.UsageDelta {
	d := storage.UsageDelta{Account: c.Account, Month: storage.MonthOf(c.Now)}
	if c.Monthly {
		d.Day = storage.DayOf(c.Now)
		if c.Kind == Lookup {
			d.Counts.Lookups = 1
		} else {
			d.Counts.Used = 1
		}
	}
	if c.Total {
		d.Totals.Evaluations = 1
	}
	return d
}

// Taken is what r's charge took and stored: countedDelta when allowed, the
// limit hit of a refusal.
func (r *Refund) Taken() storage.UsageDelta {
	if r.Result.Allowed {
		return countedDelta(&r.Charge)
	}
	d := storage.UsageDelta{Account: r.Charge.Account, Month: storage.MonthOf(r.Charge.Now)}
	if r.Result.Refusal != NotRefused {
		d.Totals.LimitHits = 1
	}
	return d
}

// negated is d with its counts the other way (Warned aside: a warning sent
// stays sent).
func negated(d storage.UsageDelta) storage.UsageDelta {
	d.Counts = storage.MonthCounts{Used: -d.Counts.Used, Lookups: -d.Counts.Lookups}
	d.Totals = storage.Totals{Evaluations: -d.Totals.Evaluations, LimitHits: -d.Totals.LimitHits}
	return d
}

// Refund undoes r in one hop to the account's shard: the account's counts
// in memory when it is loaded (and its hourly request, while the window
// the charge used still runs), and the stored ones with a negative delta,
// committed as a charge's increment is. Lent charges are never refunded
// (their holder stores them; nothing reaches an owner to undo). An error
// means nothing was undone.
func (c *Client) Refund(r Refund) error {
	if c.stopped.Load() {
		return ErrStopped
	}
	if r.Charge.Lent {
		return nil
	}
	call := c.refunds.Get(r)
	c.shards.Send(actors.HashString(r.Charge.Account), call)
	_, err := c.refunds.Wait(call)
	return err
}

func (s shard) refund(ctx actor.Context, r *Refund, call charged) {
	took := r.Taken()
	c := &r.Charge
	p := pending{call: call, ent: s.lent, delta: negated(took), bucket: c.Bucket, refund: true}
	if a, ok := s.accounts.Get(c.Account); ok {
		// Loaded: memory is "stored + in flight", so it gives back now
		// what the store will. An account not in memory loads the stored
		// counts, the refund included, on its next touch.
		a.rollback(&took, c.Bucket, false, time.Time{})
		// The hourly request, while the window the charge counted in runs:
		// the one its answer's reset names when an hourly cap set it (a
		// window that began within Stagger after the charge's stamp is
		// another when the charge counted in the one before); else the one
		// running at its stamp (a charge stamped up to Stagger before a
		// window's start counts in it).
		w := &a.hour[c.Bucket&1]
		counted := !w.start.After(c.Now.Add(Stagger))
		if ends := r.hourEnds(); ends != 0 {
			counted = ends == unixCeil(w.end())
		}
		if r.Result.Allowed && c.Hourly && w.n > 0 && !w.over(c.Now) && counted {
			w.n--
			p.unhour, p.wstart = true, w.start
		}
		p.ent = a
	}
	if s.commit == nil || (took.Counts == storage.MonthCounts{} && took.Totals == storage.Totals{}) {
		call.Charged(ChargeResult{}, nil)
		return
	}
	if p.ent == nil {
		s.lent = &account{}
		p.ent = s.lent
	}
	// A failed commit rolls the negative delta back, and the hourly
	// request with it: the refund did not happen, in memory either.
	s.persist(ctx, p)
}

// Discount takes a call another cluster member gave back out of one load
// of an account: the member's share, read for that load, held the call,
// and the member refunded it afterwards (its own store has the negative
// delta; this node's memory, which summed the share once, does not). Taken
// is Refund.Taken of the call. Memory only, and only while the load named
// by Tag is held and summed From's share: a later load read the share
// without the call.
type Discount struct {
	Account string
	From    string
	Tag     uint64
	Taken   storage.UsageDelta
	// Hourly: the call took an hourly request in Bucket at At (the
	// refunding member's stamp), which a window resumed from the load
	// gives back while it runs.
	Hourly bool
	Bucket Bucket
	At     time.Time
}

// Discount applies d in one hop to the account's shard; true when the load
// was held and the call taken out of it. The month's count comes out when
// the month's counts came from that load, the totals when the account was
// first loaded by it. An hourly request comes out of the bucket's window
// only when that window was resumed from that first load (the member
// handed it over with the call in it) and had started by the call's stamp;
// a window this node opened itself never held the call.
func (c *Client) Discount(d Discount) (bool, error) {
	if c.stopped.Load() {
		return false, ErrStopped
	}
	if d.Tag == 0 {
		return false, nil
	}
	call := c.discounts.Get(d)
	c.shards.Send(actors.HashString(d.Account), call)
	return c.discounts.Wait(call)
}

func (s shard) discount(d *Discount) bool {
	a, ok := s.accounts.Get(d.Account)
	if !ok || a.loads == nil {
		return false
	}
	l := a.loads
	applied := false
	if l.monthly.holds(d.Tag, d.From) && d.Taken.Month == a.month {
		a.counts.Used = max(a.counts.Used-d.Taken.Counts.Used, 0)
		a.counts.Lookups = max(a.counts.Lookups-d.Taken.Counts.Lookups, 0)
		applied = true
	}
	if !l.first.holds(d.Tag, d.From) {
		return applied
	}
	a.totals.Evaluations = max(a.totals.Evaluations-d.Taken.Totals.Evaluations, 0)
	a.totals.LimitHits = max(a.totals.LimitHits-d.Taken.Totals.LimitHits, 0)
	b := d.Bucket & 1
	if w := &a.hour[b]; d.Hourly && w.n > 0 && !l.resumed[b].IsZero() && w.start.Equal(l.resumed[b]) && !w.start.After(d.At) && !w.over(d.At) {
		w.n--
	}
	return true
}
