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

// authorization returns the request's Authorization header. A request that
// carries more than one (a proxy that added its own beside the client's) is
// ambiguous, whichever one is read: many is set and h is nil, and every
// reader refuses it as it refuses an unreadable header. PeekAll reuses the
// header's own buffer, so this allocates no more than Peek.
func authorization(ctx *fasthttp.RequestCtx) (h []byte, many bool) {
	all := ctx.Request.Header.PeekAll(fasthttp.HeaderAuthorization)
	switch len(all) {
	case 0:
		return nil, false
	case 1:
		return all[0], false
	}
	return nil, true
}

// requestCredential is the credential of the request's Authorization
// header for Admit; more than one header is none, with the hint saying so
// (401 Missing Key., as a header that is not Bearer).
func requestCredential(ctx *fasthttp.RequestCtx) checks.Credential {
	h, many := authorization(ctx)
	if many {
		return checks.Credential{Hint: checks.HintAuthTwice}
	}
	return credential(h)
}

// sentAuthorization reports whether the request carries an Authorization
// header with anything in it (or more than one).
func sentAuthorization(ctx *fasthttp.RequestCtx) bool {
	h, many := authorization(ctx)
	return many || len(bytes.TrimSpace(h)) > 0
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

// adminAuthorized checks the operator token in constant time. presented:
// a bearer token was read (more than one Authorization header is none).
func (s *Server) adminAuthorized(ctx *fasthttp.RequestCtx) (valid, presented bool) {
	h, many := authorization(ctx)
	if many {
		return false, false
	}
	tok, ok, _ := bearer(h)
	if !ok || s.cfg.AdminToken == "" {
		return false, ok
	}
	return subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.AdminToken)) == 1, true
}
