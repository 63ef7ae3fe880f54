package rpc

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fraudd/fraudd/actors/checks"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/cluster"
)

// The holder's half of allowance leases (docs/cluster.md, "Hot accounts";
// the owner's half is actors/quota/lease.go). A node that sends more than
// LeaseAfter charges a second for one account to its owner asks the owner
// for a slice of the account's remaining allowance, and charges the slice
// locally: no hop, its own store holding the count as its share. Before
// the slice runs out, or half its time has passed, the node reports what
// it used and asks for the next in one Lease call, off the request path
// (one goroutine per node does every lease call). A slice is used only
// while the view names the claim that lent it; when another node loads
// the account (its Shares request), the node stops using it and waits for
// the charges in flight to be counted by its quota actors, then for their
// increments to be committed (Server.flush), before it answers, so
// a new owner's G-counter read holds every unit used and none is used
// after it.

// DefaultLeaseFor is how long a slice may be used when QuotaConfig.LeaseFor
// is zero.
const DefaultLeaseFor = time.Second

// leaseKeep is how long, in slices' time, the owner keeps a slice
// reserved for a holder that does not report.
const leaseKeep = 3

// maxFreeze bounds Freeze's wait for charges in flight.
const maxFreeze = 200 * time.Millisecond

// maxSlice bounds what a holder asks for at once.
const maxSlice = 1 << 20

// leaseKey is one account and the kind of charge a slice is for.
type leaseKey struct {
	account string
	bucket  quota.Bucket
	kind    quota.Kind
	flags   uint8 // 1: hourly, 2: monthly, 4: total
}

func keyOf(c *quota.Charge) leaseKey {
	k := leaseKey{account: c.Account, bucket: c.Bucket, kind: c.Kind}
	if c.Hourly {
		k.flags |= 1
	}
	if c.Monthly {
		k.flags |= 2
	}
	if c.Total {
		k.flags |= 4
	}
	return k
}

// slice is a lent slice as its holder uses it.
type slice struct {
	token       int64 // the claim it was lent under
	seq         uint64
	units, used int64
	// inflight counts the charges taken from it and not yet settled.
	inflight int64
	until    time.Time // on this node's clock: the request's send time + For
	renewAt  time.Time
	res      quota.ChargeResult // headers as of the grant; Remaining before any use
}

// report is a slice no longer used, to be settled at the owner.
type report struct {
	token int64
	seq   uint64
	used  int64
	// inflight counts the slice's charges not yet settled, closed when
	// the slice was: the report waits for them, so that one that fails
	// still gives its unit back before the owner counts it — a slice's
	// time at most: closed by the end of its time, reported within two,
	// inside the owner's leaseKeep (three), past which it lets the slice
	// go and a report counts nothing in its memory.
	inflight int64
	closed   time.Time
	// until is when its use ended (its time, or its close before that):
	// a new owner counts the use of an earlier claim's slice only in the
	// hourly window it falls in.
	until time.Time
}

// sliceRef names the slice a charge was taken from: the claim it was lent
// under and the owner's number for it (two owners may number alike).
type sliceRef struct {
	token int64
	seq   uint64
}

type leaseEntry struct {
	key    leaseKey
	limits quota.Limits
	cur    slice // seq zero: none
	done   []report
	// inflight counts leased charges not yet stored (or failed).
	inflight atomic.Int32
	asking   bool
	// freezes counts the Freezes of the entry: a slice whose Lease call
	// was under way when one came is not used (call).
	freezes uint64
	// quiet: no request before then (the owner had nothing to lend).
	quiet time.Time
	// demand counts charges since demandFrom (a second at most); rate is
	// the previous second's count.
	demand, rate int64
	demandFrom   time.Time
	lastUse      time.Time
	// history: an evaluation charged under the key since the last call
	// that asked for a slice read the customer's device history (an event
	// or an observation): the next such call begins the account's mirror.
	history bool
}

