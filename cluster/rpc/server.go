package rpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fraudd/fraudd/actors/checks"
	"github.com/fraudd/fraudd/actors/events"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/cluster"
	"github.com/fraudd/fraudd/storage"
)

// LocalQuota is the node's own quota actors (*quota.Client).
type LocalQuota interface {
	Charge(quota.Charge) (quota.ChargeResult, error)
	ChargeThen(quota.ChargeStep)
	Usage(quota.Usage) (quota.UsageView, error)
	CountTotal(account string, now time.Time)
	Collect(quota.Collect) (quota.CollectResult, error)
	Lease(quota.Lease) (quota.LeaseGrant, error)
	Refund(quota.Refund) error
	Discount(quota.Discount) (bool, error)
}

// Freezer stops a node using its slices of an account's allowance before
// it answers its share of the account (*Quota).
type Freezer interface {
	Freeze(ctx context.Context, account string)
}

// ShareStore is the node's own store of monthly counts and totals
// (*storage.DB): what this node charged while it owned each account, and
// the shares members that left handed over to it.
type ShareStore interface {
	LoadUsage(account string, m storage.Month) (storage.MonthCounts, storage.Totals, error)
	AdoptedShares(account string, m storage.Month) ([]storage.OriginShare, error)
	AdoptShares(shares []storage.OriginShare) error
}

// ServerConfig configures NewServer.
type ServerConfig struct {
	Quota  LocalQuota
	Owners Ownership
	// Shares nil: Shares answers Unavailable (a node without a store has
	// nothing persisted to share).
	Shares ShareStore
	// Windows are the hourly windows this node handed over (nil: none),
	// answered with its shares.
	Windows *HandedWindows
	// Traffic is this node's own threat-feed counts (nil: Traffic answers
	// Unavailable).
	Traffic FeedReader
	// Events are this node's device events (nil: Resolve answers
	// Unavailable), resolved for evaluations on other nodes.
	Events interface {
		Resolve(events.Resolve) (events.Resolved, error)
		Unuse(id events.EventID, account string, at time.Time)
	}
	// EventUses gives back a settled evaluation's device event use where
	// the event is stored, this node or another (the routing *Events); nil:
	// Events, which gives back only the uses of events stored here.
	EventUses interface {
		Unuse(id events.EventID, account string, at time.Time)
	}
	// Discounts sends a refunded call's discounts to the members that read
	// this node's share with the call in it (the routing *Quota; nil: none
	// are sent, and such a member counts the call until it loads the
	// account again).
	Discounts interface {
		Discount(member string, d *DiscountRequest)
	}
	// Adopted (nil: none) is told the origins of the shares Adopt
	// stored: an account loaded without a leaver's share (it did not
	// answer) loads again with the copy kept here (SharedStore.Returned).
	Adopted func(origins []string)
	// Leases are the slices of allowance this node holds (nil: none):
	// Shares stops using an account's before it reads the share.
	Leases Freezer
	// Down is this node's own down list (nil: nothing), answered by Health.
	Down func() []string
	// Addrs are the per-address sums this node keeps as the owner of
	// address shards, and AddrOwners its claims of them (either nil:
	// ReportAddrs answers Unavailable).
	Addrs      *AddrTotals
	AddrOwners AddrOwnership
	// Owner is this node's own parts for the evaluations of accounts it
	// owns (nil: Evaluate answers Unavailable).
	Owner *checks.OwnerParts
	// Devices is this node's device history, listed for the accounts it
	// owns (nil: Devices answers Unavailable).
	Devices LocalDevices
	// Store keeps the device events other nodes collect for the accounts
	// this node owns (nil: a Collect carrying an event answers Unavailable).
	Store interface {
		Store(*storage.DeviceEvent) (events.EventID, error)
	}
	// History moves device history between nodes: MergeHistory adds the
	// records others send (nil: it answers Unavailable).
	History *HistoryMover
	// Mirror is this node's device history as lease holders mirror it
	// (the same as the Quota's SetMirror; nil: Mirror answers
	// Unavailable, and holders go to this node for each evaluation with
	// an event stored here).
	Mirror MirrorHistory
	// Recent names the events this node stored lately (the device events'
	// Recent, with their KeepRecent set): a holder that begins to mirror
	// an account is sent those of the account (nil: none are).
	Recent interface {
		Recent(account string, since time.Time, max int) []events.EventID
	}
	// Now is the owner's clock (the node's clock.Clock); time.Now when nil.
	// A charge or usage read runs at the owner's now, not the caller's:
	// an hourly window that starts at one node's time and is charged at
	// another's earlier time would start again (the quota actors take a
	// clock going back as a new window), so the nodes' clock skew would
	// admit more than the cap.
	Now func() time.Time
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// Server answers fraudd.cluster.v1.Node for this node.
type Server struct {
	UnimplementedNodeServer
	cfg   ServerConfig
	log   *slog.Logger
	calls *callBook // the charging calls received (settle.go)
	// mirrors are the holders' streams watching this node's history
	// (mirrorserve.go); mirrorLateUses counts their first uses of pushed
	// events that came after another.
	mirrors        mirrorConns
	mirrorLateUses atomic.Int64

	// stopping is closed by Drain: the Pipes say bye (pipe.go).
	stopping chan struct{}
	stopOnce sync.Once

	// lists are the node's own operator lists, attached by ServeLists
	// (lists.go); nil: the list calls answer Unavailable.
	lists atomic.Pointer[LocalLists]
}

// NewServer checks cfg.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Quota == nil || cfg.Owners == nil {
		return nil, errors.New("cluster rpc server: quota and owners are required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if _, ok := cfg.Quota.(Flusher); !ok && cfg.Shares != nil {
		log.Warn("cluster rpc server: the quota client cannot flush; the shares this node answers may miss charges answered ahead of their commit")
	}
	s := &Server{cfg: cfg, log: log, calls: newCallBook(), stopping: make(chan struct{})}
	if cfg.Mirror != nil {
		cfg.Mirror.SetMirrorSink(s.historyPush)
	}
	return s, nil
}

