package quota

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/storage"
)

// newCommitter returns the group committer shared by all quota shards: it
// writes every delta queued since its last commit as one batch (synced or
// not, as the store's Durability says), then answers the charges that
// waited for them. On failure each waiting charge
// gets ErrUnavailable and its shard is told to undo the increment, so the
// shard's memory stays "stored + in flight". A charge answered ahead of its
// commit (AheadStore) was served: it stays counted in memory, so the limits
// stay exact while the process runs, and its increment is lost to the
// store as a crash would lose it. failed stays set from a failed group to
// the next that succeeds, and the charges made meanwhile wait for their
// commit: a failing store loses the charges answered ahead until its
// first failure is known (that group's, and those queued while it ran; a
// lingering group is applied at the latest at the next group sync).
//
// The units such a lost increment counted are kept in a ledger (lostLedger)
// for a while: a refund of that charge gives the unit back in memory, where
// it was counted, but must not take it from the store, which never got it.
// The ledger lives on the committer's goroutine, which sees every increment
// and refund in the order they were queued, so a refund that arrives while
// its charge's batch is still queued is matched once that batch failed.
// An account loaded from the store again while the ledger holds its units
// (a shard restart, an eviction) counts them in memory as before
// (lostBook.owed), so memory stays "stored + in flight + lost" for the
// refund that takes one out of memory and not from the store.
func newCommitter(root *actor.RootContext, store Store, cfg actors.GroupConfig, log *slog.Logger, failed *atomic.Bool, book *lostBook) *actors.GroupCommitter[pending] {
	var deltas []storage.UsageDelta
	lost := book.ledger
	var taken []lostTake
	var pruneAt time.Time
	apply := func(ps []pending) error {
		deltas = deltas[:0]
		taken = taken[:0]
		// Only this goroutine changes the ledger, so it reads it unlocked;
		// it changes it under book.mu, for the shards' loads.
		if len(lost) > 0 {
			if now := time.Now(); now.After(pruneAt) {
				book.mu.Lock()
				lost.prune(now)
				book.unlock()
				pruneAt = now.Add(lostKeep)
			}
		}
		for i := range ps {
			d := ps[i].delta
			if ps[i].refund && len(lost) > 0 {
				book.mu.Lock()
				taken = lost.offset(&d, taken)
				book.unlock()
			}
			deltas = append(deltas, d)
		}
		err := store.ApplyUsage(deltas)
		clear(deltas) // drop account strings for the GC
		if err != nil && len(taken) > 0 {
			// The refunds did not happen: what they took from the
			// ledger is lost to the store still.
			book.mu.Lock()
			lost.restore(taken)
			book.unlock()
		}
		clear(taken)
		return err
	}
	done := func(ps []pending, err error) {
		if err == nil {
			if failed.Load() {
				failed.Store(false)
			}
			for i := range ps {
				p := &ps[i]
				p.ent.inflight.Add(-1)
				if p.call != nil {
					p.call.Charged(p.res, nil)
				}
			}
			return
		}
		failed.Store(true)
		ahead := 0
		now := time.Now()
		book.mu.Lock()
		for i := range ps {
			if ps[i].ahead {
				ahead++
				if ps[i].refundable {
					lost.add(&ps[i].delta, now)
				}
			}
		}
		book.unlock()
		log.Error("quota: usage not stored; charges refused with 503 until the store takes writes again", "deltas", len(ps),
			"answered_ahead", ahead, "err", err)
		err = fmt.Errorf("%w: %w", ErrUnavailable, err)
		for i := range ps {
			p := ps[i]
			if p.ahead {
				if p.delta.Counts.Warned != 0 || p.delta.Totals.HourWarned != [2]int64{} {
					// Before the inflight count drops: the account stays
					// until its shard has the bits.
					root.Send(p.shard, &unstoredWarned{p: p})
				}
				p.ent.inflight.Add(-1)
				continue
			}
			call := p.call
			p.call = nil
			// Undo first: the rollback is in the shard's mailbox before the
			// caller can send its next message there.
			root.Send(p.shard, &rollback{p: p})
			if call != nil {
				call.Charged(ChargeResult{}, err)
			}
		}
	}
	return actors.NewGroupCommitter(cfg, apply, done)
}

// lostKeep is how long the committer remembers an increment answered ahead
// whose batch failed, for its refund: a refund comes while the caller's
// node still remembers the call (cluster/rpc's call book: at most 30 s).
const lostKeep = 5 * time.Minute

// lostAt is where, within an account, a lost increment counted: its month
// and, for a charge that counts toward the month, its day (the delta's
// Day; 0 else).
type lostAt struct {
	month storage.Month
	day   storage.Day
}

// lostUnits is what lost increments counted under one lostAt and never
// stored, and when the last of them was lost.
type lostUnits struct {
	used, lookups, evaluations int64
	at                         time.Time
}

