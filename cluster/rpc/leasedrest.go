package rpc

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fraudd/fraudd/actors/checks"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/cluster"
)

// A leased evaluation (its charge served from this node's slice of the
// account's allowance) that carries a device event stored at another node
// needs one round trip anyway, to resolve the event. It makes that trip to
// the account's owner with the history observation too (EvaluateLeased):
// the owner resolves the event wherever it is stored (the owner usually
// stored it: collections store events at the owner) and observes its own
// history. So the customer's device history stays one across the nodes for
// leased evaluations with device evidence, at no extra hop. A leased
// evaluation without an event, or with one this node stored, makes no hop
// and observes this node's history (the records reach the owner once the
// lease ends: HistoryMover).

// restStep is the rest of a leased evaluation on its way to the owner: it
// rides a peer's work queue like a chained charge, but its charge is made.
type restStep struct {
	os  checks.OwnerStep
	res quota.ChargeResult // the leased charge's answer
	c   quota.Charge       // a copy of the charge (it names the account)
}

// ChargeReq implements quota.ChargeStep (the queue's element type).
func (r *restStep) ChargeReq() *quota.Charge { return &r.c }

// Charged implements quota.ChargeStep: nothing charges a restStep; the
// chain goes on here, as for a leased charge without owner work.
func (r *restStep) Charged(quota.ChargeResult, error) { r.os.Charged(r.res, nil) }

// Fail implements actors.Failer: the client closed with the step queued.
// The charge stands; the chain goes on here and its remote steps fail.
func (r *restStep) Fail(error) { r.os.Charged(r.res, nil) }

// restAtOwner is the owner step of st when its rest should run at the
// owner after a leased charge: it carries owner work with an event this
// node did not store, and the owner answers EvaluateLeased.
func (q *Quota) restAtOwner(st quota.ChargeStep) checks.OwnerStep {
	os, ok := st.(checks.OwnerStep)
	if !ok || q.owner.Load() == nil || q.noLeasedRest.Load() {
		return nil
	}
	w := os.OwnerWork()
	if w.Resolve == nil {
		return nil
	}
	if evs := q.evs.Load(); evs != nil && evs.mine(&w.Resolve.ID) {
		return nil
	}
	return os
}

// sendRest queues the rest of a leased evaluation for the owner's peer;
// when it cannot (no peer, a full queue), the chain goes on here.
func (q *Quota) sendRest(os checks.OwnerStep, res quota.ChargeResult) {
	c := os.ChargeReq()
	node, _, ok := q.cfg.Owners.Owner(cluster.ShardOf(cluster.KindAccount, c.Account))
	var p *peer
	if ok && node != q.cfg.Owners.Self() {
		p, _ = q.peer(node)
	}
	rs := &restStep{os: os, res: res, c: *c}
	q.mu.RLock()
	defer q.mu.RUnlock()
	work := q.work
	if p != nil && !p.stopped {
		work = p.work
	}
	if q.closed.Load() {
		os.Charged(res, nil)
		return
	}
	select {
	case work <- rs:
	default:
		os.Charged(res, nil)
	}
}

// runRest runs on a worker: the event and the history at the owner, or,
// when the owner is this node by now, here. An owner that predates
// EvaluateLeased, or one that cannot be reached, leaves the chain to go on
// here as before (resolve, then observe locally).
func (q *Quota) runRest(rs *restStep) {
	p := q.owner.Load()
	w := rs.os.OwnerWork()
	res, err := route(q, &q.remote, rs.c.Account,
		func() (checks.OwnerResult, error) { return p.Rest(w), nil },
		func(ctx context.Context, cli NodeClient, token int64) (checks.OwnerResult, int64, error) {
			rep, err := cli.EvaluateLeased(ctx, evaluateMsg(&rs.c, w, token))
			if err != nil {
				return checks.OwnerResult{}, 0, err
			}
			r, err := ownerResultOf(rep, w)
			return r, rep.GetCharge().GetToken(), err
		})
	if err != nil {
		if status.Code(err) == codes.Unimplemented {
			q.noLeasedRest.Store(true) // a rolling deploy: the old way until this node restarts
		}
		rs.os.Charged(rs.res, nil)
		return
	}
	res.Charge, res.ChargeErr = rs.res, nil
	q.leasedRests.Add(1)
	rs.os.OwnerDone(res)
}

// EvaluateLeased implements NodeServer.
func (s *Server) EvaluateLeased(ctx context.Context, r *EvaluateRequest) (*EvaluateReply, error) {
	_, w, token, err := s.ownerWork(ctx, r)
	if err != nil {
		return nil, err
	}
	res := s.cfg.Owner.Rest(w)
	res.Charge = quota.ChargeResult{Allowed: true}
	return evaluateReply(&res, w, token), nil
}
