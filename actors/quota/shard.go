package quota

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/storage"
)

// WindowLoader is a Store that also knows the hourly windows an account's
// previous holder handed over (a cluster node's store: the shard's last
// owner answers them). An account loaded through it resumes those windows
// instead of starting the hour afresh, which would admit up to a whole
// hour's cap again after every shard move.
type WindowLoader interface {
	Store
	// LoadAccount is LoadUsage plus the running windows, by Bucket, as of
	// now (a zero now or window: none), and the load's tag.
	LoadAccount(account string, m storage.Month, now time.Time) (Loaded, error)
}

// Loaded is one load of an account through a WindowLoader. Tag names the
// load (0: none): a cluster member whose share went into it (one of From)
// and that later gives back a call of that share discounts it in this load,
// and only in this load (Client.Discount), since a later load reads the
// share without the call.
type Loaded struct {
	Counts storage.MonthCounts
	Totals storage.Totals
	Hour   [2]HourWindow
	Tag    uint64
	From   []string
}

// Store is where monthly counters and lifetime totals live; *storage.DB
// implements it. ApplyUsage must have committed everything when it returns
// nil (durable as the store's Durability says) and write nothing when it
// fails.
type Store interface {
	LoadUsage(account string, m storage.Month) (storage.MonthCounts, storage.Totals, error)
	ApplyUsage(deltas []storage.UsageDelta) error
}

// AheadStore is a Store whose increments may be answered before they are
// committed (storage.DB.AnswerAhead: Interval mode, on a healthy store that
// keeps up), because a commit without a sync makes them no more durable
// than the quota's own memory until the group sync. A Store without it has
// every allowed charge wait for its commit. A cluster node's SharedStore is
// one, since every read of the node's share first waits for what the
// committer has queued (the shard's settle before a load, Client.Flush
// before a read for another member).
//
// OnSync registers a hook to run before each of the store's group syncs:
// the quota has its committer store what it has queued (the increments
// nobody waits on linger there until then), so the sync covers every
// charge acknowledged before the hook ran and the crash bound stays the
// sync interval's. SyncInterval bounds that linger; AnsweredAhead starts
// the store's lag clock for an increment answered before its commit.
//
// Only a store opened in Interval mode (Durability) is used so; in Strict
// mode every charge waits for its synced commit.
type AheadStore interface {
	Store
	Durability() storage.Durability
	AnswerAhead() bool
	OnSync(fn func()) (remove func())
	SyncInterval() time.Duration
	// AnsweredAhead records an increment answered before its commit (its
	// lag counts from now).
	AnsweredAhead()
}

type (
	chargeCall   = actors.Call[Charge, ChargeResult]
	usageCall    = actors.Call[Usage, UsageView]
	collectCall  = actors.Call[Collect, CollectResult]
	leaseCall    = actors.Call[Lease, LeaseGrant]
	discountCall = actors.Call[Discount, bool]
	totalCall    = actors.Call[countTotal, ChargeResult]
)

// ChargeStep is a Charge that is one step of a chained call
// (actors/checks): the account's shard hands the result to Charged, on its
// own goroutine or, for a charge that waits for its increment to be
// committed, on the group committer's, instead of answering a waiting
// caller. Charged must not block. While the shard is down or stopping,
// Fail gets the error instead (on the sender's goroutine).
type ChargeStep interface {
	actors.Failer
	ChargeReq() *Charge
	Charged(ChargeResult, error)
}

// Beginner is a ChargeStep whose caller may stop waiting (a deadline).
// Whoever makes the charge calls Begin just before (Begin does it): false
// means the caller gave up first and answered that nothing was charged,
// and the step is dropped, neither charged nor failed. Whichever side is
// first decides, so a charge a caller gave up on before it began is never
// made, however long it waited in a queue.
type Beginner interface{ Begin() bool }

// Begin reports whether st may be charged: true unless st is a Beginner
// whose caller gave up.
func Begin(st ChargeStep) bool {
	b, ok := st.(Beginner)
	return !ok || b.Begin()
}

// charged is whoever hears a charge's result: a waiting caller (callReply)
// or a chained step.
type charged interface{ Charged(ChargeResult, error) }

