package quota

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/internal/clock"
	"github.com/fraudd/fraudd/storage"
)

// ErrUnavailable wraps every store failure: the handler answers 503
// storage_unavailable, and nothing was charged.
var ErrUnavailable = errors.New("quota: usage store unavailable")

// restartWait bounds how long a restarting shard waits for its queued
// writes before it reloads from the store.
const restartWait = 5 * time.Second

// ErrStopped is returned after Stop.
var ErrStopped = fmt.Errorf("quota: stopped: %w", actors.ErrUnavailable)

// Config configures New. The zero value works (memory only, no warnings).
type Config struct {
	// Shards is the number of shard actors (rounded up to a power of two);
	// 0 means 2×GOMAXPROCS.
	Shards int
	// Store keeps monthly counters and totals. Nil: memory only, nothing
	// survives a restart (tests and benchmarks).
	Store Store
	// Notifier receives usage warnings; nil drops them.
	Notifier Notifier
	// Clock stamps the periodic eviction tick; nil: no automatic sweeps (Sweep
	// can still be called).
	Clock clock.Clock
	// Timeout bounds one Charge or Usage round trip; 0 means 5 s.
	Timeout time.Duration
	// IdleAfter is how long an account stays in memory untouched; 0 means 2 h,
	// and never less than one hourly Window.
	IdleAfter time.Duration
	// SweepEvery is the eviction tick interval; 0 means one minute.
	SweepEvery time.Duration
	// Group tunes the group committer.
	Group actors.GroupConfig
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// Client is the typed quota client. It hides the shards' PIDs; every method
// is safe for concurrent use.
type Client struct {
	root      *actor.RootContext
	shards    *actors.Shards
	commit    *actors.GroupCommitter[pending]
	charges   *actors.Calls[Charge, ChargeResult]
	usages    *actors.Calls[Usage, UsageView]
	leases    *actors.Calls[Lease, LeaseGrant]
	collect   *actors.Calls[Collect, CollectResult]
	refunds   *actors.Calls[Refund, ChargeResult]
	discounts *actors.Calls[Discount, bool]
	totals    *actors.Calls[countTotal, ChargeResult]
	// waitTotals: charges wait for their increment's commit (Strict
	// mode), so CountTotal does too (see there).
	waitTotals bool
	log        *slog.Logger
	stopped    atomic.Bool
	store      Store
	// unhook removes beforeSync from an AheadStore; syncMu keeps Stop from
	// closing the committer under a barrier that is waiting on it. Barriers
	// share it (read lock): each waits only for its own, within its bound.
	unhook func()
	syncMu sync.RWMutex
}

// New spawns the quota shards (and the group committer when there is a store).
func New(root *actor.RootContext, cfg Config) *Client {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.IdleAfter == 0 {
		cfg.IdleAfter = 2 * time.Hour
	}
	cfg.IdleAfter = max(cfg.IdleAfter, Window)
	if cfg.SweepEvery == 0 {
		cfg.SweepEvery = time.Minute
	}
	c := &Client{
		root:      root,
		charges:   actors.NewCalls[Charge, ChargeResult](cfg.Timeout),
		usages:    actors.NewCalls[Usage, UsageView](cfg.Timeout),
		leases:    actors.NewCalls[Lease, LeaseGrant](cfg.Timeout),
		collect:   actors.NewCalls[Collect, CollectResult](cfg.Timeout),
		refunds:   actors.NewCalls[Refund, ChargeResult](cfg.Timeout),
		discounts: actors.NewCalls[Discount, bool](cfg.Timeout),
		totals:    actors.NewCalls[countTotal, ChargeResult](cfg.Timeout),
		log:       cfg.Logger,
		store:     cfg.Store,
	}
	failed := new(atomic.Bool)
	var lost *lostBook
	ahead, _ := cfg.Store.(AheadStore)
	if ahead != nil && ahead.Durability() != storage.Interval {
		ahead = nil
	}
	c.waitTotals = cfg.Store != nil && ahead == nil
	if cfg.Store != nil {
		group := cfg.Group
		if ahead != nil && group.Linger == 0 {
			// The increments nobody waits on (answered ahead, refusals)
			// wait for the group sync's barrier (beforeSync), so the store
			// takes one batch per sync, not one per scheduler pass; their
			// crash bound is the sync's either way.
			group.Linger, group.LingerItems = ahead.SyncInterval(), lingerItems
		}
		lost = newLostBook()
		c.commit = newCommitter(root, cfg.Store, group, cfg.Logger, failed, lost)
	}
	var warn func(Warning)
	if cfg.Notifier != nil {
		warn = cfg.Notifier.Warn
	}
	n := actors.ShardCount(cfg.Shards)
	fresh := func() *shardState {
		return &shardState{
			accounts:  actors.NewTable[string, *account](64),
			store:     cfg.Store,
			commit:    c.commit,
			ahead:     ahead,
			failed:    failed,
			lost:      lost,
			idleAfter: cfg.IdleAfter,
			log:       cfg.Logger,
			warnFn:    warn,
		}
	}
	states := make([]*shardState, n)
	for i := range states {
		states[i] = fresh()
	}
	opts := []actors.ShardOption{actors.Named("quota"), actors.WithLogger(cfg.Logger)}
	if _, remote := cfg.Store.(WindowLoader); ahead != nil && !remote {
		// A charge answered ahead of its commit is a few field updates and
		// a buffered send to the committer, so the sender that finds the
		// shard idle runs it and goes on with its chain. A charge that waits
		// for its commit would park its sender anyway, and run inline it
		// held up the senders queued behind it (actors.InlineRuns). So
		// would a cluster node's loads, which ask every other member for its
		// share: a sender running the shard would run the loads queued
		// behind its own charge too, for other callers' accounts.
		opts = append(opts, actors.InlineRuns())
	}
	if cfg.Store != nil {
		// After a panic the shard's memory may be half-changed: start it
		// empty, so that each account loads its month and totals from the
		// store again (hourly windows restart, as on a process restart;
		// SPEC §8 calls them advisory). The barrier lets the deltas it
		// queued land first, so the reload counts them.
		opts = append(opts, actors.OnRestart(func(i int) {
			if err := c.commit.Barrier(restartWait); err != nil {
				cfg.Logger.Warn("quota: shard restarts before its queued usage was stored", "shard", i, "err", err)
			}
			states[i] = fresh()
		}))
	}
	c.shards = actors.SpawnShards(root, n, func(i int) actor.Actor { return shard{states[i]} }, opts...)
	if ahead != nil {
		c.unhook = ahead.OnSync(c.beforeSync)
	}
	c.shards.Tick(cfg.Clock, cfg.SweepEvery)
	return c
}

// Charge checks and charges one call in a single hop to the account's shard.
// When the call counts toward the month or the totals, the answer comes once
// the shard has counted it (Interval mode: the next group sync stores it),
// or only after that increment is committed (synced too in Strict mode;
// also while an Interval store falls behind: see the package doc).
// Any error means: answer 503 storage_unavailable (ErrUnavailable,
// ErrStopped, actors.ErrTimeout).
func (c *Client) Charge(m Charge) (ChargeResult, error) {
	if c.stopped.Load() {
		return ChargeResult{}, ErrStopped
	}
	call := c.charges.Get(m)
	c.shards.Send(actors.HashString(m.Account), call)
	return c.charges.Wait(call)
}

// ChargeThen is Charge as a step of a chained call: it sends st to the
// account's shard and returns at once; st.Charged hears the result, after
// the increment is committed as for Charge.
func (c *Client) ChargeThen(st ChargeStep) {
	if c.stopped.Load() {
		st.Fail(ErrStopped)
		return
	}
	c.shards.Send(actors.HashString(st.ChargeReq().Account), st)
}

// Drop forgets the accounts match selects, in every shard, after the
// charges queued before it, and returns once their increments are stored
// (the committer's barrier), or with an error when that takes longer than
// wait. The next touch of such an account loads it from the store again.
// A cluster node calls it when an account shard leaves it: the new owner
// then reads a share that holds everything this node charged, and should
// the shard come back, this node starts from the sum again instead of from
// what it held before. It answers the forgotten accounts' hourly windows
// (those with any count), which the next owner resumes: they live in
// memory only. Without a store it does nothing: memory is the only copy of
// the counts.
func (c *Client) Drop(match func(account string) bool, wait time.Duration) ([]Handed, error) {
	handed, err := c.Forget(match, wait)
	if err != nil || c.commit == nil {
		return handed, err
	}
	if err := c.stored(wait); err != nil {
		return nil, fmt.Errorf("%w: increments not stored within %v: %w", ErrUnavailable, wait, err)
	}
	return handed, nil
}

// Forget is Drop without waiting for the increments to be stored: every
// shard has forgotten the accounts when it returns, and any message sent to
// a shard after it returns finds them gone, so the next touch loads them
// again. A cluster node calls it for a shard it just claimed: what it held
// of the shard's accounts as a non-owner (its own totals) is stale for an
// owner, and waiting for the store there would hold the claim back from
// the requests already routed to it.
func (c *Client) Forget(match func(account string) bool, wait time.Duration) ([]Handed, error) {
	if c.stopped.Load() {
		return nil, ErrStopped
	}
	if c.commit == nil {
		return nil, nil
	}
	done := make(chan []Handed, c.shards.Len())
	c.shards.Broadcast(&dropMsg{match: match, done: done})
	t := time.NewTimer(wait)
	defer t.Stop()
	var handed []Handed
	for range c.shards.Len() {
		select {
		case h := <-done:
			handed = append(handed, h...)
		case <-t.C:
			return nil, fmt.Errorf("%w: the quota shards did not drop the accounts within %v", ErrUnavailable, wait)
		}
	}
	return handed, nil
}

// Usage reports an account's usage without consuming anything.
func (c *Client) Usage(m Usage) (UsageView, error) {
	if c.stopped.Load() {
		return UsageView{}, ErrStopped
	}
	call := c.usages.Get(m)
	c.shards.Send(actors.HashString(m.Account), call)
	return c.usages.Wait(call)
}

// Lease settles a holder's report of its previous slice of the account's
// allowance and lends it another (lease.go), in one hop to the account's
// shard. Only a cluster member's owner-side service calls it. An error
// means nothing was lent; the report may not have been settled either, in
// which case the slice stays reserved until its Keep runs out.
func (c *Client) Lease(m Lease) (LeaseGrant, error) {
	if c.stopped.Load() {
		return LeaseGrant{}, ErrStopped
	}
	call := c.leases.Get(m)
	c.shards.Send(actors.HashString(m.Account), call)
	return c.leases.Wait(call)
}

// Collect checks and takes one device event from the account's daily
// collection budget (collect.go). An error means: answer 503
// storage_unavailable; nothing was taken.
func (c *Client) Collect(m Collect) (CollectResult, error) {
	if c.stopped.Load() {
		return CollectResult{}, ErrStopped
	}
	call := c.collect.Get(m)
	c.shards.Send(actors.HashString(m.Account), call)
	return c.collect.Wait(call)
}

// CountTotal adds one to the account's total_evaluations without any
// check: for a degraded evaluation charged with Total=false that turned out
// not to be the bare non-suspicious allow, before it is answered. In
// Interval mode it is fire-and-forget and rides the next group commit, as
// the charges answered ahead do. When charges wait for their commit
// (Strict mode) it waits for its own too: Strict promises that a crash
// loses no acknowledged count, total_evaluations included (README
// Durability: billing from it), and fire-and-forget it could be lost to a
// kill right after the answer. A failure is logged: the call was charged
// already and is answered.
func (c *Client) CountTotal(account string, now time.Time) {
	if c.stopped.Load() {
		return
	}
	if !c.waitTotals {
		c.shards.Send(actors.HashString(account), &countTotal{account: account, now: now})
		return
	}
	call := c.totals.Get(countTotal{account: account, now: now})
	c.shards.Send(actors.HashString(account), call)
	if _, err := c.totals.Wait(call); err != nil {
		c.log.Warn("quota: total_evaluations not stored before the answer", "account", account, "err", err)
	}
}

// Sweep asks every shard to evict idle accounts as of now (the periodic tick
// does this by itself when Config.Clock is set).
func (c *Client) Sweep(now time.Time) {
	if !c.stopped.Load() {
		c.shards.Broadcast(actors.Tick{Now: now})
	}
}

// Stats reports the group committer's work so far: synced batches and deltas.
func (c *Client) Stats() (groups, deltas uint64) {
	if c.commit == nil {
		return 0, 0
	}
	return c.commit.Stats()
}

// beforeSync runs before each group sync of an AheadStore: it returns once
// every increment queued so far is committed, so that the sync covers every
// charge answered before it began, including those answered ahead of their
// commit.
func (c *Client) beforeSync() {
	if err := c.stored(restartWait); err != nil && !errors.Is(err, ErrStopped) {
		c.log.Warn("quota: increments not stored before the group sync; it goes on without them", "err", err)
	}
}

// Flush returns once every increment queued so far is committed (synced
// too only in Strict mode), or with an error when that takes longer than
// wait, or with ErrStopped after Stop. A cluster node calls it before it
// reads its own share of an account from its store for another member or
// for the hand-over of a graceful leave, since a charge answered ahead of
// its commit is not there yet (cluster/rpc.Server.Shares).
// Without a store it returns nil at once.
func (c *Client) Flush(wait time.Duration) error {
	if c.commit == nil {
		return nil
	}
	return c.stored(wait)
}

// stored returns once every increment queued so far is committed, or with
// an error when that takes longer than wait, or with ErrStopped after Stop
// (whose close of the committer stores what is queued).
func (c *Client) stored(wait time.Duration) error {
	c.syncMu.RLock()
	defer c.syncMu.RUnlock()
	if c.stopped.Load() {
		return ErrStopped
	}
	return c.commit.Barrier(wait)
}

// resident counts the accounts held in memory over all shards, after every
// message sent before it was handled (tests).
func (c *Client) resident() int {
	ch := make(lenProbe, c.shards.Len())
	c.shards.Broadcast(ch)
	n := 0
	for range c.shards.Len() {
		n += <-ch
	}
	return n
}

// Stop refuses new calls, lets the shards finish their mailboxes, then commits
// everything still pending and releases its waiters. Call it after the HTTP
// server stopped sending. A shard still stuck in a handler after
// actors.StopTimeout is named in the error (actors.ErrStopTimeout); what it
// handles after the committer closed is refused with ErrStopped, so no
// charge is answered whose increment the store will not get.
func (c *Client) Stop() error { return c.StopBy(time.Time{}) }

// StopBy is Stop waiting for the shards only until by (actors.StopWait);
// the last group commit is made all the same, before it returns.
func (c *Client) StopBy(by time.Time) error {
	if c.stopped.Swap(true) {
		return nil
	}
	err := c.shards.StopBy(by)
	c.syncMu.Lock()
	if c.unhook != nil {
		c.unhook()
	}
	if c.commit != nil {
		c.commit.Close()
	}
	c.syncMu.Unlock()
	if err != nil {
		return fmt.Errorf("quota: %w", err)
	}
	return nil
}
