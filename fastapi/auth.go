package fastapi

import (
	"bytes"
	"crypto/subtle"

	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/actors/checks"
)

// SandboxKey is the public sandbox key (SPEC §5.3).
const SandboxKey = checks.SandboxKey

// credential reads the secret of an Authorization header for the pipeline's
// Admit. The scheme name is case-insensitive; without a credential, Hint
// says why none was read.
func credential(h []byte) checks.Credential {
	tok, ok, hint := bearer(h)
	if !ok {
		return checks.Credential{Hint: hint}
	}
	return checks.Credential{Key: tok}
}

// bearer extracts the credential of an Authorization header. ok is false
// when no credential was sent at all.
func bearer(h []byte) (token string, ok bool, hint string) {
	h = bytes.TrimSpace(h)
	if len(h) == 0 {
		return "", false, checks.HintNoAuthorization
	}
	sp := bytes.IndexAny(h, " \t")
	scheme := h
	if sp >= 0 {
		scheme = h[:sp]
	}
	if !bytes.EqualFold(scheme, []byte("bearer")) {
		return "", false, checks.HintNotBearer
	}
	if sp < 0 {
		return "", false, checks.HintEmptyBearer
	}
	t := bytes.TrimSpace(h[sp:])
	if len(t) == 0 {
		return "", false, checks.HintEmptyBearer
	}
	return string(t), true, ""
}

// adminAuthorized checks the operator token in constant time.
func (s *Server) adminAuthorized(ctx *fasthttp.RequestCtx) bool {
	if s.cfg.AdminToken == "" {
		return false
	}
	tok, ok, _ := bearer(ctx.Request.Header.Peek("Authorization"))
	return ok && subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.AdminToken)) == 1
}