// callReply answers a waiting caller's Call (a Charge, a Refund).
type callReply[Req any] struct {
	c *actors.Call[Req, ChargeResult]
}

func (r callReply[Req]) Charged(res ChargeResult, err error) { r.c.Reply(res, err) }

// countTotal adds one to total_evaluations without a check (fire-and-forget).
type countTotal struct {
	account string
	now     time.Time
}

// pending is one delta on its way to the store, with whoever waits for it.
type pending struct {
	call   charged // nil when nobody waits
	res    ChargeResult
	ent    *account
	delta  storage.UsageDelta
	shard  *actor.PID
	bucket Bucket
	ahead  bool // answered before its commit: kept in memory on failure
	hourly bool // the charge used an hourly request (undone on failure)
	unhour bool // the refund gave an hourly request back (taken again on failure)
	wstart time.Time
	// reloads is ent.reloads when the delta was counted in memory.
	reloads uint32
	// refundable: an owned account's allowed charge, which a Refund may
	// undo (the committer keeps its units when they are lost: lostLedger);
	// refund: a Refund's negative delta.
	refundable, refund bool
}

// dropMsg asks a shard to forget the accounts match selects (Drop) and
// answer their running hourly windows.
type dropMsg struct {
	match func(account string) bool
	done  chan []Handed
}

// lenProbe asks a shard how many accounts it holds (tests).
type lenProbe chan int

// rollback tells a shard that a delta failed to reach the store.
type rollback struct{ p pending }

// unstoredWarned tells a shard that a delta answered ahead, which carried
// Warned bits or hourly warning times, failed to reach the store (its
// counts are in the lost ledger; the marks are the account's to store
// again).
type unstoredWarned struct{ p pending }

// shardState is one shard's memory. With a store it is replaced by an empty
// one when the shard restarts after a panic (see New); without one it
// outlives the actor value, as the only copy of the counts.
type shardState struct {
	accounts *actors.Table[string, *account]
	store    Store
	commit   *actors.GroupCommitter[pending]
	// ahead is store when it may answer charges ahead of their commit
	// (nil: never); failed is set by the committer while its last group
	// failed, so that the charges after it wait for their own commit (and
	// hear its error) until one succeeds.
	ahead  AheadStore
	failed *atomic.Bool
	// lost is the committer's ledger of increments lost to the store,
	// which a load counts in again (lostBook.owed); nil without a store.
	lost      *lostBook
	idleAfter time.Duration
	log       *slog.Logger
	warnFn    func(Warning)
	// lent stands in for the accounts of lent charges (chargeLent).
	lent *account
	// stoppedLogged: persist has logged that the committer was closed
	// under this shard (once is enough).
	stoppedLogged bool
}

type shard struct{ *shardState }

func (s shard) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *chargeCall:
		s.charge(ctx, &m.Req, callReply[Charge]{m})
	case ChargeStep:
		if Begin(m) {
			s.charge(ctx, m.ChargeReq(), m)
		}
	case *refundCall:
		s.refund(ctx, &m.Req, callReply[Refund]{m})
	case *discountCall:
		m.Reply(s.discount(&m.Req), nil)
	case *usageCall:
		a, err := s.account(m.Req.Account, m.Req.Now)
		if err != nil {
			m.Reply(UsageView{}, err)
			return
		}
		m.Reply(a.usage(m.Req.Bucket, m.Req.Limits, m.Req.Now), nil)
	case *leaseCall:
		a, err := s.account(m.Req.Account, m.Req.Now)
		if err != nil {
			m.Reply(LeaseGrant{}, err)
			return
		}
		g, d := a.lend(&m.Req, s.warnFn)
		if d.Counts.Warned != 0 {
			s.persist(ctx, pending{ent: a, delta: d})
		}
		m.Reply(g, nil)
	case *collectCall:
		a, err := s.account(m.Req.Account, m.Req.Now)
		if err != nil {
			m.Reply(CollectResult{}, err)
			return
		}
		m.Reply(a.takeCollect(&m.Req), nil)
	case *countTotal:
		s.countTotal(ctx, m, nil)
	case *totalCall:
		s.countTotal(ctx, &m.Req, callReply[countTotal]{m})
	case *rollback:
		undo(&m.p)
		m.p.ent.inflight.Add(-1)
	case *unstoredWarned:
		keepUnstored(&m.p)
	case *dropMsg:
		var handed []Handed
		if s.store != nil { // memory only: the table is the only copy
			s.accounts.Sweep(func(id string, a *account) bool {
				if !m.match(id) {
					return false
				}
				if h := a.handed(); h.Hour[0].N > 0 || h.Hour[1].N > 0 {
					handed = append(handed, h)
				}
				return true
			})
		}
		m.done <- handed
	case lenProbe:
		m <- s.accounts.Len()
	case actors.Tick:
		if s.store == nil {
			return // memory only: an evicted account would lose its month
		}
		s.accounts.Sweep(func(_ string, a *account) bool { return a.idle(m.Now, s.idleAfter) })
	}
}

