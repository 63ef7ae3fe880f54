package fastapi

import (
	"bytes"
	"crypto/subtle"
	"fmt"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/actors/iplimit"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/internal/accesstoken"
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
	case accesstoken.LooksLikeJWT(key):
		return "The access token is expired, or the key it was minted from was rotated or revoked: mint a new one at /oauth/token."
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
// error itself and returns false. It takes the lockout check, the per-address
// protection limit and the route's own limiters in one actor hop. The route's
// auth kind decides whether the live key's IP allowlist applies (not on
// /v1/usage; the test key is always exempt).
func (s *Server) authenticate(ctx *fasthttp.RequestCtx, r *request, rt *route) bool {
	if s.deps.Store != nil && !s.deps.Store.Available() {
		s.storageUnavailable(ctx)
		return false
	}
	key, present, hint := bearer(ctx.Request.Header.Peek("Authorization"))
	var a accounts.Auth
	valid := false
	if present && key == SandboxKey {
		r.sandbox, valid = true, true
	} else if present && accesstoken.LooksLikeJWT(key) && s.deps.Tokens != nil {
		// An OAuth access token authenticates as the account's current key of
		// its type while the key it was minted from still works.
		if c, err := s.deps.Tokens.Verify(key, r.now); err == nil {
			a, valid = s.deps.Accounts.ResolveToken(c.Account, c.Test, c.Generation, r.now)
		}
	} else if present {
		a, valid = s.deps.Accounts.Authenticate(key, r.now)
	}
	kinds := iplimit.Of(iplimit.AuthFail)
	if valid {
		kinds |= rt.limit
		// Approved public-interest keys pass the per-address protection limit.
		if r.sandbox || a.View.Plan != quota.PlanPublicInterest {
			kinds |= iplimit.Of(iplimit.Protect)
		}
	}
	if !s.takeLimits(ctx, r, kinds) {
		return false
	}
	if !present {
		s.writeError(ctx, fasthttp.StatusUnauthorized, msgMissingKey, "", hint)
		return false
	}
	if r.sandbox && !rt.sandbox {
		s.writeError(ctx, fasthttp.StatusUnauthorized, msgInvalidKey, "", "The public sandbox key sk_test_sandbox works only on POST /v1/evaluate with the test_* tokens.")
		return false
	}
	if !valid {
		s.deps.Limits.Fail(r.client, r.now)
		s.writeError(ctx, fasthttp.StatusUnauthorized, msgInvalidKey, "", invalidKeyHint(key))
		return false
	}
	if r.sandbox {
		return true
	}
	if a.View.Suspended {
		s.writeError(ctx, fasthttp.StatusForbidden, msgSuspended, "", "The account is suspended; contact the operator.")
		return false
	}
	if rt.auth == authAPI && a.Kind != accounts.KeyTest && !a.View.Allowed(r.client) {
		s.writeError(ctx, fasthttp.StatusForbidden, msgNotAllowlisted, "",
			fmt.Sprintf("The calling address %s is not on this key's IP allowlist; requests from it will keep failing.", r.client))
		return false
	}
	r.auth = a
	return true
}

// takeLimits takes the given per-address limiters for the caller, answering
// the 429 itself when one refuses.
func (s *Server) takeLimits(ctx *fasthttp.RequestCtx, r *request, kinds iplimit.Kinds) bool {
	v, err := s.deps.Limits.Take(kinds, r.client, r.now)
	if err != nil {
		s.serverError(ctx, "per-address limits", err)
		return false
	}
	if v.Allowed {
		return true
	}
	msg, retry := msgTooMany, int(v.RetryAfter)
	switch v.Kind {
	case iplimit.AuthFail:
		// SPEC §5.6 and §4.4 name the lockout's Retry-After: 900.
		msg, retry = msgLockedOut, retryAfterLockout
	case iplimit.Usage:
		retry = 60 // SPEC 4.4: the usage limiter answers Retry-After: 60
	}
	s.writeRetry(ctx, fasthttp.StatusTooManyRequests, retry, msg, "", "")
	return false
}

// adminAuthorized checks the operator token in constant time.
func (s *Server) adminAuthorized(ctx *fasthttp.RequestCtx) bool {
	if s.cfg.AdminToken == "" {
		return false
	}
	tok, ok, _ := bearer(ctx.Request.Header.Peek("Authorization"))
	return ok && subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.AdminToken)) == 1
}
