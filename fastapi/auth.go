package fastapi

import (
	"bytes"
	"crypto/subtle"
	"unsafe"

	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/actors/checks"
)

// SandboxKey is the public sandbox key (SPEC §5.3).
const SandboxKey = checks.SandboxKey

// credential reads the secret of an Authorization header for the pipeline's
// Admit. The scheme name is case-insensitive; without a credential, Hint
// says why none was read. Key is a view of h, not a copy (Admit keeps
// nothing of it), so authenticating allocates nothing.
func credential(h []byte) checks.Credential {
	tok, ok, hint := bearerBytes(h)
	if !ok {
		return checks.Credential{Hint: hint}
	}
	return checks.Credential{Key: unsafe.String(unsafe.SliceData(tok), len(tok))}
}

// bearer extracts the credential of an Authorization header as a copy. ok
// is false when no credential was sent at all.
func bearer(h []byte) (token string, ok bool, hint string) {
	t, ok, hint := bearerBytes(h)
	return string(t), ok, hint
}

// bearerBytes is bearer's reading, a view of h.
func bearerBytes(h []byte) (token []byte, ok bool, hint string) {
	h = bytes.TrimSpace(h)
	if len(h) == 0 {
		return nil, false, checks.HintNoAuthorization
	}
	sp := bytes.IndexAny(h, " \t")
	scheme := h
	if sp >= 0 {
		scheme = h[:sp]
	}
	if !bytes.EqualFold(scheme, []byte("bearer")) {
		return nil, false, checks.HintNotBearer
	}
	if sp < 0 {
		return nil, false, checks.HintEmptyBearer
	}
	t := bytes.TrimSpace(h[sp:])
	if len(t) == 0 {
		return nil, false, checks.HintEmptyBearer
	}
	return t, true, ""
}

// adminAuthorized checks the operator token in constant time.
func (s *Server) adminAuthorized(ctx *fasthttp.RequestCtx) bool {
	if s.cfg.AdminToken == "" {
		return false
	}
	tok, ok, _ := bearer(ctx.Request.Header.Peek("Authorization"))
	return ok && subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.AdminToken)) == 1
}