func (s shard) charge(ctx actor.Context, c *Charge, call charged) {
	if c.Lent {
		s.chargeLent(ctx, c, call)
		return
	}
	a, err := s.account(c.Account, c.Now)
	if err != nil {
		call.Charged(ChargeResult{}, err)
		return
	}
	res, d := a.charge(c, s.warnFn)
	if s.commit == nil || (d.Counts == storage.MonthCounts{} && d.Totals == storage.Totals{}) {
		call.Charged(res, nil)
		return
	}
	p := pending{res: res, ent: a, delta: d, bucket: c.Bucket}
	if !res.Allowed {
		// A refusal only adds a limit hit; nobody pays for losing it in a crash.
		call.Charged(res, nil)
		s.persist(ctx, p)
		return
	}
	p.hourly, p.wstart = c.Hourly, a.hour[c.Bucket&1].start
	p.refundable = true
	s.persistAnswering(ctx, p, call)
}

// countTotal adds one to m's account's total_evaluations. With call, call
// hears when it is counted as a charge's caller would (persistAnswering:
// once committed, and synced, when charges wait for their commit); without
// one nobody waits.
func (s shard) countTotal(ctx actor.Context, m *countTotal, call charged) {
	a, err := s.account(m.account, m.now)
	if err != nil {
		s.log.Warn("quota: total not counted", "account", m.account, "err", err)
		if call != nil {
			call.Charged(ChargeResult{}, err)
		}
		return
	}
	a.totals.Evaluations++
	p := pending{ent: a, delta: storage.UsageDelta{Account: a.id, Month: a.month, Totals: storage.Totals{Evaluations: 1}}}
	if call == nil {
		s.persist(ctx, p)
		return
	}
	p.res.Allowed = true
	s.persistAnswering(ctx, p, call)
}

// persistAnswering queues an allowed charge's increment p and answers call
// with p.res: at once when the store lets charges be answered ahead of
// their commit, else once the increment is committed.
func (s shard) persistAnswering(ctx actor.Context, p pending, call charged) {
	if s.answerAhead() {
		// Queued before it is answered, so whatever waits on the committer
		// after the answer (Daily, a barrier, a cluster member's read of
		// this node's share) finds the increment stored.
		p.ahead = true
		if err := s.persist(ctx, p); err != nil {
			call.Charged(ChargeResult{}, err)
		} else {
			s.ahead.AnsweredAhead()
			call.Charged(p.res, nil)
		}
		return
	}
	// The answer waits for the increment to be committed.
	p.call = call
	s.persist(ctx, p)
}

// aheadQueue is how many increments may wait for the committer before
// charges stop being answered ahead. Past it the committer is behind (it
// writes up to 4,096 a batch, far more than arrive in one batch's time
// unless the store is slow), and charges that wait for their commit are
// what holds their callers back; answered ahead, nothing would.
const aheadQueue = 512

// lingerItems ends a linger of the committer (GroupConfig.LingerItems)
// well before aheadQueue, so that a linger never holds charges back.
const lingerItems = aheadQueue / 2

// answerAhead reports whether an allowed charge is answered as soon as it
// is counted, its increment queued for the committer behind the answer.
func (s *shardState) answerAhead() bool {
	return s.ahead != nil && !s.failed.Load() && s.commit.Queued() < aheadQueue && s.ahead.AnswerAhead()
}

