package fastapi

import (
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/wire"
)

// Public error messages. Internal causes are logged, never sent.
const (
	msgServerError     = "Server error."
	msgNotFound        = "Not found."
	msgMethod          = "Method not allowed."
	msgTooLarge        = "Request body too large."
	msgBadRequest      = "Bad request."
	msgMissingKey      = "Missing Key."
	msgInvalidKey      = "Invalid API Key."
	msgSuspended       = "Account suspended."
	msgNotAllowlisted  = "Caller address not on the key's allowlist."
	msgTooMany         = "Too many requests."
	msgLockedOut       = "Too many invalid credentials; try again later."
	msgStorage         = "Service temporarily unavailable."
	msgAdminAuth       = "Invalid admin token."
	codeStorage        = "storage_unavailable"
	retryAfterStorage  = 30
	retryAfterLockout  = 900
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

// writeError sends the SPEC §7 error body.
func (s *Server) writeError(ctx *fasthttp.RequestCtx, status int, msg, code, hint string) {
	s.writeJSON(ctx, status, &wire.Error{Error: msg, Code: code, Hint: hint})
}

// writeRetry sends an error with Retry-After (every 429 carries one).
func (s *Server) writeRetry(ctx *fasthttp.RequestCtx, status int, retryAfter int, msg, code, hint string) {
	ctx.Response.Header.Set(headerRetryAfter, strconv.Itoa(retryAfter))
	s.writeError(ctx, status, msg, code, hint)
}

// serverError logs the cause and sends the generic 500.
func (s *Server) serverError(ctx *fasthttp.RequestCtx, where string, err error) {
	s.log.Error("request failed", "where", where, "err", err,
		"request_id", string(ctx.Response.Header.Peek(headerRequestID)))
	s.writeError(ctx, fasthttp.StatusInternalServerError, msgServerError, "", "")
}

// storageUnavailable sends the 503 of SPEC §7.
func (s *Server) storageUnavailable(ctx *fasthttp.RequestCtx) {
	s.writeRetry(ctx, fasthttp.StatusServiceUnavailable, retryAfterStorage, msgStorage, codeStorage, "")
}