// leases is a node's table of slices it holds, and the goroutine that asks
// for them and reports them.
type leases struct {
	q     *Quota
	after int64
	dur   time.Duration
	kick  chan struct{}
	mu    sync.Mutex
	m     map[leaseKey]*leaseEntry

	charged atomic.Int64 // charges served from slices
	calls   atomic.Int64 // Lease calls to other members
}

func newLeases(q *Quota, after int64, dur time.Duration) *leases {
	return &leases{q: q, after: after, dur: dur, kick: make(chan struct{}, 1), m: map[leaseKey]*leaseEntry{}}
}

func (ls *leases) wake() {
	select {
	case ls.kick <- struct{}{}:
	default:
	}
}

// take uses one unit of a slice for c, lent under token (the owner's claim
// in this node's view), answering the entry and the result to give; false
// when there is no usable slice, in which case the charge goes to the
// owner and counts toward asking for one.
func (ls *leases) take(c *quota.Charge, token int64, history bool) (*leaseEntry, sliceRef, quota.ChargeResult, bool) {
	k := keyOf(c)
	now := time.Now()
	ls.mu.Lock()
	defer ls.mu.Unlock()
	e := ls.m[k]
	if e == nil {
		e = &leaseEntry{key: k, demandFrom: now}
		ls.m[k] = e
	}
	e.limits, e.lastUse = c.Limits, now
	e.history = e.history || history
	if d := now.Sub(e.demandFrom); d >= time.Second {
		e.rate = e.demand
		if d >= 2*time.Second {
			e.rate = 0
		}
		e.demand, e.demandFrom = 0, now
	}
	e.demand++
	s := &e.cur
	if s.seq != 0 && s.token == token && now.Before(s.until) && s.used < s.units {
		s.used++
		s.inflight++
		e.inflight.Add(1)
		r := s.res
		r.Remaining = max(r.Remaining-s.used, 0)
		if !e.asking && (s.used*2 >= s.units || !now.Before(s.renewAt)) && !now.Before(e.quiet) {
			ls.wake() // for the next slice (pass)
		}
		return e, sliceRef{s.token, s.seq}, r, true
	}
	if !e.asking && (e.demand >= ls.after || s.seq != 0) {
		ls.wake()
	}
	return nil, sliceRef{}, quota.ChargeResult{}, false
}

// settle ends one leased charge, taken from the slice ref: stored, or
// failed (its unit is not reported as used). A failure after the slice's
// report went out (a slice's time after it closed) is counted by the owner all the same:
// strict by one unit, and rare.
func (ls *leases) settle(e *leaseEntry, ref sliceRef, failed bool) {
	wake := false
	ls.mu.Lock()
	if s := &e.cur; s.seq == ref.seq && s.token == ref.token {
		s.inflight--
		if failed && s.used > 0 {
			s.used--
		}
	} else {
		for i := range e.done {
			if r := &e.done[i]; r.seq == ref.seq && r.token == ref.token {
				r.inflight--
				if failed && r.used > 0 {
					r.used--
				}
				wake = i == 0 && r.inflight == 0
				break
			}
		}
	}
	ls.mu.Unlock()
	if !failed {
		ls.charged.Add(1)
	}
	e.inflight.Add(-1)
	if wake {
		ls.wake() // its report may go now
	}
}

// closeLocked stops using e's slice: it is reported on the next pass.
func (e *leaseEntry) closeLocked() {
	if e.cur.seq != 0 {
		now := time.Now()
		until := e.cur.until
		if now.Before(until) {
			until = now
		}
		e.done = append(e.done, report{token: e.cur.token, seq: e.cur.seq, used: e.cur.used, inflight: e.cur.inflight, closed: now, until: until})
		e.cur = slice{}
	}
}