var _ Flusher = (*quota.Client)(nil)

// Register adds the service to g. Methods g does not know (a newer peer's)
// are answered Unimplemented by grpc itself.
func (s *Server) Register(g *grpc.Server) { RegisterNodeServer(g, s) }

// own is the fence before an owner-only action: this node's valid claim of
// the shard, and no newer claim known to the caller. A refusal is
// FailedPrecondition with NotOwner (owner and token in this node's view).
// The action is admitted under the claim (Ownership.Admit): done, which
// the caller calls once the action is over, lets a release of the shard
// go on to flush it.
func (s *Server) own(ctx context.Context, account string, callerToken int64) (token int64, done func(), err error) {
	shard := cluster.ShardOf(cluster.KindAccount, account)
	token, done, err = s.cfg.Owners.Admit(shard)
	if err != nil {
		if _, err = s.awaitClaim(ctx, shard, callerToken, err); err == nil {
			token, done, err = s.cfg.Owners.Admit(shard)
		}
	}
	if err == nil && callerToken > token {
		// The caller has seen a later claim than ours: ours is stale even
		// if our lease still looks held.
		done()
		err = fmt.Errorf("cluster %s/%04d: caller saw token %d, ours is %d: %w", cluster.KindAccount, shard, callerToken, token, cluster.ErrFenced)
	}
	if err == nil {
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < answerMargin {
			// The caller gives up before an answer could reach it (a wait
			// for the claim took its deadline): charged now, the call would
			// count although the caller answers 503. Nothing is done.
			done()
			return 0, nil, status.Error(codes.Aborted, fmt.Sprintf("cluster %s/%04d: %v of the caller's deadline left, too little to answer in time; nothing done", cluster.KindAccount, shard, time.Until(dl).Round(time.Millisecond)))
		}
		return token, done, nil
	}
	owner, cur, _ := s.cfg.Owners.Owner(shard)
	rec := errors.Is(err, ErrNoClaim) && owner == s.cfg.Owners.Self() && cur >= callerToken
	st, derr := status.New(codes.FailedPrecondition, err.Error()).WithDetails(&NotOwner{Version: version, Shard: int32(shard), Owner: owner, Token: cur, Recording: rec})
	if derr != nil {
		return 0, nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return 0, nil, st.Err()
}

// maxClaimWait bounds a wait for a claim being recorded, whatever the
// caller's deadline.
const maxClaimWait = time.Second

// answerMargin is the least of its caller's deadline an owner must have
// left to act on a call: what the work and the answer's way back take on
// a loaded machine, with room to spare.
const answerMargin = 50 * time.Millisecond

// awaitClaim waits, within the caller's deadline, for this node to record
// a claim its view already shows (its Balancer records a claim after the
// Acquired hook), when the caller routed here by that same claim (or by
// none): the caller would otherwise be refused and have to ask again.
func (s *Server) awaitClaim(ctx context.Context, shard int, callerToken int64, refusal error) (int64, error) {
	if !errors.Is(refusal, ErrNoClaim) {
		return 0, refusal
	}
	ctx, cancel := context.WithTimeout(ctx, maxClaimWait)
	defer cancel()
	node, token, ok := s.cfg.Owners.Owner(shard)
	if callerToken > 0 && (!ok || token < callerToken) {
		// The caller saw a claim this node's view has not caught up with
		// yet (tokens are etcd revisions): it may be this node's own.
		if s.cfg.Owners.Wait(ctx, callerToken) != nil {
			return 0, refusal
		}
		node, token, ok = s.cfg.Owners.Owner(shard)
	}
	if !ok || node != s.cfg.Owners.Self() || token < callerToken {
		return 0, refusal
	}
	if held, err := s.cfg.Owners.Held(shard); err == nil {
		return held, nil
	}
	t := time.NewTicker(claimPoll)
	defer t.Stop()
	limit := time.NewTimer(maxClaimWait)
	defer limit.Stop()
	for {
		last := false
		select {
		case <-ctx.Done():
			return 0, refusal
		case <-limit.C:
			// One look more: a stalled process finds the limit and the
			// claim's recording both past when it runs again.
			last = true
		case <-t.C:
		}
		if held, err := s.cfg.Owners.Held(shard); err == nil {
			return held, nil
		}
		if last {
			return 0, refusal
		}
		if n, cur, ok := s.cfg.Owners.Owner(shard); !ok || n != node || cur != token {
			return 0, refusal
		}
	}
}

// Charge implements NodeServer.
func (s *Server) Charge(ctx context.Context, r *ChargeRequest) (*ChargeReply, error) {
	c, err := chargeOf(r)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	id := r.GetCallId()
	if !s.calls.begin(id, c.Account) {
		return nil, errSettled(id)
	}
	token, done, err := s.own(ctx, c.Account, r.Token)
	if err != nil {
		s.calls.done(id, notCharged, nil, nil, nil)
		return nil, err
	}
	defer done()
	if !s.calls.arm(id) {
		return nil, errSettled(id)
	}
	c.Now = s.cfg.Now()
	res, err := s.cfg.Quota.Charge(c)
	if err := s.answered(id, err, &c, &res, nil); err != nil {
		return nil, err
	}
	return chargeReply(&res, token), nil
}

// Usage implements NodeServer.
func (s *Server) Usage(ctx context.Context, r *UsageRequest) (*UsageReply, error) {
	u, err := usageOf(r)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	token, done, err := s.own(ctx, u.Account, r.Token)
	if err != nil {
		return nil, err
	}
	defer done()
	u.Now = s.cfg.Now()
	v, err := s.cfg.Quota.Usage(u)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return usageReply(&v, token), nil
}

// maxLeaseFor bounds the time a holder may ask to use a slice.
const maxLeaseFor = time.Minute

// Lease implements NodeServer: the holder's report of its previous slice
// settled, and the next lent (quota.Lease), under this node's claim.
func (s *Server) Lease(ctx context.Context, r *LeaseRequest) (*LeaseReply, error) {
	l, err := leaseOf(r)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	token, done, err := s.own(ctx, l.Account, r.Token)
	if err != nil {
		return nil, err
	}
	defer done()
	l.Now, l.Members = s.cfg.Now(), len(s.cfg.Owners.Members())
	l.Keep = leaseKeep * l.For
	l.Report.SameClaim = r.ReportToken == token
	g, err := s.cfg.Quota.Lease(l)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return leaseReply(&g, token), nil
}

// Shares implements NodeServer: what this node's store holds, owner or not.
// A node loading the account asks: this node first stops using its slices
// of the account's allowance and waits (within the caller's deadline) for
// the charges made from them to be stored, so the share holds them all.
func (s *Server) Shares(ctx context.Context, r *SharesRequest) (*SharesReply, error) {
	m := storage.Month(r.GetMonth())
	if r.GetVersion() == 0 || r.GetAccount() == "" || len(r.GetAccount()) > maxObsAccountID || m%100 < 1 || m%100 > 12 {
		return nil, status.Error(codes.InvalidArgument, fmt.Sprintf("%v: shares for %q month %d", errBadRequest, r.GetAccount(), m))
	}
	if s.cfg.Shares == nil {
		return nil, status.Error(codes.Unavailable, "cluster rpc: this node keeps no store")
	}
	if s.cfg.Leases != nil {
		s.cfg.Leases.Freeze(ctx, r.Account)
	}
	// After the freeze: the charges made from the slices are queued now.
	if err := s.flush(ctx); err != nil {
		return nil, status.Error(codes.Unavailable, fmt.Sprintf("shares of %q: %v", r.Account, err))
	}
	rd := s.calls.beginRead(r.Account, r.GetFrom(), r.GetLoad(), m)
	c, t, err := s.cfg.Shares.LoadUsage(r.Account, m)
	if err != nil {
		s.calls.endRead(rd, false)
		return nil, status.Error(codes.Unavailable, fmt.Sprintf("shares of %q: %v", r.Account, err))
	}
	s.calls.endRead(rd, true)
	adopted, err := s.cfg.Shares.AdoptedShares(r.Account, m)
	if err != nil {
		return nil, status.Error(codes.Unavailable, fmt.Sprintf("adopted shares of %q: %v", r.Account, err))
	}
	reply := &SharesReply{
		Version: version, Node: s.cfg.Owners.Self(), Month: uint32(m),
		Used: c.Used, Lookups: c.Lookups, Warned: uint32(c.Warned), Evaluations: t.Evaluations, LimitHits: t.LimitHits,
		HourWarnedEighty: t.HourWarned[0], HourWarnedCap: t.HourWarned[1],
	}
	for i := range adopted {
		reply.Adopted = append(reply.Adopted, originShareMsg(&adopted[i]))
	}
	if s.cfg.Windows != nil {
		reply.Hour = windowMsgs(s.cfg.Windows.Get(r.Account, s.cfg.Now()))
	}
	return reply, nil
}

// maxFlush bounds a read's wait for this node's queued increments (within
// the caller's deadline).
const maxFlush = time.Second

// Flusher is a LocalQuota that may answer charges ahead of their commit
// (*quota.Client): Flush returns once the increments queued so far are
// committed, or with an error after wait.
type Flusher interface {
	Flush(wait time.Duration) error
}

// flush has the increments this node's quota actors queued so far
// committed before a read of its store (Shares, Days), so that what it
// answers holds every charge this node acknowledged. A ServerConfig.Quota
// that is no Flusher never answers ahead.
func (s *Server) flush(ctx context.Context) error {
	f, ok := s.cfg.Quota.(Flusher)
	if !ok {
		return nil
	}
	wait := maxFlush
	if d, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(d))
	}
	if err := f.Flush(wait); err != nil {
		return fmt.Errorf("this node's queued increments: %w", err)
	}
	return nil
}

