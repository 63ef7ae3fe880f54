package rpc

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fraudd/fraudd/actors/events"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/storage"
)

// The daily device-collection budget in a cluster: like the quotas, it is
// counted at the owner of the account's shard, so an account stores at most
// its budget a day whichever nodes its visitors' browsers reach. A
// collection on another node is one round trip to the owner.

// Collect implements checks.Quota: at the owner of the account's shard.
func (q *Quota) Collect(m quota.Collect) (quota.CollectResult, error) {
	if q.local(m.Account) {
		return q.cfg.Local.Collect(m)
	}
	return route(q, &q.remote, m.Account,
		func() (quota.CollectResult, error) { return q.cfg.Local.Collect(m) },
		func(ctx context.Context, cli NodeClient, token int64) (quota.CollectResult, int64, error) {
			rep, err := cli.Collect(ctx, collectMsg(&m, token, nil))
			if err != nil {
				return quota.CollectResult{}, 0, err
			}
			res, err := collectResultOf(rep)
			return res, rep.Token, err
		})
}

// CollectEvent implements checks.OwnerCollector: the budget and the event
// go to the owner of the account's shard in one call, and the owner stores
// the event under an id naming itself, so an evaluation on any node
// resolves it at the owner it calls anyway. An owner of an older build
// ignores the event: it is stored here then, as before.
func (q *Quota) CollectEvent(m quota.Collect, c events.Collected) (quota.CollectResult, events.EventID, error) {
	evs := q.evs.Load()
	if evs == nil {
		return quota.CollectResult{}, events.EventID{}, fmt.Errorf("cluster rpc: collect before the device events are set: %w", ErrNoOwner)
	}
	e := events.EventOf(c)
	local := func() (collected, error) {
		res, err := q.cfg.Local.Collect(m)
		if err != nil || !res.Allowed {
			return collected{res: res}, err
		}
		id, err := evs.local.Store(&e)
		return collected{res: res, id: id, stored: true}, err
	}
	var out collected
	var err error
	if q.local(m.Account) {
		out, err = local()
	} else {
		out, err = route(q, &q.remote, m.Account, local,
			func(ctx context.Context, cli NodeClient, token int64) (collected, int64, error) {
				rep, err := cli.Collect(ctx, collectMsg(&m, token, storage.MarshalEvent(nil, &e)))
				if err != nil {
					return collected{}, 0, err
				}
				res, err := collectResultOf(rep)
				if err != nil {
					return collected{}, 0, err
				}
				out := collected{res: res}
				if id := rep.GetEventId(); len(id) == storage.EventIDLen && res.Allowed {
					copy(out.id[:], id)
					out.stored = true
				} else if id != nil {
					return collected{}, 0, fmt.Errorf("cluster rpc: collect reply: a %d-byte event id", len(id))
				}
				return out, rep.Token, nil
			})
	}
	if err != nil || !out.res.Allowed {
		return out.res, events.EventID{}, err
	}
	if !out.stored {
		out.id, err = evs.local.Store(&e)
	} else if q.local(m.Account) {
		if mr := q.mirror.Load(); mr != nil {
			mirrorStored(mr.hist, evs.local.Resolve, m.Account, out.id, e.Created)
		}
	}
	return out.res, out.id, err
}

// collected is a budget's answer and where the event went.
type collected struct {
	res    quota.CollectResult
	id     events.EventID
	stored bool
}

func collectMsg(m *quota.Collect, token int64, event []byte) *CollectRequest {
	return &CollectRequest{Version: version, Account: m.Account, BudgetEvents: m.Budget.Events, BudgetBytes: m.Budget.Bytes, Bytes: m.Bytes, Token: token, Event: event}
}

func collectResultOf(rep *CollectReply) (quota.CollectResult, error) {
	if rep.GetRetryAfter() < 0 || rep.GetAllowed() == (rep.GetRetryAfter() > 0) {
		return quota.CollectResult{}, fmt.Errorf("cluster rpc: collect reply: allowed %v, retry after %d", rep.GetAllowed(), rep.GetRetryAfter())
	}
	return quota.CollectResult{Allowed: rep.Allowed, RetryAfter: rep.RetryAfter}, nil
}

// Collect implements NodeServer: the owner takes the event from the
// account's budget, at its own clock (the budget's day is the owner's), and
// stores the event the request carries once the budget allows it.
func (s *Server) Collect(ctx context.Context, r *CollectRequest) (*CollectReply, error) {
	if r.GetVersion() == 0 || r.GetAccount() == "" || len(r.GetAccount()) > maxObsAccountID || r.GetBudgetEvents() <= 0 || r.GetBudgetBytes() <= 0 || r.GetBytes() < 0 {
		return nil, status.Error(codes.InvalidArgument, fmt.Sprintf("%v: collect for %q", errBadRequest, r.GetAccount()))
	}
	var e *storage.DeviceEvent
	if r.Event != nil {
		var err error
		if e, err = eventOf(r); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		if s.cfg.Store == nil {
			return nil, status.Error(codes.Unavailable, "cluster rpc: this node keeps no device events")
		}
	}
	token, done, err := s.own(ctx, r.Account, r.Token)
	if err != nil {
		return nil, err
	}
	defer done()
	now := s.cfg.Now()
	res, err := s.cfg.Quota.Collect(quota.Collect{Account: r.Account, Budget: quota.CollectBudget{Events: r.BudgetEvents, Bytes: r.BudgetBytes}, Bytes: r.Bytes, Now: now})
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	rep := &CollectReply{Version: version, Allowed: res.Allowed, RetryAfter: res.RetryAfter, Token: token}
	if e != nil && res.Allowed {
		// The owner's clock dates the event, as it will judge its age
		// when it resolves it (the collecting node's may differ).
		e.Created = now
		id, err := s.cfg.Store.Store(e)
		if err != nil {
			return nil, status.Error(codes.Unavailable, err.Error())
		}
		rep.EventId = id[:]
		if s.cfg.Events != nil {
			mirrorStored(s.cfg.Mirror, s.cfg.Events.Resolve, r.Account, id, now)
		}
	}
	return rep, nil
}

// eventOf checks a collected event another node sends: a stored event's
// form, for the request's account, with no id yet and within the bounds a
// collection keeps.
func eventOf(r *CollectRequest) (*storage.DeviceEvent, error) {
	e, err := storage.UnmarshalEvent(r.Event)
	if err != nil {
		return nil, fmt.Errorf("%w: collected event: %w", errBadRequest, err)
	}
	// A visitor hash past storage's bound would fail the whole device
	// write of its sync interval (storage.WriteDevice refuses its
	// sightings), every other event in it with it.
	if e.Account != r.Account || e.ID != (events.EventID{}) || e.Uses != 0 || len(e.Signals) > storage.MaxEventSignals || e.Created.IsZero() ||
		len(e.VisitorID) > storage.MaxVisitorLen {
		return nil, fmt.Errorf("%w: a collected event of %q for %q", errBadRequest, e.Account, r.Account)
	}
	return e, nil
}
