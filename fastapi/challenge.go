package fastapi

import (
	"github.com/valyala/fasthttp"
)

// handleChallenge is POST /v1/device-evidence/challenge (SPEC 4.10).
func (s *Server) handleChallenge(ctx *fasthttp.RequestCtx, r *request) {
	var body struct {
		ID *string `json:"fingerprintEventId"`
	}
	// jsonBody, as every API body: the member is matched by its exact name.
	// encoding/json took {"FingerprintEventID": …} for it and issued a
	// challenge for a body that carries no fingerprintEventId, which SPEC
	// 4.10 answers 400.
	sent := jsonBody.Unmarshal(ctx.PostBody(), &body) == nil && body.ID != nil
	var id string
	if sent {
		id = *body.ID
	}
	out, ref := s.checks.Challenge(&r.Call, id, sent)
	s.reply(ctx, r, out, ref)
}
