package rpc

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fraudd/fraudd/actors/checks"
	"github.com/fraudd/fraudd/actors/devicehist"
	"github.com/fraudd/fraudd/actors/events"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/storage"
)

// An evaluation on a node that does not own the account sends its charge,
// its device event and its history observation to the owner in one
// Evaluate call (checks.OwnerStep): the customer's device history is kept
// where the account lives, so every node's evaluations of one customer add
// to one history, and the round trips stay at one.

// Bounds of an observation's strings, as the pipeline checks them (runes
// of up to four bytes).
const (
	maxObsEventID   = 4 * checks.MaxEventID
	maxObsAccountID = 4 * checks.MaxAccountID
)

// SetOwner gives the client and the server the node's own parts for
// evaluations whose account this node owns: the local quota, the routing
// device events (an event stored elsewhere is resolved there) and the
// local device history. Until it is called, chained charges carry no owner
// work and the history stays where the evaluation ran.
func (q *Quota) SetOwner(p *checks.OwnerParts) { q.owner.Store(p) }

// evaluate runs c and w at the account's owner: here when this node owns
// it by the time the route decides, else with one Evaluate call.
//
// An event this node stored is not sent: its device is read here without
// a hop (a peek counts no use) and travels in the observation, and its use
// is counted here once the owner allowed the charge. An evaluation of an
// event collected on the node it runs on (a sticky load balancer) thus
// makes one round trip, not two.
//
// ok is false when the owner predates Evaluate (a rolling deploy): nothing
// was done, and the caller charges there and does the rest here, as before.
func (q *Quota) evaluate(p *checks.OwnerParts, c *quota.Charge, w checks.OwnerWork) (_ checks.OwnerResult, ok bool) {
	var here *events.Resolve
	evs := q.evs.Load()
	if evs != nil && w.Resolve != nil && evs.mine(&w.Resolve.ID) {
		here, w.Resolve = w.Resolve, nil
		if w.Observe != nil {
			obs := *w.Observe
			if r, err := evs.local.Peek(*here); err == nil && r.Found {
				obs.DeviceID, obs.Replayed = r.Event.VisitorID, r.Replayed
			}
			w.Observe = &obs
		}
	}
	res, err := q.evaluateAt(p, c, w)
	switch {
	case status.Code(err) == codes.Unimplemented:
		return res, false
	case err != nil:
		return checks.OwnerResult{ChargeErr: err}, true
	}
	if here != nil && res.Charge.Allowed {
		res.Resolved, res.EventErr = evs.local.Resolve(*here)
	}
	// A peek (the test key) used nothing: a pushed copy stays fresh.
	if w.Resolve != nil && !peeks(w) && res.EventErr == nil && res.Resolved.Found {
		q.usedMirrorEvent(c.Account, &w.Resolve.ID)
	}
	return res, true
}

func (q *Quota) evaluateAt(p *checks.OwnerParts, c *quota.Charge, w checks.OwnerWork) (checks.OwnerResult, error) {
	res, err := routeCalls(q, &q.remote, c.Account, true,
		func() (checks.OwnerResult, error) { return p.Run(*c, w), nil },
		func(ctx context.Context, cli NodeClient, token int64, id uint64) (checks.OwnerResult, int64, error) {
			m := evaluateMsg(c, w, token)
			m.Charge.CallId = id
			rep, err := cli.Evaluate(ctx, m)
			if err != nil {
				return checks.OwnerResult{}, 0, err
			}
			r, err := ownerResultOf(rep, w)
			return r, rep.GetCharge().GetToken(), err
		})
	if err == nil && res.ChargeErr != nil {
		err = res.ChargeErr
	}
	return res, err
}

// Evaluate implements NodeServer.
func (s *Server) Evaluate(ctx context.Context, r *EvaluateRequest) (*EvaluateReply, error) {
	id := r.GetCharge().GetCallId()
	if !s.calls.begin(id, r.GetCharge().GetAccount()) {
		return nil, errSettled(id)
	}
	c, w, token, done, err := s.ownerWork(ctx, r)
	if err != nil {
		s.calls.done(id, notCharged, nil, nil, nil)
		return nil, err
	}
	defer done()
	if !s.calls.arm(id) {
		return nil, errSettled(id)
	}
	res := s.cfg.Owner.Run(c, w)
	var use *eventUse
	if w.Resolve != nil && !w.Resolve.Peek && res.EventErr == nil && res.Resolved.Found && id != 0 {
		use = &eventUse{id: w.Resolve.ID, at: w.Resolve.Now}
	}
	if err := s.answered(id, res.ChargeErr, &c, &res.Charge, use); err != nil {
		return nil, err
	}
	return evaluateReply(&res, w, token), nil
}