// Adopt implements NodeServer: a leaving member's shares, stored under
// their origins. The whole request is refused if any share is malformed.
func (s *Server) Adopt(_ context.Context, r *AdoptRequest) (*AdoptReply, error) {
	if r.GetVersion() == 0 || r.GetFrom() == "" {
		return nil, status.Error(codes.InvalidArgument, fmt.Sprintf("%v: adopt from %q", errBadRequest, r.GetFrom()))
	}
	if s.cfg.Shares == nil {
		return nil, status.Error(codes.Unavailable, "cluster rpc: this node keeps no store")
	}
	shares := make([]storage.OriginShare, 0, len(r.Shares))
	for _, m := range r.Shares {
		sh, err := originShareOf(m)
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, fmt.Sprintf("adopt from %q: %v", r.From, err))
		}
		shares = append(shares, sh)
	}
	if err := s.cfg.Shares.AdoptShares(shares); err != nil {
		return nil, status.Error(codes.Unavailable, fmt.Sprintf("adopt from %q: %v", r.From, err))
	}
	if s.cfg.Adopted != nil {
		var origins []string
		for i := range shares {
			if !slices.Contains(origins, shares[i].Origin) {
				origins = append(origins, shares[i].Origin)
			}
		}
		s.cfg.Adopted(origins)
	}
	return &AdoptReply{Version: version, Node: s.cfg.Owners.Self(), Stored: int64(len(shares))}, nil
}
