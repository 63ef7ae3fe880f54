package fastapi

import (
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/actors/quota"
)

const codeMonthly = "monthly_quota_exceeded"

// bucket is the hourly bucket of the key that authenticated.
func bucket(k accounts.KeyKind) quota.Bucket {
	if k == accounts.KeyTest {
		return quota.Test
	}
	return quota.Live
}

// limitsOf computes the account's allowances at now.
func limitsOf(v *accounts.View, r *request) quota.Limits {
	return quota.LimitsFor(v.Plan, v.HourlyLimit, v.MonthlyLimit, v.CreatedAt, r.now)
}

// charge checks and charges one call for the authenticated account in one
// actor hop, sets the X-RateLimit-* headers for capped accounts, and answers
// 429 or 503 itself when the call may not proceed. What the call counts toward
// is the caller's decision (see the quota package doc's table).
func (s *Server) charge(ctx *fasthttp.RequestCtx, r *request, kind quota.Kind, monthly, total bool) (quota.ChargeResult, bool) {
	v := r.auth.View
	res, err := s.chargeOnly(r, kind, monthly, total)
	if err != nil {
		s.log.Error("quota charge failed", "err", err, "account", v.ID)
		s.storageUnavailable(ctx)
		return res, false
	}
	if res.Capped {
		h := &ctx.Response.Header
		h.Set(headerRLLimit, strconv.FormatInt(res.Limit, 10))
		h.Set(headerRLRemaining, strconv.FormatInt(res.Remaining, 10))
		h.Set(headerRLReset, strconv.FormatInt(res.Reset, 10))
	}
	switch res.Refusal {
	case quota.RefusedMonthly:
		s.writeRetry(ctx, fasthttp.StatusTooManyRequests, int(res.RetryAfter),
			"Monthly allowance used up; it renews at 00:00 UTC on the 1st.", codeMonthly, "")
		return res, false
	case quota.RefusedHourly:
		s.writeRetry(ctx, fasthttp.StatusTooManyRequests, int(res.RetryAfter),
			"Hourly request limit reached.", "", "The hourly window started at your first request; retry after Retry-After seconds.")
		return res, false
	}
	return res, true
}

// chargeOnly checks and charges without answering anything (MCP answers its
// own way).
func (s *Server) chargeOnly(r *request, kind quota.Kind, monthly, total bool) (quota.ChargeResult, error) {
	v := r.auth.View
	return s.deps.Quota.Charge(quota.Charge{
		Account: v.ID, Bucket: bucket(r.auth.Kind), Kind: kind, Limits: limitsOf(v, r),
		Hourly: true, Monthly: monthly, Total: total, Now: r.now,
	})
}