// ownerWork checks an Evaluate or EvaluateLeased request and fences it:
// the charge and work it asks for, at the owner's now, the claim's token,
// and the admission's done (Server.own), to call once the work is over.
func (s *Server) ownerWork(ctx context.Context, r *EvaluateRequest) (quota.Charge, checks.OwnerWork, int64, func(), error) {
	if s.cfg.Owner == nil {
		return quota.Charge{}, checks.OwnerWork{}, 0, nil, status.Error(codes.Aborted, "cluster rpc: this node evaluates no owner work; nothing done")
	}
	c, err := chargeOf(r.GetCharge())
	if err != nil {
		return c, checks.OwnerWork{}, 0, nil, status.Error(codes.InvalidArgument, err.Error())
	}
	w, err := ownerWorkOf(r, c.Account)
	if err != nil {
		return c, w, 0, nil, status.Error(codes.InvalidArgument, err.Error())
	}
	token, done, err := s.own(ctx, c.Account, r.GetCharge().GetToken())
	if err != nil {
		return c, w, 0, nil, err
	}
	// The owner's clock decides, as for a charge: the windows, the event's
	// age and the history's days are the owner's.
	c.Now = s.cfg.Now()
	if w.Resolve != nil {
		w.Resolve.Now = c.Now
		w.Resolve.Deadline = factsDeadline(ctx)
	}
	if w.Observe != nil {
		w.Observe.Now = c.Now
	}
	return c, w, token, done, nil
}

func evaluateMsg(c *quota.Charge, w checks.OwnerWork, token int64) *EvaluateRequest {
	m := &EvaluateRequest{Version: version, Charge: chargeMsg(c, token)}
	if w.Resolve != nil {
		m.EventId = w.Resolve.ID[:]
	}
	if w.Observe != nil {
		m.Observation = observationMsg(w.Observe)
	}
	return m
}

func observationMsg(o *devicehist.Observation) *Observation {
	m := &Observation{Test: o.Test, EventId: o.EventID, AccountId: o.AccountID, SharedExit: o.SharedExit, DeviceId: o.DeviceID}
	if o.IP.IsValid() {
		m.Ip = o.IP.AsSlice()
	}
	return m
}

// ownerWorkOf checks and converts what a request asks after the charge of
// account.
func ownerWorkOf(r *EvaluateRequest, account string) (checks.OwnerWork, error) {
	var w checks.OwnerWork
	if id := r.GetEventId(); id != nil {
		if len(id) != storage.EventIDLen {
			return w, fmt.Errorf("%w: a %d-byte event id", errBadRequest, len(id))
		}
		w.Resolve = &events.Resolve{Account: account}
		copy(w.Resolve.ID[:], id)
	}
	if o := r.GetObservation(); o != nil {
		obs, err := observationOf(o, account)
		if err != nil {
			return w, err
		}
		w.Observe = obs
	}
	return w, nil
}

// observationOf checks and converts an observation of account's history.
func observationOf(o *Observation, account string) (*devicehist.Observation, error) {
	if len(o.GetEventId()) > maxObsEventID || len(o.GetAccountId()) > maxObsAccountID || len(o.GetDeviceId()) > storage.MaxHistDevice {
		return nil, fmt.Errorf("%w: an observation's event id of %d bytes, account id of %d, device id of %d", errBadRequest, len(o.GetEventId()), len(o.GetAccountId()), len(o.GetDeviceId()))
	}
	obs := &devicehist.Observation{Customer: account, Test: o.GetTest(), EventID: o.GetEventId(), AccountID: o.GetAccountId(), SharedExit: o.GetSharedExit(), DeviceID: o.GetDeviceId()}
	if len(o.GetIp()) > 0 {
		ip, ok := netip.AddrFromSlice(o.GetIp())
		if !ok {
			return nil, fmt.Errorf("%w: a %d-byte address", errBadRequest, len(o.GetIp()))
		}
		obs.IP = ip
	}
	return obs, nil
}

func evaluateReply(res *checks.OwnerResult, w checks.OwnerWork, token int64) *EvaluateReply {
	rep := &EvaluateReply{Version: version, Charge: chargeReply(&res.Charge, token)}
	if !res.Charge.Allowed {
		return rep
	}
	if w.Resolve != nil {
		if res.EventErr != nil {
			rep.EventError = res.EventErr.Error()
		} else {
			rep.Resolved = resolveReply(&res.Resolved)
		}
	}
	if w.Observe != nil {
		if res.HistErr != nil {
			rep.HistoryError = res.HistErr.Error()
		} else {
			rep.Facts = factsMsg(&res.Facts)
		}
	}
	return rep
}

