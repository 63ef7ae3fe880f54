package rpc

import (
	"context"

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
	if !ok || q.owner.Load() == nil {
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

// sendRest queues the rest of a leased evaluation for the owner's peer (the
// client's own queue when there is none yet: the worker routes it); when it
// cannot (the client closed, a full queue), the chain goes on here.
func (q *Quota) sendRest(os checks.OwnerStep, res quota.ChargeResult) {
	c := os.ChargeReq()
	node, _, ok := q.cfg.Owners.Owner(cluster.ShardOf(cluster.KindAccount, c.Account))
	var p *peer
	if ok && node != q.cfg.Owners.Self() {
		p, _ = q.peer(node)
	}
	if q.enqueue(p, &restStep{os: os, res: res, c: *c}) != nil {
		os.Charged(res, nil)
	}
}

// runRest runs on a worker: the event and the history at the owner, or,
// when the owner is this node by now, here. When the owner surely did
// nothing (it predates EvaluateLeased, refused the call as not the owner,
// or was never reached) the chain goes on here as before: resolve, then
// observe locally. A call that failed after it was sent may have counted
// the event's use and the visit at the owner: doing them again here would
// count them twice, so the facts fail open instead.
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
	switch {
	case err != nil && ownerDidNothing(err):
		rs.os.Charged(rs.res, nil)
		return
	case err != nil:
		rs.os.OwnerDone(checks.OwnerResult{Charge: rs.res, EventErr: err, HistErr: err})
		return
	}
	res.Charge, res.ChargeErr = rs.res, nil
	q.leasedRests.Add(1)
	q.seedMirror(rs.c.Account, w, &res)
	rs.os.OwnerDone(res)
}

// ownerDidNothing reports whether a failed call to the owner surely ran
// nothing there: it never left this node (no owner, no address, no
// connection: no gRPC status), or the owner said so (nothingDone).
func ownerDidNothing(err error) bool {
	if _, ok := status.FromError(err); !ok {
		return true
	}
	return nothingDone(err)
}

// EvaluateLeased implements NodeServer.
func (s *Server) EvaluateLeased(ctx context.Context, r *EvaluateRequest) (*EvaluateReply, error) {
	_, w, token, done, err := s.ownerWork(ctx, r)
	if err != nil {
		return nil, err
	}
	defer done()
	res := s.cfg.Owner.Rest(w)
	res.Charge = quota.ChargeResult{Allowed: true}
	return evaluateReply(&res, w, token), nil
}
