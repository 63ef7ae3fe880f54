package fastapi

import (
	"bytes"

	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/actors/checks"
	"github.com/fraudd/fraudd/fastapi/console"
)

// handleConsole serves the operator console's page and assets. They are
// public files: everything they show comes from the admin API, which the
// page calls with the operator token it keeps in sessionStorage.
func (s *Server) handleConsole(ctx *fasthttp.RequestCtx, r *request) {
	name := ""
	if r.nparams > 0 {
		name = r.param(0)
	}
	a, ok := console.Lookup(name)
	if !ok {
		s.writeError(ctx, fasthttp.StatusNotFound, checks.MsgNotFound, "", "")
		return
	}
	h := &ctx.Response.Header
	h.Set("Content-Security-Policy", console.CSP)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", a.ETag)
	if inm := ctx.Request.Header.Peek("If-None-Match"); len(inm) > 0 && bytes.Contains(inm, []byte(a.ETag)) {
		ctx.SetStatusCode(fasthttp.StatusNotModified)
		return
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType(a.Type)
	ctx.SetBody(a.Body)
}
