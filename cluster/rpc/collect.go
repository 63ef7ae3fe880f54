package rpc

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fraudd/fraudd/actors/quota"
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
			rep, err := cli.Collect(ctx, &CollectRequest{Version: version, Account: m.Account,
				BudgetEvents: m.Budget.Events, BudgetBytes: m.Budget.Bytes, Bytes: m.Bytes, Token: token})
			if err != nil {
				return quota.CollectResult{}, 0, err
			}
			if rep.GetRetryAfter() < 0 || rep.GetAllowed() == (rep.GetRetryAfter() > 0) {
				return quota.CollectResult{}, 0, fmt.Errorf("cluster rpc: collect reply: allowed %v, retry after %d", rep.GetAllowed(), rep.GetRetryAfter())
			}
			return quota.CollectResult{Allowed: rep.Allowed, RetryAfter: rep.RetryAfter}, rep.Token, nil
		})
}

// Collect implements NodeServer: the owner takes the event from the
// account's budget, at its own clock (the budget's day is the owner's).
func (s *Server) Collect(ctx context.Context, r *CollectRequest) (*CollectReply, error) {
	if r.GetVersion() == 0 || r.GetAccount() == "" || r.GetBudgetEvents() <= 0 || r.GetBudgetBytes() <= 0 || r.GetBytes() < 0 {
		return nil, status.Error(codes.InvalidArgument, fmt.Sprintf("%v: collect for %q", errBadRequest, r.GetAccount()))
	}
	token, err := s.own(ctx, r.Account, r.Token)
	if err != nil {
		return nil, err
	}
	res, err := s.cfg.Quota.Collect(quota.Collect{Account: r.Account, Budget: quota.CollectBudget{Events: r.BudgetEvents, Bytes: r.BudgetBytes}, Bytes: r.Bytes, Now: s.cfg.Now()})
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return &CollectReply{Version: version, Allowed: res.Allowed, RetryAfter: res.RetryAfter, Token: token}, nil
}
