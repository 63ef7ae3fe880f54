package fastapi

import (
	"time"

	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/wire"
)

// handleUsage is GET /v1/usage (SPEC 4.4): the calling key's own figures,
// consuming nothing. Its per-address limit was taken with authentication.
func (s *Server) handleUsage(ctx *fasthttp.RequestCtx, r *request) {
	v := r.auth.View
	u, err := s.deps.Quota.Usage(quota.Usage{Account: v.ID, Bucket: bucket(r.auth.Kind), Limits: limitsOf(v, r), Now: r.now})
	if err != nil {
		s.log.Error("quota usage failed", "err", err, "account", v.ID)
		s.storageUnavailable(ctx)
		return
	}
	out := wire.Usage{
		KeyType: u.KeyType, HourlyLimit: u.HourlyLimit, UsedThisHour: u.UsedThisHour, Remaining: u.Remaining,
		Uncapped: u.Uncapped, TotalEvaluations: u.TotalEvaluations, LimitHits: u.LimitHits, Plan: u.Plan,
		MonthlyLimit: u.MonthlyLimit, MonthUsed: u.MonthUsed, MonthlyLookupLimit: u.MonthlyLookupLimit,
		MonthLookupsUsed: u.MonthLookupsUsed, MonthResetsAt: fmtTime(u.MonthResetsAt),
		ResetsAt: optTime(u.ResetsAt), GrandfatheredUntil: optTime(u.GrandfatheredUntil),
	}
	s.writeJSON(ctx, fasthttp.StatusOK, &out)
}

func optTime(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := fmtTime(*t)
	return &s
}
