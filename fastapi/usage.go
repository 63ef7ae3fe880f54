package fastapi

import (
	"github.com/valyala/fasthttp"
)

// handleUsage is GET /v1/usage (SPEC 4.4). Its per-address limit was taken
// with authentication.
func (s *Server) handleUsage(ctx *fasthttp.RequestCtx, r *request) {
	out, ref := s.checks.Usage(&r.Call)
	s.reply(ctx, r, out, ref)
}
