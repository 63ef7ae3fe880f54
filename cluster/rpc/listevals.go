package rpc

import (
	"context"
	"fmt"
	"time"

	"github.com/fraudd/fraudd/actors/recent"
)

// EvaluationList is an account's recent evaluations in a cluster (GET
// /admin/v1/accounts/{id}/evaluations): every member's, merged (lists.go).
type EvaluationList struct {
	q     *Quota
	local LocalEvaluations
}

// EvaluationList returns the merged list over this node's own.
func (q *Quota) EvaluationList(local LocalEvaluations) *EvaluationList {
	return &EvaluationList{q: q, local: local}
}

// List is recent.Client.List over the cluster: the account's newest
// l.Limit evaluations of the last recent.Retention as of l.Now, newest
// first, whichever member answered them. This node's own list failing
// fails it (the single node's answer); another member's is left out.
func (e *EvaluationList) List(l recent.List) ([]*recent.Evaluation, error) {
	l.Limit = min(max(l.Limit, 0), recent.Size)
	own, err := e.local.List(l)
	if err != nil || l.Limit == 0 {
		return own, err
	}
	parts := gather(e.q, "recent evaluations", l.Account, own, func(ctx context.Context, cli NodeClient, id string) ([]*recent.Evaluation, error) {
		r, err := cli.RecentEvaluations(ctx, &ListRequest{Version: version, Account: l.Account, Limit: int64(l.Limit), NowUnixNano: l.Now.UnixNano()})
		if err != nil {
			return nil, err
		}
		return evaluationsOf(r, id, l.Account, l.Limit)
	})
	// Newest first, as the store's key (time, then sequence) orders one
	// node's; a sequence is the node's own, so ties between nodes keep
	// the member order.
	return mergeNewest(parts, l.Limit, func(a, b *recent.Evaluation) int { return b.At.Compare(a.At) }), nil
}

// RecentEvaluations implements NodeServer: this node's own part.
func (s *Server) RecentEvaluations(_ context.Context, r *ListRequest) (*EvaluationsReply, error) {
	if err := listRequestOf(r, recent.Size, false, true); err != nil {
		return nil, err
	}
	l, ok := s.listsOf()
	if !ok || l.Evaluations == nil {
		return nil, unavailable("this node lists no recent evaluations")
	}
	list, err := l.Evaluations.List(recent.List{Account: r.Account, Now: fromUnixNano(r.NowUnixNano), Limit: int(r.Limit)})
	if err != nil {
		return nil, unavailable(fmt.Sprintf("recent evaluations of %q: %v", r.Account, err))
	}
	rep := &EvaluationsReply{Version: version, Node: s.cfg.Owners.Self(), Evaluations: make([]*EvaluationLine, 0, min(len(list), int(r.Limit)))}
	for _, e := range list[:min(len(list), int(r.Limit))] {
		rep.Evaluations = append(rep.Evaluations, &EvaluationLine{AtUnixNano: e.At.UnixNano(), RequestId: clip(e.RequestID, maxListWord),
			Decision: clip(e.Decision, maxListWord), EngineDecision: clip(e.EngineDecision, maxListWord), Source: clip(e.Source, maxListWord),
			Rule: clip(e.Rule, maxListWord), RuleMatched: clipWords(e.RuleMatched), Exception: clip(e.Exception, maxListWord),
			Risk: int64(e.Risk), Reasons: clipWords(e.Reasons), Ip: clip(e.IP, maxListWord), Country: clip(e.Country, maxListWord), Test: e.Test})
	}
	return rep, nil
}

// evaluationsOf checks and converts a member's part: its own, at most
// limit lines, newest first, each within the bounds the server keeps
// (lists.go) and with a risk score of 0 to 100.
func evaluationsOf(r *EvaluationsReply, id, account string, limit int) ([]*recent.Evaluation, error) {
	if err := checkNode(r.GetNode(), id, "recent evaluations"); err != nil {
		return nil, err
	}
	if len(r.GetEvaluations()) > limit {
		return nil, fmt.Errorf("member %s answered %d recent evaluations for at most %d: %w", id, len(r.Evaluations), limit, errBadRequest)
	}
	out := make([]*recent.Evaluation, len(r.Evaluations))
	var last time.Time
	for i, e := range r.Evaluations {
		at := fromUnixNano(e.GetAtUnixNano())
		if e == nil || e.AtUnixNano <= 0 || (i > 0 && at.After(last)) || e.Risk < 0 || e.Risk > 100 ||
			!wordsOK([]string{e.RequestId, e.Decision, e.EngineDecision, e.Source, e.Rule, e.Exception, e.Ip, e.Country}) ||
			!wordsOK(e.RuleMatched) || !wordsOK(e.Reasons) {
			return nil, fmt.Errorf("member %s answered recent evaluation %d out of order or out of bounds: %w", id, i, errBadRequest)
		}
		last = at
		out[i] = &recent.Evaluation{Account: account, At: at, RequestID: e.RequestId, Decision: e.Decision, EngineDecision: e.EngineDecision,
			Source: e.Source, Rule: e.Rule, RuleMatched: e.RuleMatched, Exception: e.Exception, Risk: int(e.Risk), Reasons: e.Reasons,
			IP: e.Ip, Country: e.Country, Test: e.Test}
	}
	return out, nil
}