// Freeze stops this node using any slice of account's and waits, within
// ctx, until the charges made from them are settled: counted by the quota
// actors, their increments queued for the store or (when not answered
// ahead) committed. Another node is loading the account (Shares), and the
// share it reads must hold every unit used and none be used after it:
// Shares then waits for the queued increments (Server.flush).
func (ls *leases) Freeze(ctx context.Context, account string) {
	var held []*leaseEntry
	ls.mu.Lock()
	for k, e := range ls.m {
		if k.account != account {
			continue
		}
		e.closeLocked()
		e.freezes++
		if e.inflight.Load() > 0 {
			held = append(held, e)
		}
	}
	ls.mu.Unlock()
	if len(held) > 0 {
		ls.wake()
	}
	// Bounded below the caller's deadline: a charge stuck behind a quota
	// shard that is itself loading an account (asking this node's peers)
	// must not hold the loader past its deadline. A charge still in flight
	// past it is missing from this share: the count errs permissive.
	ctx, cancel := context.WithTimeout(ctx, maxFreeze)
	defer cancel()
	for _, e := range held {
		for e.inflight.Load() > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Millisecond):
			}
		}
	}
}

// leaseJob is one Lease call: a report, a request, or both.
type leaseJob struct {
	e      *leaseEntry
	key    leaseKey
	limits quota.Limits
	rep    report
	want   int64
	// freezes is the entry's as the call was decided.
	freezes uint64
	history bool
}

// run asks and reports until the client closes: on every kick (a slice
// used half, a key past LeaseAfter) and every eighth of a slice's time.
func (ls *leases) run() {
	t := time.NewTicker(ls.dur / 8)
	defer t.Stop()
	for {
		select {
		case <-ls.q.done:
			return
		case <-t.C:
		case <-ls.kick:
		}
		for _, j := range ls.pass(time.Now()) {
			ls.call(j)
		}
	}
}

// pass decides the calls to make now: a slice lent under a claim the view
// no longer names, spent, or past its time, is reported (with a request
// for the next while the key is busy); a busy key whose slice is half used
// or half through its time asks for the next while it goes on using this
// one, which is reported once the next arrives (call), so a steady load
// never finds itself without a slice while the call is under way; a busy
// key without a slice asks for one; keys idle for a while are forgotten.
func (ls *leases) pass(now time.Time) []leaseJob {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	var jobs []leaseJob
	for k, e := range ls.m {
		if e.asking {
			continue
		}
		_, token, _ := ls.q.cfg.Owners.Owner(cluster.ShardOf(cluster.KindAccount, k.account))
		s := &e.cur
		renew := false
		switch {
		case s.seq == 0:
		case s.token != token || s.used >= s.units || !now.Before(s.until):
			e.closeLocked()
		case s.used*2 >= s.units || !now.Before(s.renewAt):
			renew = true
		}
		if now.Sub(e.demandFrom) >= 2*time.Second {
			e.demand, e.rate = 0, 0
		}
		// Leased charges count as demand too: a key stays busy while it
		// is charged at the rate that earned it a slice.
		busy := e.demand >= ls.after || e.rate >= ls.after
		if renew && !busy {
			// Nobody needs the next: this one ends now.
			e.closeLocked()
			renew = false
		}
		switch {
		case len(e.done) > 0 && (e.done[0].inflight <= 0 || now.Sub(e.done[0].closed) >= ls.dur):
			// A closed slice's report, once the charges taken from it
			// settled (or it waited a slice's time for them).
			j := leaseJob{e: e, key: k, limits: e.limits, rep: e.done[0], freezes: e.freezes}
			e.done = e.done[1:]
			if busy && (e.cur.seq == 0 || renew && !now.Before(e.quiet)) {
				j.want, j.history, e.history = ls.want(e), e.history, false
			}
			e.asking = true
			jobs = append(jobs, j)
		case (e.cur.seq == 0 || renew) && busy && !now.Before(e.quiet):
			e.asking = true
			jobs = append(jobs, leaseJob{e: e, key: k, limits: e.limits, want: ls.want(e), freezes: e.freezes, history: e.history})
			e.history = false
		case e.cur.seq == 0 && now.Sub(e.lastUse) > 10*ls.dur && e.inflight.Load() == 0:
			delete(ls.m, k)
		}
	}
	return jobs
}

