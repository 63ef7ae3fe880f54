package fastapi

import (
	"errors"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/actors/checks"
	"github.com/fraudd/fraudd/wire"
)

// Header names and limits of the HTTP surface. Message texts are in
// actors/checks (messages.go).
const (
	contentTypeJSON    = "application/json"
	contentTypeText    = "text/plain; charset=utf-8"
	headerRetryAfter   = "Retry-After"
	headerRequestID    = "X-Request-Id"
	headerRLLimit      = "X-RateLimit-Limit"
	headerRLRemaining  = "X-RateLimit-Remaining"
	headerRLReset      = "X-RateLimit-Reset"
	edgeBlockBody      = "error code: 1010"
	edgeBlockStatus    = fasthttp.StatusForbidden
	maxAPIBody         = 64 << 10
	defaultUserAgentUA = "Python-urllib/"
)

// refuse renders a refusal over HTTP (SPEC §7): its X-RateLimit-* figures,
// Retry-After and the error body. An internal cause is logged, never sent.
// It is the one place an HTTP refusal is written.
func (s *Server) refuse(ctx *fasthttp.RequestCtx, ref *checks.Refusal) {
	if ref.Cause != nil {
		s.log.Error("request failed", "status", ref.Status, "err", ref.Cause,
			"request_id", string(ctx.Response.Header.Peek(headerRequestID)))
	}
	s.countRefusal(ref)
	h := &ctx.Response.Header
	setRateLimit(h, ref.RateLimit)
	if ref.RetryAfter > 0 {
		h.Set(headerRetryAfter, strconv.FormatInt(ref.RetryAfter, 10))
	}
	s.writeError(ctx, ref.Status, ref.Msg, ref.Code, ref.Hint)
}

// setRateLimit sets the X-RateLimit-* headers of a charged call of a capped
// account (SPEC 4.1); uncapped accounts and the sandbox get none.
func setRateLimit(h *fasthttp.ResponseHeader, rl checks.RateLimit) {
	if !rl.Capped {
		return
	}
	h.Set(headerRLLimit, strconv.FormatInt(rl.Limit, 10))
	h.Set(headerRLRemaining, strconv.FormatInt(rl.Remaining, 10))
	h.Set(headerRLReset, strconv.FormatInt(rl.Reset, 10))
}

// reply answers a pipeline call: its refusal, or v with the call's
// rate-limit headers.
func (s *Server) reply(ctx *fasthttp.RequestCtx, r *request, v any, ref *checks.Refusal) {
	if ref != nil {
		if !ref.RateLimit.Capped {
			// A refusal after the charge (a 400 evaluate or lookup uses the
			// hourly allowance, SPEC 8) shows what is left of it.
			setRateLimit(&ctx.Response.Header, r.RateLimit)
		}
		s.refuse(ctx, ref)
		return
	}
	setRateLimit(&ctx.Response.Header, r.RateLimit)
	s.writeJSON(ctx, fasthttp.StatusOK, v)
}

// writeError sends the SPEC §7 error body.
func (s *Server) writeError(ctx *fasthttp.RequestCtx, status int, msg, code, hint string) {
	if isTokenPath(ctx.Path()) {
		// The token endpoint's clients are OAuth libraries, which read
		// error and error_description (SPEC §2.4, §7): what the edge
		// refuses before the handler runs (an undecodable or oversized
		// body, a method) and the server's own failures take that shape,
		// and no-store, as the handler's answers do.
		oauthCode := "invalid_request"
		if status >= 500 {
			oauthCode = "temporarily_unavailable"
		}
		desc := msg
		if hint != "" {
			desc += " " + hint
		}
		ctx.Response.Header.Set("Cache-Control", "no-store")
		ctx.Response.Header.Set("Pragma", "no-cache")
		s.writeJSON(ctx, status, &wire.OAuthError{Error: oauthCode, ErrorDescription: desc, Code: code})
		return
	}
	s.writeJSON(ctx, status, &wire.Error{Error: msg, Code: code, Hint: hint})
}

// isTokenPath reports whether path is the token endpoint's, as the router
// reads it (surrounding slashes trimmed).
func isTokenPath(path []byte) bool {
	return strings.Trim(string(path), "/") == "oauth/token"
}

// serverError logs the cause and sends the generic 500, or the 503 of SPEC
// §7 when an actor could not answer (timed out, stopped, or its shard is down
// and restarting): that is temporary and nothing was carried out.
func (s *Server) serverError(ctx *fasthttp.RequestCtx, where string, err error) {
	if errors.Is(err, actors.ErrUnavailable) {
		s.log.Warn("request failed: actor unavailable", "where", where, "err", err,
			"request_id", string(ctx.Response.Header.Peek(headerRequestID)))
		s.storageUnavailable(ctx)
		return
	}
	s.log.Error("request failed", "where", where, "err", err,
		"request_id", string(ctx.Response.Header.Peek(headerRequestID)))
	s.writeError(ctx, fasthttp.StatusInternalServerError, checks.MsgServerError, "", "")
}

// requestID is the id the answer carries (X-Request-Id), for the lines a
// request logs: the id a client quotes must find the line naming the cause.
func requestID(ctx *fasthttp.RequestCtx) string {
	return string(ctx.Response.Header.Peek(headerRequestID))
}

// storageUnavailable sends the 503 of SPEC §7.
func (s *Server) storageUnavailable(ctx *fasthttp.RequestCtx) { s.refuse(ctx, checks.RefuseStorage) }
