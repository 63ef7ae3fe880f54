package fastapi

import (
	"bytes"
	"crypto/subtle"
	"fmt"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/actors/accounts"
)

// SandboxKey is the public sandbox key (SPEC §5.3).
const SandboxKey = "sk_test_sandbox"

// bearer extracts the credential of an Authorization header. The scheme name is
// case-insensitive. ok is false when no credential was sent at all.
func bearer(h []byte) (token string, ok bool, hint string) {
	h = bytes.TrimSpace(h)
	if len(h) == 0 {
		return "", false, "Send your secret API key as `Authorization: Bearer <key>`."
	}
	sp := bytes.IndexAny(h, " \t")
	scheme := h
	if sp >= 0 {
		scheme = h[:sp]
	}
	if !bytes.EqualFold(scheme, []byte("bearer")) {
		return "", false, "Use the Bearer scheme: `Authorization: Bearer <key>`."
	}
	if sp < 0 {
		return "", false, "`Authorization: Bearer` was sent with nothing after it."
	}
	t := bytes.TrimSpace(h[sp:])
	if len(t) == 0 {
		return "", false, "`Authorization: Bearer` was sent with nothing after it."
	}
	return string(t), true, ""
}

// invalidKeyHint names the likely cause of a key that did not authenticate.
func invalidKeyHint(key string) string {
	switch {
	case key == "undefined" || key == "null" || key == "None" || key == "nil":
		return fmt.Sprintf("The key is the literal string %q: the variable meant to hold your API key is not set.", key)
	case strings.HasPrefix(key, accounts.PrefixPublishable):
		return "This is a publishable key (pk_live_…) for the browser collector; the server must send its secret sk_live_ or sk_test_ key."
	case strings.ContainsAny(key, " \t\r\n"):
		return "The key contains whitespace; send it exactly as issued."
	case strings.HasPrefix(key, "Bearer ") || strings.HasPrefix(key, "bearer "):
		return "The word Bearer appears twice; send `Authorization: Bearer <key>`."
	case !strings.HasPrefix(key, accounts.PrefixLive) && !strings.HasPrefix(key, accounts.PrefixTest):
		return "API keys start with sk_live_ or sk_test_."
	default:
		return "The key is not recognised: it may have been rotated, revoked or mistyped."
	}
}

// authenticate resolves the caller's secret key into r.auth, or answers the
// error itself and returns false. enforceAllow applies the live key's IP
// allowlist (not on /v1/usage; the test key is always exempt).
func (s *Server) authenticate(ctx *fasthttp.RequestCtx, r *request, enforceAllow bool) bool {
	if s.deps.Lockout != nil {
		if ra, locked := s.deps.Lockout.Locked(r.client, r.now); locked {
			s.writeRetry(ctx, fasthttp.StatusTooManyRequests, ra, msgLockedOut, "", "")
			return false
		}
	}
	if s.deps.Store != nil && !s.deps.Store.Available() {
		s.storageUnavailable(ctx)
		return false
	}
	key, ok, hint := bearer(ctx.Request.Header.Peek("Authorization"))
	if !ok {
		s.writeError(ctx, fasthttp.StatusUnauthorized, msgMissingKey, "", hint)
		return false
	}
	if key == SandboxKey {
		r.sandbox = true
		return true
	}
	a, ok := s.deps.Accounts.Authenticate(key, r.now)
	if !ok {
		if s.deps.Lockout != nil {
			s.deps.Lockout.Fail(r.client, r.now)
		}
		s.writeError(ctx, fasthttp.StatusUnauthorized, msgInvalidKey, "", invalidKeyHint(key))
		return false
	}
	if a.View.Suspended {
		s.writeError(ctx, fasthttp.StatusForbidden, msgSuspended, "", "The account is suspended; contact the operator.")
		return false
	}
	if enforceAllow && a.Kind != accounts.KeyTest && !a.View.Allowed(r.client) {
		s.writeError(ctx, fasthttp.StatusForbidden, msgNotAllowlisted, "",
			fmt.Sprintf("The calling address %s is not on this key's IP allowlist; requests from it will keep failing.", r.client))
		return false
	}
	r.auth = a
	return true
}

// adminAuthorized checks the operator token in constant time.
func (s *Server) adminAuthorized(ctx *fasthttp.RequestCtx) bool {
	if s.cfg.AdminToken == "" {
		return false
	}
	tok, ok, _ := bearer(ctx.Request.Header.Peek("Authorization"))
	return ok && subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.AdminToken)) == 1
}