// want is twice the units the key used in a slice's time at its rate.
func (ls *leases) want(e *leaseEntry) int64 {
	rate := max(e.rate, e.demand, ls.after)
	return min(max(2*rate*int64(ls.dur)/int64(time.Second), 2), maxSlice)
}

// call makes one Lease call at the account's owner (this node's own quota
// actors when it owns the account now: a report still has to be settled)
// and installs the slice lent.
func (ls *leases) call(j leaseJob) {
	q := ls.q
	sent := time.Now()
	l := quota.Lease{
		Account: j.key.account, Holder: q.cfg.Owners.Self(), Bucket: j.key.bucket, Kind: j.key.kind,
		Hourly: j.key.flags&1 != 0, Monthly: j.key.flags&2 != 0, Total: j.key.flags&4 != 0,
		Limits: j.limits, For: ls.dur, Keep: leaseKeep * ls.dur, Want: j.want,
		Report: quota.LeaseReport{Seq: j.rep.seq, Used: j.rep.used, Until: j.rep.until},
	}
	if j.want > 0 && j.history {
		// Asking for a slice for evaluations that read the device
		// history: the account's mirror begins with the call, so its
		// records come about when the slice does. (Only for those: a
		// watch costs the owner a walk of the account's history shard,
		// and a mirror no evaluation uses is dropped after mirrorIdle,
		// so every renewal would pay it again.)
		q.watchLeased(l.Account)
	}
	type lent struct {
		g     quota.LeaseGrant
		token int64
	}
	got, err := route(q, &ls.calls, l.Account,
		func() (lent, error) {
			// This node owns the account now: settle the report, lend
			// nothing (its own charges need no slice).
			token, err := q.cfg.Owners.Held(cluster.ShardOf(cluster.KindAccount, l.Account))
			if err != nil {
				return lent{}, err
			}
			l.Want, l.Now, l.Members = 0, q.cfg.Now(), len(q.cfg.Owners.Members())
			l.Report.SameClaim = j.rep.token == token
			g, err := q.cfg.Local.Lease(l)
			return lent{g, token}, err
		},
		func(ctx context.Context, cli NodeClient, token int64) (lent, int64, error) {
			rep, err := cli.Lease(ctx, leaseMsg(&l, token, j.rep.token))
			if err != nil {
				return lent{}, 0, err
			}
			g, err := leaseGrantOf(rep)
			return lent{g, rep.Token}, rep.Token, err
		})
	ls.mu.Lock()
	defer ls.mu.Unlock()
	j.e.asking = false
	if err != nil {
		j.e.quiet = sent.Add(ls.dur / 2)
		// The report is lost to the owner's memory (the units are in this
		// node's share, counted when the account loads again; the owner
		// lets the slice go after its Keep): permissive, never strict.
		q.log.Debug("cluster: allowance lease call failed", "account", l.Account, "err", err)
		return
	}
	if j.want > 0 && got.g.Units == 0 {
		// Nothing to lend (the account is at its cap, or near it): charge
		// through the owner for a while before asking again.
		j.e.quiet = sent.Add(ls.dur / 2)
	}
	switch {
	case got.g.Units > 0 && j.e.freezes != j.freezes:
		// A member read this node's share of the account while the call
		// was under way (Freeze): its read holds none of this slice, and
		// a new owner that read it never reserved the slice, so a unit
		// used from it would count nowhere. It goes back unused.
		j.e.done = append(j.e.done, report{token: got.token, seq: got.g.Seq})
	case got.g.Units > 0:
		// The slice still in use while the call was under way (a renewal)
		// ends here: reported on the next pass, the new one taking over.
		j.e.closeLocked()
		j.e.cur = slice{
			token: got.token, seq: got.g.Seq, units: got.g.Units,
			until: sent.Add(ls.dur), renewAt: sent.Add(ls.dur / 2),
			res: quota.ChargeResult{Allowed: true, Capped: got.g.Capped, Limit: got.g.Limit, Remaining: got.g.Remaining, Reset: got.g.Reset},
		}
	}
	if len(j.e.done) > 0 {
		ls.wake()
	}
}

