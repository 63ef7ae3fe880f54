package fastapi

import (
	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/actors/checks"
	"github.com/fraudd/fraudd/actors/iplimit"
	"github.com/fraudd/fraudd/internal/metrics"
)

// handleMetrics is GET /metrics, the Prometheus exposition (text format;
// gzip as for every answer). The route table gives it to the operator only;
// 404 when the server keeps no metrics.
func (s *Server) handleMetrics(ctx *fasthttp.RequestCtx, _ *request) {
	if s.cfg.Metrics == nil {
		s.writeError(ctx, fasthttp.StatusNotFound, checks.MsgNotFound, "", "")
		return
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType(metrics.ContentType)
	ctx.Response.Header.Set("Cache-Control", "no-store")
	if err := s.cfg.Metrics.WriteText(ctx); err != nil {
		// What could be read is sent; the rest is the log's.
		s.log.Warn("metrics: some figures could not be read", "err", err)
	}
}

// countRefusal counts a 429 by the limit that refused it. The refusal
// carries its message, not its limiter, and each limit has its own message
// (actors/checks/messages.go).
func (s *Server) countRefusal(ref *checks.Refusal) {
	if s.cfg.Metrics == nil || ref.Status != fasthttp.StatusTooManyRequests {
		return
	}
	var k metrics.RefusalKind
	switch ref.Msg {
	case checks.MsgHourly:
		k = metrics.RefusedHourly
	case checks.MsgMonthly:
		k = metrics.RefusedMonthly
	case checks.MsgLockedOut:
		k = metrics.RefusedLockout
	case checks.MsgChallengeRate:
		k = metrics.RefusedChallenge
	case checks.MsgCollectBudget:
		k = metrics.RefusedCollectBudget
	default: // checks.MsgTooMany, and any 429 added later
		k = metrics.RefusedPerAddress
	}
	s.cfg.Metrics.Refusal(k)
}

// tokenRefusal is the limit behind a refused POST /oauth/token.
func tokenRefusal(k iplimit.Kind) metrics.RefusalKind {
	if k == iplimit.AuthFail {
		return metrics.RefusedLockout
	}
	return metrics.RefusedToken
}