// errOwnerFacts is a fact the owner could not read, as the caller sees it.
var errOwnerFacts = errors.New("at the account's owner")

// ownerResultOf checks and converts the owner's answer to w. A malformed
// charge fails the whole answer (the call's admission cannot be judged);
// a malformed event or history fails that fact alone, as a local error
// would.
func ownerResultOf(r *EvaluateReply, w checks.OwnerWork) (checks.OwnerResult, error) {
	var out checks.OwnerResult
	if r.GetCharge() == nil {
		return out, fmt.Errorf("cluster rpc: evaluate reply without a charge: %w", errBadRequest)
	}
	var err error
	if out.Charge, err = chargeResultOf(r.Charge); err != nil || !out.Charge.Allowed {
		return out, err
	}
	if w.Resolve != nil {
		switch {
		case r.EventError != "":
			out.EventErr = fmt.Errorf("device event %w: %s", errOwnerFacts, r.EventError)
		case r.Resolved == nil:
			out.EventErr = fmt.Errorf("cluster rpc: evaluate reply without the device event: %w", errBadRequest)
		default:
			out.Resolved, out.EventErr = resolvedOf(r.Resolved)
		}
	}
	if w.Observe != nil {
		switch {
		case r.HistoryError != "":
			out.HistErr = fmt.Errorf("device history %w: %s", errOwnerFacts, r.HistoryError)
		case r.Facts == nil:
			out.HistErr = fmt.Errorf("cluster rpc: evaluate reply without the history: %w", errBadRequest)
		default:
			out.Facts, out.HistErr = factsOf(r.Facts)
		}
	}
	return out, nil
}

func factsMsg(f *devicehist.Facts) *Facts {
	return &Facts{
		Device: f.Device, Visits: int64(f.History.Visits), FirstSeenUnixNano: unixNano(f.History.FirstSeen), LastSeenUnixNano: unixNano(f.History.LastSeen),
		HistoryAccounts: int64(f.History.Accounts), Visits_24H: int64(f.Visits24h), Repeated: f.Repeated, LinkedAccounts: int64(f.LinkedAccounts),
		Account: f.Account, DeviceAccounts_24H: int64(f.DeviceAccounts24h), AccountDevices_24H: int64(f.AccountDevices24h),
		IpAccounts_24H: int64(f.IPAccounts24h), IpCounted: f.IPCounted, NewDevice: f.NewDevice, RelatedAccounts_90D: int64(f.RelatedAccounts90d),
	}
}

// maxFactCount bounds a count in the owner's facts (the history's lists
// are bounded far below it).
const maxFactCount = 1 << 31

func factsOf(m *Facts) (devicehist.Facts, error) {
	for _, n := range [...]int64{m.Visits, m.HistoryAccounts, m.Visits_24H, m.LinkedAccounts, m.DeviceAccounts_24H, m.AccountDevices_24H, m.IpAccounts_24H, m.RelatedAccounts_90D} {
		if n < 0 || n > maxFactCount {
			return devicehist.Facts{}, fmt.Errorf("cluster rpc: evaluate reply: a history count of %d: %w", n, errBadRequest)
		}
	}
	return devicehist.Facts{
		Device:         m.Device,
		History:        devicehist.History{Visits: int(m.Visits), FirstSeen: fromUnixNano(m.FirstSeenUnixNano), LastSeen: fromUnixNano(m.LastSeenUnixNano), Accounts: int(m.HistoryAccounts)},
		Visits24h:      int(m.Visits_24H),
		Repeated:       m.Repeated,
		LinkedAccounts: int(m.LinkedAccounts),
		Account:        m.Account, DeviceAccounts24h: int(m.DeviceAccounts_24H), AccountDevices24h: int(m.AccountDevices_24H),
		IPAccounts24h: int(m.IpAccounts_24H), IPCounted: m.IpCounted, NewDevice: m.NewDevice, RelatedAccounts90d: int(m.RelatedAccounts_90D),
	}, nil
}

// factsDeadline is when the owner stops waiting for an event stored on a
// third node: three quarters into what is left of its caller's deadline, so
// that its answer (the charge, with the event's fact failed open) still
// reaches the caller in time rather than the whole call failing as 503.
// Zero when the caller set no deadline.
func factsDeadline(ctx context.Context) time.Time {
	dl, ok := ctx.Deadline()
	if !ok {
		return time.Time{}
	}
	return dl.Add(-time.Until(dl) / 4)
}
