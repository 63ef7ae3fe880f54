package fastapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/bytedance/sonic"
	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/actors/checks"
	"github.com/fraudd/fraudd/actors/iplimit"
	"github.com/fraudd/fraudd/internal/accesstoken"
	"github.com/fraudd/fraudd/internal/secrets"
	"github.com/fraudd/fraudd/wire"
)

// maxCredential bounds client_id and client_secret (SPEC 4.9).
const maxCredential = 256

// oauthError sends the token endpoint's error body (RFC 6749 §5.2 shape).
func (s *Server) oauthError(ctx *fasthttp.RequestCtx, status int, code, desc string) {
	ctx.Response.Header.Set("Cache-Control", "no-store")
	ctx.Response.Header.Set("Pragma", "no-cache")
	s.writeJSON(ctx, status, &wire.OAuthError{Error: code, ErrorDescription: desc})
}

// tokenRequest is what the client sent, from whichever place it used.
type tokenRequest struct {
	grantType, clientID, clientSecret string
	// clientIDSent is the Basic client id as sent, when unescaping changed
	// it: a client that does not form-encode (curl -u) sends an email's own
	// '%' as is, so "save%41@…" may be the address itself or "saveA@…"
	// encoded. Only the account's email can tell; names accepts either.
	clientIDSent string
	bad          string // why the request is malformed
}

// names reports whether the client id the request carries is email, in
// either of its readings (clientIDSent); emails match case-insensitively.
func (tr *tokenRequest) names(email string) bool {
	return strings.EqualFold(email, tr.clientID) || (tr.clientIDSent != "" && strings.EqualFold(email, tr.clientIDSent))
}

// readTokenRequest reads client_secret_basic (Authorization: Basic), a form
// body (client_secret_post) or a JSON body (used in published examples).
func readTokenRequest(ctx *fasthttp.RequestCtx) tokenRequest {
	var tr tokenRequest
	body := bytes.TrimSpace(ctx.PostBody())
	if len(body) > 0 && body[0] == '{' {
		var j struct {
			GrantType    sonic.NoCopyRawMessage `json:"grant_type"`
			ClientID     sonic.NoCopyRawMessage `json:"client_id"`
			ClientSecret sonic.NoCopyRawMessage `json:"client_secret"`
		}
		if jsonBody.Unmarshal(body, &j) != nil {
			tr.bad = checks.DescJSONUnreadable
			return tr
		}
		if repeatsParameter(body) {
			tr.bad = checks.DescRepeated
			return tr
		}
		for _, f := range []struct {
			raw  sonic.NoCopyRawMessage
			dst  *string
			name string
		}{{j.GrantType, &tr.grantType, "grant_type"}, {j.ClientID, &tr.clientID, "client_id"}, {j.ClientSecret, &tr.clientSecret, "client_secret"}} {
			if isAbsent(f.raw) {
				continue
			}
			v, ok := jsonString(f.raw)
			if !ok {
				tr.bad = fmt.Sprintf(checks.MsgFieldNotString, f.name)
				return tr
			}
			*f.dst = v
		}
	} else {
		vals, err := url.ParseQuery(string(body))
		if err != nil {
			tr.bad = checks.MsgFormUnreadable
			return tr
		}
		if len(vals["client_id"]) > 1 || len(vals["client_secret"]) > 1 || len(vals["grant_type"]) > 1 {
			tr.bad = checks.DescRepeated
			return tr
		}
		tr.grantType, tr.clientID, tr.clientSecret = vals.Get("grant_type"), vals.Get("client_id"), vals.Get("client_secret")
	}
	auth, many := authorization(ctx)
	if many {
		tr.bad = checks.DescAuthTwice
		return tr
	}
	if id, sent, secret, present, ok := basicCredentials(auth); present {
		if !ok {
			tr.bad = checks.DescBasicUnreadable
			return tr
		}
		// A secret in both places is two authentication methods (RFC 6749
		// §2.3). A client_id alone in the body is not: §3.2.1 lets a client
		// name itself with it beside Basic, and clients do (the MCP Python
		// SDK drops only client_secret from the body for client_secret_basic).
		// It must name the Basic client, or the request says two things.
		if tr.clientSecret != "" {
			tr.bad = checks.DescCredentialsTwice
			return tr
		}
		body := tr.clientID
		tr.clientID, tr.clientSecret = id, secret
		if sent != id {
			tr.clientIDSent = sent
		}
		if body != "" && !tr.names(body) {
			tr.bad = checks.DescClientIDMismatch
			return tr
		}
	}
	return tr
}