// leasedStep is a chained charge served from a slice: the local quota
// actors store it as this node's share (quota.Charge.Lent: the slice was
// the check), and the caller gets the slice's headers.
type leasedStep struct {
	ls    *leases
	inner quota.ChargeStep
	// rest is inner's owner step when the rest of the evaluation goes to
	// the owner after the charge (leasedrest.go); nil: it goes on here.
	rest checks.OwnerStep
	// here is inner's owner step when the rest goes on here and a mirror
	// of the owner's history may answer it instead (mirror.go).
	here checks.OwnerStep
	e    *leaseEntry
	ref  sliceRef
	res  quota.ChargeResult
	c    quota.Charge
}

var leasedSteps = sync.Pool{New: func() any { return new(leasedStep) }}

func (s *leasedStep) ChargeReq() *quota.Charge { return &s.c }

func (s *leasedStep) Charged(_ quota.ChargeResult, err error) {
	inner, res, rest, here, q := s.inner, s.res, s.rest, s.here, s.ls.q
	s.ls.settle(s.e, s.ref, err != nil)
	*s = leasedStep{}
	leasedSteps.Put(s)
	switch {
	case err != nil:
		inner.Charged(quota.ChargeResult{}, err)
	case rest != nil:
		if !q.tryMirror(rest, res) {
			q.sendRest(rest, res)
		}
	case here != nil && q.tryMirrorHere(here, res):
	default:
		inner.Charged(res, nil)
	}
}

// Begin implements quota.Beginner for the step it wraps: the quota shard
// asks just before it charges. A caller that gave up while the charge
// waited in the shard's queue answered that nothing was charged, so the
// charge is dropped, neither charged nor failed, and its unit goes back
// to the slice.
func (s *leasedStep) Begin() bool {
	if quota.Begin(s.inner) {
		return true
	}
	s.ls.settle(s.e, s.ref, true)
	*s = leasedStep{}
	leasedSteps.Put(s)
	return false
}

func (s *leasedStep) Fail(err error) {
	inner := s.inner
	s.ls.settle(s.e, s.ref, true)
	*s = leasedStep{}
	leasedSteps.Put(s)
	inner.Fail(err)
}

// chargeThen serves st from a slice when one is usable: true when it did.
func (ls *leases) chargeThen(st quota.ChargeStep, token int64) bool {
	c := st.ChargeReq()
	e, ref, res, ok := ls.take(c, token, readsHistory(st))
	if !ok {
		return false
	}
	s := leasedSteps.Get().(*leasedStep)
	*s = leasedStep{ls: ls, inner: st, e: e, ref: ref, res: res, c: *c, rest: ls.q.restAtOwner(st)}
	if s.rest == nil {
		s.here = ls.q.mirrorHere(st)
	}
	s.c.Lent = true
	ls.q.cfg.Local.ChargeThen(s)
	return true
}

// readsHistory reports whether st is an evaluation that reads the
// customer's device history: a device event, or an observation of a
// device or an end-user account.
func readsHistory(st quota.ChargeStep) bool {
	os, ok := st.(checks.OwnerStep)
	if !ok {
		return false
	}
	w := os.OwnerWork()
	return w.Resolve != nil || w.Observe != nil && !w.Observe.Test && (w.Observe.DeviceID != "" || w.Observe.AccountID != "")
}

// charge is chargeThen for a waiting caller.
func (ls *leases) charge(c *quota.Charge, token int64) (quota.ChargeResult, bool, error) {
	e, ref, res, ok := ls.take(c, token, false)
	if !ok {
		return quota.ChargeResult{}, false, nil
	}
	lc := *c
	lc.Lent = true
	_, err := ls.q.cfg.Local.Charge(lc)
	ls.settle(e, ref, err != nil)
	if err != nil {
		return quota.ChargeResult{}, true, fmt.Errorf("leased charge for %q: %w", c.Account, err)
	}
	return res, true, nil
}
