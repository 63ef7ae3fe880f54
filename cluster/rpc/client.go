package rpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/fraudd/fraudd/actors/checks"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/cluster"
)

// DefaultTimeout bounds one call to a member when QuotaConfig.Timeout is
// zero.
const DefaultTimeout = 500 * time.Millisecond

// DefaultHandoffWait bounds a routed call as a whole, the waits for a shard
// between owners included, when QuotaConfig.HandoffWait is zero: while
// many shards move at once (a member joining or leaving under load) a shard
// can be without a recorded claim for longer than one call's deadline.
const DefaultHandoffWait = 2 * time.Second

// maxAttempts bounds the calls one routed call makes: each after the view
// moved (or the claim was recorded), so a shard that changes hands during
// the call is followed, not chased for ever.
const maxAttempts = 16

var (
	// ErrNoOwner is a call no owner answered within its deadline: no owner
	// known, the owner unreachable, or refused twice. It wraps
	// quota.ErrUnavailable: the pipeline answers 503 storage_unavailable
	// and nothing was charged, as for a local store failure.
	ErrNoOwner = fmt.Errorf("cluster rpc: no owner answered for the account: %w", quota.ErrUnavailable)
	// ErrBusy is a chained charge refused because every worker is busy
	// and the queue is full.
	ErrBusy   = fmt.Errorf("cluster rpc: too many remote charges in flight: %w", quota.ErrUnavailable)
	errNoAddr = errors.New("not a live member with an advertised address")
	// ErrClosed is a call after Close.
	ErrClosed = fmt.Errorf("cluster rpc: client closed: %w", quota.ErrUnavailable)
)

// QuotaConfig configures NewQuota.
type QuotaConfig struct {
	// Local is this node's quota actors, used for the shards it owns.
	Local  LocalQuota
	Owners Ownership
	// Timeout bounds each call to a member; DefaultTimeout when zero.
	Timeout time.Duration
	// HandoffWait bounds a routed call as a whole, the waits for the next
	// claim of a shard between owners included; DefaultHandoffWait when
	// zero, and never less than Timeout.
	HandoffWait time.Duration
	// Workers carry chained charges (ChargeThen) to remote owners: each
	// peer has its own (a paused peer holds up only the charges for its
	// shards), making a blocking gRPC call each, as many at once as there
	// are workers; 32 when zero. Queue is how many charges may wait for a
	// peer's workers (16 × Workers when zero); past it a chained charge
	// fails with ErrBusy.
	Workers, Queue int
	// DialOptions for the connections to peers; plaintext when nil.
	DialOptions []grpc.DialOption
	Logger      *slog.Logger
	// LeaseAfter is how many charges a second for one account this node
	// sends to its owner before it asks for a slice of the account's
	// allowance to charge locally (leases.go); zero or less: never.
	LeaseAfter int64
	// LeaseFor is how long a slice may be used; DefaultLeaseFor when zero.
	// Keep it within the membership lease TTL.
	LeaseFor time.Duration
	// Now is this node's clock, at which it settles reports of slices when
	// it owns the account itself; time.Now when nil.
	Now func() time.Time
}