// repeatsParameter reports whether a JSON token request, already read as
// one object, names grant_type, client_id or client_secret more than once.
// RFC 6749 §3.2 allows each parameter once and the form body refuses a
// repeat, while the decoder keeps the last member silently: the same request
// would read one way as a form and another as JSON.
func repeatsParameter(body []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return false
	}
	var seen [3]bool
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return false
		}
		if i := slices.Index([]string{"grant_type", "client_id", "client_secret"}, t.(string)); i >= 0 {
			if seen[i] {
				return true
			}
			seen[i] = true
		}
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return false
		}
	}
	return false
}

// basicCredentials reads an Authorization: Basic header (the scheme name
// case-insensitive). present says the scheme is Basic; ok that the
// credentials decoded to id:secret. RFC 6749 §2.3.1 form-encodes both parts
// before Basic; a part that does not unescape is taken as sent. sent is the
// id as sent, before unescaping.
func basicCredentials(h []byte) (id, sent, secret string, present, ok bool) {
	if len(h) <= 6 || !strings.EqualFold(string(h[:6]), "basic ") {
		return "", "", "", false, false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(h[6:])))
	if err != nil {
		return "", "", "", true, false
	}
	id, secret, ok = strings.Cut(string(raw), ":")
	if !ok {
		return "", "", "", true, false
	}
	sent = id
	// The id is an email, which has no spaces, while clients that do not
	// form-encode (curl -u, requests' HTTPBasicAuth) send plus addressing
	// as is: a '+' stays a '+'; %XX escapes, %20 included, still decode.
	if u, err := url.PathUnescape(id); err == nil {
		id = u
	}
	if u, err := url.QueryUnescape(secret); err == nil {
		secret = u
	}
	return id, sent, secret, true, true
}

// The token endpoint's dated additions (SPEC 4.9, §9), read at the
// request's time as the other dated behaviours are: the 503 of an
// unreadable store (before, 401), and the live key's allowlist applied
// when minting.
var (
	tokenUnavailableSince = time.Date(2026, 9, 26, 0, 0, 0, 0, time.UTC)
	mintAllowlistSince    = time.Date(2026, 9, 28, 0, 0, 0, 0, time.UTC)
)

// handleToken is POST /oauth/token (SPEC 4.9).
func (s *Server) handleToken(ctx *fasthttp.RequestCtx, r *request) {
	if s.deps.Tokens == nil {
		s.oauthError(ctx, fasthttp.StatusNotFound, "invalid_request", checks.DescOAuthOff)
		return
	}
	v, err := s.deps.Limits.Take(iplimit.Of(iplimit.AuthFail, iplimit.OAuth), r.Addr, r.Now)
	if errors.Is(err, actors.ErrUnavailable) {
		s.log.Warn("oauth limits unavailable", "err", err, "request_id", requestID(ctx))
		s.oauthUnavailable(ctx, r.Now, checks.DescUnavailable)
		return
	}
	if err != nil {
		s.serverError(ctx, "oauth limits", err)
		return
	}
	if !v.Allowed {
		retry := 60
		if v.Kind == iplimit.AuthFail {
			retry = checks.RetryAfterLockout
		}
		ctx.Response.Header.Set(headerRetryAfter, itoa(retry))
		s.cfg.Metrics.Refusal(tokenRefusal(v.Kind))
		s.oauthError(ctx, fasthttp.StatusTooManyRequests, "rate_limited", checks.MsgTokenLimits)
		return
	}
	if s.deps.Store != nil && !s.deps.Store.Available() {
		s.oauthUnavailable(ctx, r.Now, checks.DescStorage)
		return
	}
	tr := readTokenRequest(ctx)
	switch {
	case tr.bad != "":
		s.oauthError(ctx, fasthttp.StatusBadRequest, "invalid_request", tr.bad)
		return
	case tr.grantType == "": // absent, or sent empty: RFC 6749 §3.1 reads both as omitted
		s.oauthError(ctx, fasthttp.StatusBadRequest, "invalid_request", checks.DescGrantMissing)
		return
	case tr.grantType != "client_credentials":
		s.oauthError(ctx, fasthttp.StatusBadRequest, "unsupported_grant_type", checks.DescGrantUnsupported)
		return
	case tr.clientID == "" || tr.clientSecret == "":
		s.oauthError(ctx, fasthttp.StatusBadRequest, "invalid_request", checks.DescCredentialsMissing)
		return
	case utf8.RuneCountInString(tr.clientID) > maxCredential || utf8.RuneCountInString(tr.clientSecret) > maxCredential:
		s.oauthError(ctx, fasthttp.StatusBadRequest, "invalid_request", checks.DescCredentialsLong)
		return
	}
	a, ok := s.deps.Accounts.Authenticate(tr.clientSecret, r.Now)
	// One answer for a wrong email and a wrong key, so neither can be probed;
	// a previous live key in grace cannot mint (SPEC §3).
	if !ok || !tr.names(a.View.Email) || a.Kind == accounts.KeyLivePrev {
		s.deps.Limits.Fail(iplimit.AuthFail, r.Addr, r.Now)
		s.oauthError(ctx, fasthttp.StatusUnauthorized, "invalid_client", checks.DescClientAuth)
		return
	}
	if a.View.Suspended {
		s.oauthError(ctx, fasthttp.StatusBadRequest, "unauthorized_client", checks.DescSuspended)
		return
	}
	if a.Kind == accounts.KeyLive && !r.Now.Before(mintAllowlistSince) && !a.View.Allowed(r.Addr) {
		s.oauthError(ctx, fasthttp.StatusBadRequest, "unauthorized_client",
			fmt.Sprintf(checks.DescNotAllowlisted, r.Addr))
		return
	}
	tok, err := s.deps.Tokens.Mint(accesstoken.Claims{Account: a.View.ID, Test: a.Kind == accounts.KeyTest,
		Generation: a.Generation, IssuedAt: r.Now, ID: secrets.RandomHex(12)})
	if err != nil {
		s.serverError(ctx, "mint access token", err)
		return
	}
	ctx.Response.Header.Set("Cache-Control", "no-store")
	ctx.Response.Header.Set("Pragma", "no-cache")
	s.writeJSON(ctx, fasthttp.StatusOK, &wire.Token{AccessToken: tok, TokenType: "Bearer",
		ExpiresIn: int64(accesstoken.Lifetime.Seconds()), Scope: accesstoken.Scope})
}