// lostLedger is the committer's record of lost increments (newCommitter),
// by account. Units are matched by account and lostAt, not by call: any
// refund of those calls may take a lost one, which leaves the store's
// counts, month's and day's, exactly what they would be had the refunded
// call been the lost one.
type lostLedger map[string]map[lostAt]lostUnits

// lostBook shares the ledger between the committer, which alone changes
// it (under mu), and the shards, which read an account's units when they
// load it (owed).
type lostBook struct {
	mu     sync.Mutex
	ledger lostLedger
	// accounts is len(ledger), for a load to skip the lock while it is 0.
	accounts atomic.Int64
}

func newLostBook() *lostBook { return &lostBook{ledger: lostLedger{}} }

// unlock ends a change of the committer's, keeping accounts up to date.
func (b *lostBook) unlock() {
	b.accounts.Store(int64(len(b.ledger)))
	b.mu.Unlock()
}

// holds reports whether the ledger has units of account id: its load
// must then settle the committer first, so that the store and the ledger
// it reads agree (no refund or failing batch of id in between).
func (b *lostBook) holds(id string) bool {
	if b == nil || b.accounts.Load() == 0 {
		return false
	}
	b.mu.Lock()
	_, ok := b.ledger[id]
	b.mu.Unlock()
	return ok
}

// owed is what the ledger holds of account id: month m's counts and the
// evaluations of every month. A load from the store adds them to what it
// read, as memory held them before (a lost increment stays counted while
// the process runs), so that a refund that takes one out of memory, and
// not from the store (offset), leaves memory where the store is.
func (b *lostBook) owed(id string, m storage.Month) (c storage.MonthCounts, evaluations int64) {
	if b == nil || b.accounts.Load() == 0 {
		return c, 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for at, u := range b.ledger[id] {
		if at.month == m {
			c.Used += u.used
			c.Lookups += u.lookups
		}
		evaluations += u.evaluations
	}
	return c, evaluations
}

// lostTake is what one refund took from the ledger, to put back should its
// batch fail.
type lostTake struct {
	account string
	at      lostAt
	units   lostUnits
}

func lostAtOf(d *storage.UsageDelta) lostAt { return lostAt{month: d.Month, day: d.Day} }

// add records charge delta d as lost to the store.
func (l lostLedger) add(d *storage.UsageDelta, now time.Time) {
	u := l.get(d.Account, lostAtOf(d))
	u.used += max(d.Counts.Used, 0)
	u.lookups += max(d.Counts.Lookups, 0)
	u.evaluations += max(d.Totals.Evaluations, 0)
	u.at = now
	l.set(d.Account, lostAtOf(d), u)
}

// offset takes from refund delta d (negative counts) the units the ledger
// holds for its account and lostAt: they were never stored, so the store
// must not lose them. It appends what it took to taken.
func (l lostLedger) offset(d *storage.UsageDelta, taken []lostTake) []lostTake {
	k := lostAtOf(d)
	u, ok := l[d.Account][k]
	if !ok {
		return taken
	}
	t := lostUnits{
		used:        min(-min(d.Counts.Used, 0), u.used),
		lookups:     min(-min(d.Counts.Lookups, 0), u.lookups),
		evaluations: min(-min(d.Totals.Evaluations, 0), u.evaluations),
	}
	if t.used == 0 && t.lookups == 0 && t.evaluations == 0 {
		return taken
	}
	d.Counts.Used += t.used
	d.Counts.Lookups += t.lookups
	d.Totals.Evaluations += t.evaluations
	u.used -= t.used
	u.lookups -= t.lookups
	u.evaluations -= t.evaluations
	l.set(d.Account, k, u)
	t.at = u.at
	return append(taken, lostTake{account: d.Account, at: k, units: t})
}

// restore puts back what offset took for refunds whose batch failed.
func (l lostLedger) restore(taken []lostTake) {
	for _, t := range taken {
		u := l.get(t.account, t.at)
		u.used += t.units.used
		u.lookups += t.units.lookups
		u.evaluations += t.units.evaluations
		if t.units.at.After(u.at) {
			u.at = t.units.at
		}
		l.set(t.account, t.at, u)
	}
}

// prune forgets what was lost more than lostKeep ago: no refund comes for
// it any more.
func (l lostLedger) prune(now time.Time) {
	for id, m := range l {
		for k, u := range m {
			if now.Sub(u.at) > lostKeep {
				delete(m, k)
			}
		}
		if len(m) == 0 {
			delete(l, id)
		}
	}
}

func (l lostLedger) get(id string, k lostAt) lostUnits { return l[id][k] }

// set stores u, or forgets k when u holds nothing.
func (l lostLedger) set(id string, k lostAt, u lostUnits) {
	m := l[id]
	if u.used == 0 && u.lookups == 0 && u.evaluations == 0 {
		if m != nil {
			delete(m, k)
			if len(m) == 0 {
				delete(l, id)
			}
		}
		return
	}
	if m == nil {
		m = make(map[lostAt]lostUnits, 1)
		l[id] = m
	}
	m[k] = u
}