// Quota implements checks.Quota (and its chained ChargeThen) across the
// cluster: each account's charge, usage read and collection (collect.go)
// run at the owner of its shard. CountTotal stays on this node: the totals
// are per-node shares (docs/cluster.md).
type Quota struct {
	cfg    QuotaConfig
	log    *slog.Logger
	remote atomic.Int64
	// pipeStats counts what the peers' pipes carried (pipe.go).
	pipeStats pipeStats
	// shareCalls counts Shares requests (shares.go).
	shareCalls atomic.Int64
	// work is for chained charges with no peer to go to yet (no owner
	// in the view, or this node named but its claim not valid): its
	// workers wait for the view within the deadline.
	work   chan quota.ChargeStep
	done   chan struct{}
	closed atomic.Bool
	wg     sync.WaitGroup

	mu    sync.RWMutex
	peers map[string]*peer
	// leases is nil when LeaseAfter is zero.
	leases *leases
	// owner is this node's own parts for owner work (SetOwner; nil until
	// then: chained charges go without it).
	owner       atomic.Pointer[checks.OwnerParts]
	leasedRests atomic.Int64
	// evs is the device-event client over this node's events (Events).
	evs atomic.Pointer[Events]
	// mirror is the holder's mirrors of other owners' accounts (SetMirror;
	// nil: none, mirror.go).
	mirror atomic.Pointer[mirrors]
	// Charging calls carry ids callBase+1, +2, …; settles counts the
	// ambiguous ones settled (settle.go).
	callBase uint64
	callSeq  atomic.Uint64
	settles  atomic.Int64
	// discounts counts the discounts sent (discount.go).
	discounts atomic.Int64
}

// background runs fn on the client's wait group, so that Close waits for
// it, with a context that ends after the call timeout or when the client
// closes; false (fn not run) once the client is closed. For the calls a
// node makes after it answered (a settled call's event use, its
// discounts), which nobody waits for.
func (q *Quota) background(fn func(ctx context.Context)) bool {
	// Under the lock, as settle starts its loops: Close must not be
	// waiting already.
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed.Load() {
		return false
	}
	q.wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), q.cfg.Timeout)
		defer cancel() // also ends the watch below
		go func() {
			select {
			case <-q.done:
				cancel()
			case <-ctx.Done():
			}
		}()
		fn(ctx)
	})
	return true
}

// callID is the next charging call's id: never 0, which says "not
// settled".
func (q *Quota) callID() uint64 {
	for {
		if id := q.callBase + q.callSeq.Add(1); id != 0 {
			return id
		}
	}
}

// PipeCalls counts the calls this client sent to other members on their
// pipes, and PipeFrames the frames that carried them.
func (q *Quota) PipeCalls() int64 { return q.pipeStats.calls.Load() }

// PipeFrames: see PipeCalls.
func (q *Quota) PipeFrames() int64 { return q.pipeStats.frames.Load() }

// Settles counts the charging calls this client settled with the node
// they went to: calls that broke after they were sent, and answers
// discarded as stale.
func (q *Quota) Settles() int64 { return q.settles.Load() }

// peer is one member's connection, reused by every call to it until its
// advertised address changes, and the workers that carry chained charges
// to it.
type peer struct {
	addr string
	conn *grpc.ClientConn
	cli  *pipeClient // the request path's calls on the member's pipe, the rest unary
	work chan quota.ChargeStep
	stop chan struct{}
	// stopped is set, under Quota.mu, when the peer is replaced.
	stopped bool
}

// NewQuota starts the client's workers; Close stops them.
func NewQuota(cfg QuotaConfig) (*Quota, error) {
	if cfg.Local == nil || cfg.Owners == nil {
		return nil, errors.New("cluster rpc quota: local quota and owners are required")
	}
	if cfg.HandoffWait <= 0 {
		cfg.HandoffWait = DefaultHandoffWait
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	cfg.HandoffWait = max(cfg.HandoffWait, cfg.Timeout)
	if cfg.Workers <= 0 {
		cfg.Workers = 32
	}
	if cfg.Queue <= 0 {
		cfg.Queue = 16 * cfg.Workers
	}
	if cfg.DialOptions == nil {
		cfg.DialOptions = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	// gRPC's default reconnect backoff grows to two minutes: a member that
	// restarts on the same address would stay unreachable from here long
	// after it is back. Redial within about a second instead.
	cfg.DialOptions = append(cfg.DialOptions, transportDialOptions()...)
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
		MinConnectTimeout: time.Second,
	}))
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.LeaseFor <= 0 {
		cfg.LeaseFor = DefaultLeaseFor
	}
	q := &Quota{cfg: cfg, log: log, work: make(chan quota.ChargeStep, cfg.Queue), done: make(chan struct{}), peers: map[string]*peer{}, callBase: rand.Uint64()}
	for range cfg.Workers {
		q.wg.Go(func() { q.worker(q.work, nil) })
	}
	if cfg.LeaseAfter > 0 {
		q.leases = newLeases(q, cfg.LeaseAfter, cfg.LeaseFor)
		q.wg.Go(q.leases.run)
	}
	return q, nil
}