// chargeLent stores a charge made from a slice another node's quota
// actors lent: no check, and no account loaded (loading would ask every
// member for its share, the lender included, for an account this node
// does not own).
func (s shard) chargeLent(ctx actor.Context, c *Charge, call charged) {
	res := ChargeResult{Allowed: true}
	d := countedDelta(c)
	if s.commit == nil || (d.Counts == storage.MonthCounts{} && d.Totals == storage.Totals{}) {
		call.Charged(res, nil)
		return
	}
	// The pending delta needs an account to settle in flight against; a
	// shard's scratch one stands in, outside the table.
	if s.lent == nil {
		s.lent = &account{}
	}
	// Answered ahead like an owned account's charge: every read of this
	// node's share waits for the queue first (cluster/rpc.SharedStore).
	s.persistAnswering(ctx, pending{res: res, ent: s.lent, delta: d}, call)
}

// errQueueFull answers a charge whose increment found the committer's
// queue full.
var errQueueFull = fmt.Errorf("%w: the usage committer's queue is full (the store has stalled)", ErrUnavailable)

// persist queues p for the committer, or says why it could not. A full
// queue (the store has stalled for a while: 16,384 increments wait) refuses
// p at once instead of blocking, because the shard may be running on a
// caller's goroutine (actors.InlineRuns), whose deadline could not fire
// while it blocked; so does a closed committer (the shard outlived Stop):
// p is undone in memory and p.call hears the error (ErrUnavailable,
// ErrStopped).
func (s shard) persist(ctx actor.Context, p pending) error {
	if s.commit == nil {
		return nil
	}
	p.shard = ctx.Self()
	p.reloads = p.ent.reloads
	if u := p.ent.unstored; u != 0 && p.delta.Month == p.ent.month {
		// Warnings whose bits an earlier delta failed to store.
		p.delta.Counts.Warned |= u
		p.ent.unstored = 0
	}
	if p.ent.hourUnstored {
		// Hourly warnings whose times an earlier delta failed to store.
		p.delta.Totals.HourWarned = p.ent.storedHourWarned()
		p.ent.hourUnstored = false
	}
	p.ent.inflight.Add(1)
	var added bool
	if p.call == nil {
		added = s.commit.TryAddLazy(p) // nobody waits on it: it may linger
	} else {
		added = s.commit.TryAdd(p)
	}
	if added {
		return nil
	}
	p.ent.inflight.Add(-1)
	undo(&p)
	err := errQueueFull
	if s.commit.Closed() {
		// Stop closed the committer while this shard was stuck in a
		// handler (its stop timed out): nothing can be stored any more.
		err = errCommitterStopped
		if !s.stoppedLogged {
			s.stoppedLogged = true
			s.log.Error("quota: a shard outlived Stop; its charges are refused, their increments cannot be stored",
				"shard", p.shard.Id)
		}
	}
	if p.call != nil {
		p.call.Charged(ChargeResult{}, err)
	}
	return err
}

// errCommitterStopped answers a charge whose shard ran on after Stop had
// closed the committer.
var errCommitterStopped = fmt.Errorf("%w (the usage committer is closed): nothing was charged", ErrStopped)

// undo takes back in memory what p's delta did: the counts, the hourly
// request a charge used, or the one a refund gave back.
func undo(p *pending) {
	d := p.delta
	if p.reloads != p.ent.reloads {
		// The month's counts were loaded again since p counted in them
		// (a clock that went back across a month's start and forward
		// again): that load waited for p's commit (settle), so it never
		// held p's counts, and taking them out again would count less
		// than the store holds. Totals and hourly windows are not
		// reloaded: they still hold p.
		d.Counts = storage.MonthCounts{}
	}
	p.ent.rollback(&d, p.bucket, p.hourly, p.wstart)
	if w := &p.ent.hour[p.bucket&1]; p.unhour && w.start.Equal(p.wstart) {
		w.n++
	}
	keepUnstored(p)
}

