package fastapi

import (
	"github.com/valyala/fasthttp"
)

// handleEvaluate is POST /v1/evaluate (SPEC 4.1).
func (s *Server) handleEvaluate(ctx *fasthttp.RequestCtx, r *request) {
	req := &r.eval
	ct := ctx.Request.Header.ContentType()
	req.Err = decodeEvaluate(ct, evalBody(ct, ctx.PostBody(), r.Now), req, &r.evalJSON)
	ev, ref := s.checks.Evaluate(&r.Call, req)
	if ref != nil {
		s.reply(ctx, r, nil, ref)
		return
	}
	body := ev.Body()
	s.cfg.Metrics.Decision(body.Decision, body.Reasons, body.Test || body.Sandbox)
	s.reply(ctx, r, body, nil)
	ev.Release()
}

// handleSample is GET /v1/evaluate/sample (SPEC 4.3).
func (s *Server) handleSample(ctx *fasthttp.RequestCtx, r *request) {
	ev, ref := s.checks.Sample(string(ctx.QueryArgs().Peek("scenario")))
	if ref != nil {
		s.refuse(ctx, ref)
		return
	}
	s.writeJSON(ctx, fasthttp.StatusOK, ev.Body())
	ev.Release()
}