// RemoteCalls counts the charges' and usage reads' gRPC round trips to
// other members since NewQuota (fraudbench and tests: hops per evaluation).
func (q *Quota) RemoteCalls() int64 { return q.remote.Load() }

// LeasedCharges counts the charges this node served from slices of an
// account's allowance, with no round trip; LeaseCalls the Lease calls it
// made to other members for them (reports and requests).
func (q *Quota) LeasedCharges() int64 {
	if q.leases == nil {
		return 0
	}
	return q.leases.charged.Load()
}

// LeasedRests counts the leased evaluations whose device event and history
// went to the account's owner in one EvaluateLeased round trip.
func (q *Quota) LeasedRests() int64 { return q.leasedRests.Load() }

// LeaseCalls: see LeasedCharges.
func (q *Quota) LeaseCalls() int64 {
	if q.leases == nil {
		return 0
	}
	return q.leases.calls.Load()
}

// Leased are the accounts this node charges from slices of their
// allowance, or did lately (a slice's key is kept ten slice lengths after
// its last use): its leased evaluations observe this node's own device
// history meanwhile (HistoryMover leaves it here). One read of the lease
// table, for a round that asks about many accounts.
func (q *Quota) Leased() map[string]bool {
	out := map[string]bool{}
	if q.leases == nil {
		return out
	}
	ls := q.leases
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for k := range ls.m {
		out[k.account] = true
	}
	return out
}

// Freeze stops this node using any slice of account's allowance and waits,
// within ctx, for the charges made from them to be stored (leases.go):
// Server.Shares calls it before it reads the node's share.
func (q *Quota) Freeze(ctx context.Context, account string) {
	if q.leases != nil {
		q.leases.Freeze(ctx, account)
	}
}