// keepUnstored keeps the Warned bits of p's delta, which did not reach the
// store, for the account's next delta of the same month, and its hourly
// warning times for the next delta: the warnings went out, and the marks
// in memory stop the next crossing from carrying them.
func keepUnstored(p *pending) {
	if w := p.delta.Counts.Warned; w != 0 && p.reloads == p.ent.reloads && p.delta.Month == p.ent.month {
		p.ent.unstored |= w
	}
	if p.delta.Totals.HourWarned != [2]int64{} {
		p.ent.hourUnstored = true
	}
}

// settle waits until the committer has stored every increment queued so
// far, so that a load from the store that follows holds them.
func (s shard) settle(id string, m storage.Month) error {
	if err := s.commit.Barrier(restartWait); err != nil {
		return fmt.Errorf("%w: load %q month %d: queued increments not stored: %w", ErrUnavailable, id, m, err)
	}
	return nil
}

// account returns the account's state with its month rolled to MonthOf(now),
// loading it from the store on first touch (and the new month's counters on
// a month change).
func (s shard) account(id string, now time.Time) (*account, error) {
	m := storage.MonthOf(now)
	a, ok := s.accounts.Get(id)
	if !ok {
		a = &account{id: id, month: m}
		if wl, ok := s.store.(WindowLoader); ok {
			// A cluster node forgets the accounts of a shard it claims
			// (Client.Forget) while their increments may still be queued:
			// its own share, read in the load, must hold them. Open, not
			// Queued: the group the committer has taken (lingering until
			// the sync, or being applied) is not stored yet either.
			if s.commit != nil && (s.commit.Open() > 0 || s.lost.holds(id)) {
				if err := s.settle(id, m); err != nil {
					return nil, err
				}
			}
			l, err := wl.LoadAccount(id, m, now)
			if err != nil {
				return nil, fmt.Errorf("%w: load %q: %w", ErrUnavailable, id, err)
			}
			a.counts, a.totals = l.Counts, l.Totals
			a.loadHourWarned(&l.Totals)
			if l.Tag != 0 {
				ref := loadRef{tag: l.Tag, from: l.From}
				a.loads = &loadInfo{first: ref, monthly: ref}
			}
			a.resume(l.Hour, now)
		} else if s.store != nil {
			if s.lost.holds(id) {
				if err := s.settle(id, m); err != nil {
					return nil, err
				}
			}
			c, t, err := s.store.LoadUsage(id, m)
			if err != nil {
				return nil, fmt.Errorf("%w: load %q: %w", ErrUnavailable, id, err)
			}
			a.counts, a.totals = c, t
			a.loadHourWarned(&t)
		}
		// The increments lost to the store stay counted (lostBook.owed).
		c, evals := s.lost.owed(id, m)
		a.counts.Used += c.Used
		a.counts.Lookups += c.Lookups
		a.totals.Evaluations += evals
		s.accounts.Put(id, a)
	} else if a.month != m {
		// Increments of this account still queued may be of month m (a
		// clock that went back across the month's start and forward
		// again): the load must find them stored.
		if s.commit != nil && (a.inflight.Load() > 0 || s.lost.holds(id)) {
			if err := s.settle(id, m); err != nil {
				return nil, err
			}
		}
		var c storage.MonthCounts
		var ref loadRef
		if wl, ok := s.store.(WindowLoader); ok {
			l, err := wl.LoadAccount(id, m, time.Time{})
			if err != nil {
				return nil, fmt.Errorf("%w: load %q month %d: %w", ErrUnavailable, id, m, err)
			}
			c, ref = l.Counts, loadRef{tag: l.Tag, from: l.From}
		} else if s.store != nil {
			var err error
			if c, _, err = s.store.LoadUsage(id, m); err != nil {
				return nil, fmt.Errorf("%w: load %q month %d: %w", ErrUnavailable, id, m, err)
			}
		}
		// Only the month's counts come from this load; the totals and the
		// hourly windows stay those of the first. The month's lost
		// increments stay counted (lostBook.owed); the totals hold theirs.
		lc, _ := s.lost.owed(id, m)
		c.Used += lc.Used
		c.Lookups += lc.Lookups
		a.month, a.counts = m, c
		a.reloads++
		if a.loads != nil {
			a.loads.monthly = ref
		}
	}
	a.touch(now)
	return a, nil
}