// baseURL is the scheme and host the client used, for discovery documents.
func baseURL(ctx *fasthttp.RequestCtx) string {
	scheme := "http"
	if ctx.IsTLS() || strings.EqualFold(string(ctx.Request.Header.Peek("X-Forwarded-Proto")), "https") {
		scheme = "https"
	}
	return scheme + "://" + string(ctx.Host())
}

// handleASMetadata is RFC 8414 authorization-server metadata.
func (s *Server) handleASMetadata(ctx *fasthttp.RequestCtx, r *request) {
	b := baseURL(ctx)
	s.writeJSON(ctx, fasthttp.StatusOK, &wire.ASMetadata{
		Issuer: b, TokenEndpoint: b + "/oauth/token",
		GrantTypesSupported:               []string{"client_credentials"},
		TokenEndpointAuthMethodsSupported: []string{"client_secret_basic", "client_secret_post"},
		ScopesSupported:                   []string{accesstoken.Scope},
		ResponseTypesSupported:            []string{},
	})
}

// handlePRMetadata is RFC 9728 protected-resource metadata.
func (s *Server) handlePRMetadata(ctx *fasthttp.RequestCtx, r *request) {
	b := baseURL(ctx)
	s.writeJSON(ctx, fasthttp.StatusOK, &wire.PRMetadata{
		Resource: b, AuthorizationServers: []string{b}, ScopesSupported: []string{accesstoken.Scope},
		BearerMethodsSupported: []string{"header"},
	})
}

func itoa(n int) string { return string(fasthttp.AppendUint(nil, n)) }

// oauthUnavailable sends the token endpoint's 503 (SPEC 4.9).
func (s *Server) oauthUnavailable(ctx *fasthttp.RequestCtx, now time.Time, desc string) {
	if now.Before(tokenUnavailableSince) {
		// SPEC 4.9: "since 2026-09-26; before that this answered 401".
		s.oauthError(ctx, fasthttp.StatusUnauthorized, "invalid_client", checks.DescClientAuth)
		return
	}
	ctx.Response.Header.Set(headerRetryAfter, itoa(checks.RetryAfterStorage))
	ctx.Response.Header.Set("Cache-Control", "no-store")
	s.writeJSON(ctx, fasthttp.StatusServiceUnavailable, &wire.OAuthError{Error: "temporarily_unavailable",
		ErrorDescription: desc, Code: checks.CodeStorage})
}
