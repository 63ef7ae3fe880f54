package fastapi

import (
	"encoding/json"

	"github.com/valyala/fasthttp"
)

// handleChallenge is POST /v1/device-evidence/challenge (SPEC 4.10).
func (s *Server) handleChallenge(ctx *fasthttp.RequestCtx, r *request) {
	var body struct {
		ID *string `json:"fingerprintEventId"`
	}
	sent := json.Unmarshal(ctx.PostBody(), &body) == nil && body.ID != nil
	var id string
	if sent {
		id = *body.ID
	}
	out, ref := s.checks.Challenge(&r.Call, id, sent)
	s.reply(ctx, r, out, ref)
}