// Close stops the workers and closes every peer connection. Chained charges
// still queued are failed with ErrClosed.
func (q *Quota) Close() {
	// Under the lock, so that no peer starts workers after the wait below
	// began.
	q.mu.Lock()
	was := q.closed.Swap(true)
	q.mu.Unlock()
	if was {
		return
	}
	close(q.done)
	q.wg.Wait()
	failAll(q.work, ErrClosed)
	if e := q.evs.Load(); e != nil {
		for len(e.work) > 0 {
			(<-e.work).Fail(ErrClosed)
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for id, p := range q.peers {
		p.cli.Close()
		p.conn.Close()
		failAll(p.work, ErrClosed)
		delete(q.peers, id)
	}
}

// admitLocal is local for a charge: admitted under the claim
// (Ownership.Admit) until done is called.
func (q *Quota) admitLocal(account string) (done func(), ok bool) {
	shard := cluster.ShardOf(cluster.KindAccount, account)
	if node, _, ok := q.cfg.Owners.Owner(shard); !ok || node != q.cfg.Owners.Self() {
		return nil, false
	}
	_, done, err := q.cfg.Owners.Admit(shard)
	return done, err == nil
}

// local reports whether this node owns the account's shard with a valid
// claim now: the case of no hop at all (for what no release need wait for:
// reads, budgets).
func (q *Quota) local(account string) bool {
	done, ok := q.admitLocal(account)
	if ok {
		done()
	}
	return ok
}

// Charge implements checks.Quota.
func (q *Quota) Charge(c quota.Charge) (quota.ChargeResult, error) {
	if done, ok := q.admitLocal(c.Account); ok {
		defer done()
		return q.cfg.Local.Charge(c)
	}
	if q.leases != nil {
		if node, token, ok := q.cfg.Owners.Owner(cluster.ShardOf(cluster.KindAccount, c.Account)); ok && node != q.cfg.Owners.Self() {
			if res, leased, err := q.leases.charge(&c, token); leased {
				return res, err
			}
		}
	}
	return q.charge(&c)
}

// ChargeThen implements the chained charge: on the owner it is the local
// actors' ChargeThen (no goroutine, no hop); elsewhere a worker makes the
// call and st.Charged runs on that worker when the answer is in.
func (q *Quota) ChargeThen(st quota.ChargeStep) {
	if q.closed.Load() {
		st.Fail(ErrClosed)
		return
	}
	shard := cluster.ShardOf(cluster.KindAccount, st.ChargeReq().Account)
	node, token, ok := q.cfg.Owners.Owner(shard)
	if ok && node == q.cfg.Owners.Self() {
		if _, done, err := q.cfg.Owners.Admit(shard); err == nil {
			q.cfg.Local.ChargeThen(st) // queued (or run, inline) before done
			done()
			return
		}
	}
	var p *peer
	if ok && node != q.cfg.Owners.Self() {
		if q.leases != nil && q.leases.chargeThen(st, token) {
			return
		}
		p, _ = q.peer(node)
	}
	switch err := q.enqueue(p, st); err {
	case ErrClosed:
		st.Fail(err)
	case ErrBusy:
		st.Charged(quota.ChargeResult{}, err)
	}
}

// enqueue puts st on p's queue, or on the client's own when p is nil or
// stopped, for a worker: ErrClosed once the client closed, ErrBusy when
// the queue is full. The read lock keeps a peer from being replaced (its
// queue handed over) while a step goes in; the send never blocks.
func (q *Quota) enqueue(p *peer, st quota.ChargeStep) error {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed.Load() {
		return ErrClosed
	}
	work := q.work
	if p != nil && !p.stopped {
		work = p.work
	}
	select {
	case work <- st:
		return nil
	default:
		return ErrBusy
	}
}

// worker carries chained charges from work until the client closes (or
// stop, the peer's, closes). The whole route runs here, the retry at
// another owner included, and st.Charged runs here when the answer is in.
func (q *Quota) worker(work chan quota.ChargeStep, stop chan struct{}) {
	for {
		select {
		case <-q.done:
			return
		case <-stop:
			return
		case st := <-work:
			if !quota.Begin(st) {
				continue // its caller gave up while it was queued: never sent
			}
			if rs, ok := st.(*restStep); ok {
				q.runRest(rs)
				continue
			}
			if os, ok := st.(checks.OwnerStep); ok {
				if p := q.owner.Load(); p != nil {
					if w := os.OwnerWork(); !w.Empty() {
						if res, ok := q.evaluate(p, os.ChargeReq(), w); ok {
							os.OwnerDone(res)
							continue
						}
						// The owner predates Evaluate: charge there, and
						// the chain does the rest here.
					}
				}
			}
			res, err := q.charge(st.ChargeReq())
			st.Charged(res, err)
		}
	}
}

func failAll(work chan quota.ChargeStep, err error) {
	for len(work) > 0 {
		(<-work).Fail(err)
	}
}

// charge runs c at the owner, wherever it is.
func (q *Quota) charge(c *quota.Charge) (quota.ChargeResult, error) {
	return routeCalls(q, &q.remote, c.Account, true,
		func() (quota.ChargeResult, error) { return q.cfg.Local.Charge(*c) },
		func(ctx context.Context, cli NodeClient, token int64, id uint64) (quota.ChargeResult, int64, error) {
			m := chargeMsg(c, token)
			m.CallId = id
			rep, err := cli.Charge(ctx, m)
			if err != nil {
				return quota.ChargeResult{}, 0, err
			}
			res, err := chargeResultOf(rep)
			return res, rep.Token, err
		})
}

// Usage implements checks.Quota.
func (q *Quota) Usage(u quota.Usage) (quota.UsageView, error) {
	if q.local(u.Account) {
		return q.cfg.Local.Usage(u)
	}
	return route(q, &q.remote, u.Account,
		func() (quota.UsageView, error) { return q.cfg.Local.Usage(u) },
		func(ctx context.Context, cli NodeClient, token int64) (quota.UsageView, int64, error) {
			rep, err := cli.Usage(ctx, usageMsg(&u, token))
			if err != nil {
				return quota.UsageView{}, 0, err
			}
			return usageViewOf(rep), rep.Token, nil
		})
}

// CountTotal implements checks.Quota: totals are per-node shares, summed
// by the G-counter rebuild, so this node counts its own.
func (q *Quota) CountTotal(account string, now time.Time) { q.cfg.Local.CountTotal(account, now) }

// route runs an owner-only call for account: locally when this node holds
// a valid claim of the shard, else with one gRPC call to the owner in the
// view, within Timeout. When the view has no owner, or the owner refuses
// (it no longer owns the shard, or has not recorded its claim yet), or
// answers under a token older than the view's, the call waits for the
// view to move (or for this node's own claim) and tries again, up to
// maxAttempts calls, all within HandoffWait; past it the answer is
// ErrNoOwner. An owner that does not answer at all fails the call at once
// with ErrNoOwner: its lease, not this call, decides when another node
// takes the shard. calls counts the gRPC calls made.
func route[T any](q *Quota, calls *atomic.Int64, account string, local func() (T, error), remote func(context.Context, NodeClient, int64) (T, int64, error)) (T, error) {
	return routeCalls(q, calls, account, false, local, func(ctx context.Context, cli NodeClient, token int64, _ uint64) (T, int64, error) {
		return remote(ctx, cli, token)
	})
}

// routeCalls is route for a call that charges when charging is set: each
// attempt carries a fresh call id, and an attempt whose outcome is
// ambiguous (it broke after it was sent), or whose answer is discarded
// (under a stale claim), is settled with the node it went to before the
// call goes on (settle.go), so that it does not count.
func routeCalls[T any](q *Quota, calls *atomic.Int64, account string, charging bool, local func() (T, error), remote func(context.Context, NodeClient, int64, uint64) (T, int64, error)) (T, error) {
	var zero T
	if q.closed.Load() {
		return zero, ErrClosed
	}
	shard := cluster.ShardOf(cluster.KindAccount, account)
	ctx, cancel := context.WithTimeout(context.Background(), q.cfg.HandoffWait)
	defer cancel()
	var last error
	for attempt := 0; attempt < maxAttempts && ctx.Err() == nil; attempt++ {
		node, token, ok := q.cfg.Owners.Owner(shard)
		switch {
		case !ok:
			// Between an owner's loss and the next claim: wait for the
			// claim within the deadline.
			last = errors.New("no owner in the view")
		case node == q.cfg.Owners.Self():
			_, done, err := q.cfg.Owners.Admit(shard)
			// The view shows this node's claim before the Balancer records
			// it: wait for it rather than for a view that will not move.
			if err != nil && errors.Is(err, ErrNoClaim) && q.awaitClaim(ctx, shard, token) {
				_, done, err = q.cfg.Owners.Admit(shard)
			}
			if err == nil {
				defer done() // a release of the shard waits for it (Ownership.Admit)
				return local()
			}
			last = err
		default:
			p, err := q.peer(node)
			var v T
			var got int64
			var id uint64
			var sent time.Time
			if err == nil {
				calls.Add(1)
				if charging {
					id = q.callID()
				}
				sent = time.Now()
				cctx, ccancel := context.WithTimeout(ctx, q.cfg.Timeout)
				v, got, err = remote(cctx, p.cli, token, id)
				ccancel()
			}
			switch {
			case errors.Is(err, errNoAddr):
				// The owner in the view is no longer a member: its claim
				// is about to go; the view will show the next one.
			case err == nil:
				_, cur, ok := q.cfg.Owners.Owner(shard)
				if !ok || got >= cur {
					return v, nil
				}
				// An answer under a claim older than the one we know of:
				// the stale owner's, which must not count.
				err = fmt.Errorf("%s answered under token %d, the shard's is %d: %w", node, got, cur, cluster.ErrFenced)
				q.settle(node, account, id, sent)
			case notSent(err):
				// No connection to the owner, so nothing was sent: it may
				// be restarting, or dead with its lease still running.
				// Wait for the view to move (its next claim) within the
				// handoff wait, trying it again meanwhile. (A call that
				// broke after it was sent is not tried again: the owner
				// may have charged it.)
				last = err
				if !q.pause(ctx, shard, token) {
					return zero, fmt.Errorf("account shard %04d at %s: %w: %w", shard, node, ErrNoOwner, err)
				}
				// Waiting out a dead owner's lease is bounded by the
				// handoff wait, not by maxAttempts: 16 pauses of 20 ms
				// gave up after 0.3 s while the lease ran for seconds.
				attempt--
				continue
			case status.Code(err) != codes.FailedPrecondition:
				if !sent.IsZero() && ambiguous(err) {
					q.settle(node, account, id, sent)
				}
				return zero, fmt.Errorf("account shard %04d at %s: %w: %w", shard, node, ErrNoOwner, err)
			case recording(err):
				// The owner's view shows its claim, which it has not
				// recorded yet: ask it again shortly.
				last = err
				if !q.pause(ctx, shard, token) {
					return zero, fmt.Errorf("account shard %04d at %s: %w: %w", shard, node, ErrNoOwner, err)
				}
				attempt-- // as for an owner not reached: the handoff wait bounds it
				continue
			}
			last = err
		}
		q.refresh(ctx, shard, token, last)
	}
	return zero, fmt.Errorf("account shard %04d: %w: %w", shard, ErrNoOwner, last)
}

// retryPause is how long a call waits before asking an owner again that
// could not answer yet (no connection, or its claim not recorded).
const retryPause = 20 * time.Millisecond

// pause waits retryPause, or less when the view moves past token first;
// false when ctx ended.
func (q *Quota) pause(ctx context.Context, shard int, token int64) bool {
	wctx, cancel := context.WithTimeout(ctx, retryPause)
	defer cancel()
	for {
		rev := q.cfg.Owners.Revision()
		if _, cur, ok := q.cfg.Owners.Owner(shard); ok && cur != token {
			return ctx.Err() == nil
		}
		if q.cfg.Owners.Wait(wctx, rev+1) != nil {
			return ctx.Err() == nil
		}
	}
}

// notSent reports whether a call failed before it reached the member: gRPC
// could not connect (its dial error), so the member charged nothing.
func notSent(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.Unavailable && strings.Contains(st.Message(), "Error while dialing")
}

// recording reports whether a refusal says the owner is recording the very
// claim the caller routed by.
func recording(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	for _, d := range st.Details() {
		if no, ok := d.(*NotOwner); ok && no.Recording {
			return true
		}
	}
	return false
}

// claimPoll is how often awaitClaim looks at this node's claim.
const claimPoll = 2 * time.Millisecond

// awaitClaim waits, within ctx, for this node's claim of the shard that the
// view already shows (under token) to be valid here: the Balancer records a
// claim only once its Acquired hook is done, which on a node taking many
// shards at once (a member leaving) can take longer than a request may
// wait for a view that will not move. False when the view moves to another
// claim or ctx ends first.
func (q *Quota) awaitClaim(ctx context.Context, shard int, token int64) bool {
	t := time.NewTicker(claimPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
		if node, cur, ok := q.cfg.Owners.Owner(shard); !ok || node != q.cfg.Owners.Self() || cur != token {
			return false
		}
		if _, err := q.cfg.Owners.Held(shard); err == nil {
			return true
		}
	}
}

// refresh waits, within ctx, for the view to move past the claim that was
// refused: to the token the refusing node named when it knows a later one,
// else to any other claim of the shard.
func (q *Quota) refresh(ctx context.Context, shard int, token int64, refusal error) {
	if st, ok := status.FromError(refusal); ok {
		for _, d := range st.Details() {
			if no, ok := d.(*NotOwner); ok && no.Token > token {
				q.cfg.Owners.Wait(ctx, no.Token)
				return
			}
		}
	}
	for {
		rev := q.cfg.Owners.Revision()
		if _, cur, ok := q.cfg.Owners.Owner(shard); ok && cur != token {
			return
		}
		// The owner view moves with every claim and release: wait for its
		// next revision, then look again.
		if q.cfg.Owners.Wait(ctx, rev+1) != nil {
			return
		}
	}
}

// peer is the member's reused connection at its advertised address.
func (q *Quota) peer(node string) (*peer, error) {
	addr, ok := q.cfg.Owners.Addr(node)
	if !ok {
		return nil, fmt.Errorf("member %q: %w", node, errNoAddr)
	}
	q.mu.RLock()
	p := q.peers[node]
	q.mu.RUnlock()
	if p != nil && p.addr == addr {
		return p, nil
	}
	q.mu.Lock()
	var queued []quota.ChargeStep
	if old := q.peers[node]; old != nil {
		if old.addr == addr {
			q.mu.Unlock()
			return old, nil
		}
		// The member came back elsewhere: calls still on the old
		// connection fail and answer 503, as the dead address would, and
		// the charges queued for it are routed again below.
		old.stopped = true
		close(old.stop)
		old.cli.Close()
		old.conn.Close()
		for len(old.work) > 0 {
			queued = append(queued, <-old.work)
		}
		delete(q.peers, node)
	}
	p, err := q.dialLocked(node, addr)
	q.mu.Unlock()
	for _, st := range queued {
		if rs, ok := st.(*restStep); ok {
			q.sendRest(rs.os, rs.res) // charged already: only the rest is routed again
			continue
		}
		q.ChargeThen(st)
	}
	return p, err
}

// dialLocked opens a connection to a member and starts its workers; q.mu
// is held.
func (q *Quota) dialLocked(node, addr string) (*peer, error) {
	if q.closed.Load() {
		return nil, ErrClosed
	}
	conn, err := grpc.NewClient(addr, q.cfg.DialOptions...)
	if err != nil {
		return nil, fmt.Errorf("member %q at %s: %w: %w", node, addr, ErrNoOwner, err)
	}
	p := &peer{addr: addr, conn: conn, cli: newPipeClient(NewNodeClient(conn), &q.pipeStats), work: make(chan quota.ChargeStep, q.cfg.Queue), stop: make(chan struct{})}
	for range q.cfg.Workers {
		q.wg.Go(func() { q.worker(p.work, p.stop) })
	}
	q.peers[node] = p
	return p, nil
}

// eachOther asks every other live member at once and hands each answer to
// fold, one at a time (folds never overlap, so they need no lock of their
// own); it returns once every member has answered or failed. It is the
// fan-out of the cross-node reads: shares, daily counts, threat-feed
// counts, health, and the hand-over of a leaver's shares.
func eachOther[T any](q *Quota, ask func(id string) (T, error), fold func(id string, v T, err error)) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, id := range q.cfg.Owners.Members() {
		if id == q.cfg.Owners.Self() {
			continue
		}
		wg.Go(func() {
			v, err := ask(id)
			mu.Lock()
			defer mu.Unlock()
			fold(id, v, err)
		})
	}
	wg.Wait()
}
