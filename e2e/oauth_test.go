package e2e

import (
	"encoding/base64"
	"net/url"
	"strings"
	"testing"
)

func mint(t *testing.T, s *Server, form url.Values, hdr map[string]string) *Response {
	t.Helper()
	if hdr == nil {
		hdr = map[string]string{}
	}
	hdr["Content-Type"] = "application/x-www-form-urlencoded"
	return s.Do(t, Req{Method: "POST", Path: "/oauth/token", Body: form.Encode(), Header: hdr})
}

func TestOAuthClientCredentials(t *testing.T) {
	s := Start(t, bin)
	a := s.CreateAccount(t, map[string]any{"email": "OAuth@Example.com", "plan": "starter"})
	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {"oauth@example.com"}, "client_secret": {a.LiveKey}}
	r := mint(t, s, form, nil)
	m := r.JSON(t)
	if r.Status != 200 || m["token_type"] != "Bearer" || num(t, m, "expires_in") != 3600 || m["scope"] != "api" || r.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("mint: %d %v %s", r.Status, r.Header, r.Body)
	}
	tok := m["access_token"].(string)
	if strings.Contains(tok, a.LiveKey) {
		t.Fatal("the token carries the key")
	}
	if u := s.Do(t, Req{Path: "/v1/usage", Bearer: tok}).JSON(t); u["key_type"] != "live" {
		t.Fatalf("usage with a token: %v", u)
	}
	if r := s.Do(t, Req{Method: "POST", Path: "/v1/evaluate", Bearer: tok, Body: map[string]any{"token": "test_vpn"}}); r.Status != 200 {
		t.Fatalf("evaluate with a token: %d %s", r.Status, r.Body)
	}
	// Basic auth and a JSON body mint too; the test key mints a test credential.
	basic := base64.StdEncoding.EncodeToString([]byte(url.QueryEscape("oauth@example.com") + ":" + url.QueryEscape(a.TestKey)))
	r = mint(t, s, url.Values{"grant_type": {"client_credentials"}}, map[string]string{"Authorization": "Basic " + basic})
	if r.Status != 200 {
		t.Fatalf("basic: %d %s", r.Status, r.Body)
	}
	testTok := r.JSON(t)["access_token"].(string)
	if u := s.Do(t, Req{Path: "/v1/usage", Bearer: testTok}).JSON(t); u["key_type"] != "test" {
		t.Fatalf("test token usage: %v", u)
	}
	r = s.Do(t, Req{Method: "POST", Path: "/oauth/token", Body: map[string]any{"grant_type": "client_credentials", "client_id": "oauth@example.com", "client_secret": a.LiveKey}})
	if r.Status != 200 {
		t.Fatalf("json body: %d %s", r.Status, r.Body)
	}

	for _, c := range []struct {
		name   string
		form   url.Values
		status int
		code   string
	}{
		{"wrong grant", url.Values{"grant_type": {"password"}, "client_id": {"oauth@example.com"}, "client_secret": {a.LiveKey}}, 400, "unsupported_grant_type"},
		{"no secret", url.Values{"grant_type": {"client_credentials"}, "client_id": {"oauth@example.com"}}, 400, "invalid_request"},
		{"too long", url.Values{"grant_type": {"client_credentials"}, "client_id": {strings.Repeat("a", 257)}, "client_secret": {a.LiveKey}}, 400, "invalid_request"},
		{"wrong email", url.Values{"grant_type": {"client_credentials"}, "client_id": {"x@example.com"}, "client_secret": {a.LiveKey}}, 401, "invalid_client"},
		{"wrong key", url.Values{"grant_type": {"client_credentials"}, "client_id": {"oauth@example.com"}, "client_secret": {"sk_live_nope"}}, 401, "invalid_client"},
	} {
		r := mint(t, s, c.form, nil)
		if r.Status != c.status || r.JSON(t)["error"] != c.code || r.JSON(t)["error_description"] == "" {
			t.Errorf("%s: %d %s", c.name, r.Status, r.Body)
		}
	}
	// A tampered token is refused.
	if r := s.Do(t, Req{Path: "/v1/usage", Bearer: tok[:len(tok)-3] + "abc"}); r.Status != 401 {
		t.Fatalf("tampered token: %d", r.Status)
	}
	// Rotation: the old key's token works through the grace; revoking ends it.
	base := "/admin/v1/accounts/" + a.ID
	s.Admin(t, "POST", base+"/keys/live/rotate", nil)
	if r := s.Do(t, Req{Path: "/v1/usage", Bearer: tok}); r.Status != 200 {
		t.Fatalf("token of a key in grace: %d", r.Status)
	}
	if r := mint(t, s, form, nil); r.Status != 401 || r.JSON(t)["error"] != "invalid_client" {
		t.Fatalf("a key in grace minted: %d %s", r.Status, r.Body)
	}
	s.Admin(t, "POST", base+"/keys/live/revoke-previous", nil)
	if r := s.Do(t, Req{Path: "/v1/usage", Bearer: tok}); r.Status != 401 {
		t.Fatalf("token after revoke-previous: %d", r.Status)
	}
	s.Admin(t, "POST", base+"/keys/test/rotate", nil)
	if r := s.Do(t, Req{Path: "/v1/usage", Bearer: testTok}); r.Status != 401 {
		t.Fatalf("test token after test rotation: %d", r.Status)
	}
}

func TestOAuthExpiryAllowlistLimits(t *testing.T) {
	s := Start(t, bin)
	a := s.CreateAccount(t, map[string]any{"email": "exp@example.com"})
	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {"exp@example.com"}, "client_secret": {a.LiveKey}}
	tok := mint(t, s, form, nil).JSON(t)["access_token"].(string)
	s.Advance(t, "59m")
	if r := s.Do(t, Req{Path: "/v1/usage", Bearer: tok}); r.Status != 200 {
		t.Fatalf("token before expiry: %d", r.Status)
	}
	s.Advance(t, "2m")
	if r := s.Do(t, Req{Path: "/v1/usage", Bearer: tok}); r.Status != 401 {
		t.Fatalf("token after expiry: %d", r.Status)
	}
	s.Admin(t, "PATCH", "/admin/v1/accounts/"+a.ID, map[string]any{"allowlist": []string{"198.51.100.0/24"}})
	r := mint(t, s, form, map[string]string{"X-Forwarded-For": "192.0.2.9"})
	if r.Status != 400 || r.JSON(t)["error"] != "unauthorized_client" {
		t.Fatalf("minting off the allowlist: %d %s", r.Status, r.Body)
	}
	testForm := url.Values{"grant_type": {"client_credentials"}, "client_id": {"exp@example.com"}, "client_secret": {a.TestKey}}
	if r := mint(t, s, testForm, map[string]string{"X-Forwarded-For": "192.0.2.9"}); r.Status != 200 {
		t.Fatalf("test key is exempt from the allowlist: %d %s", r.Status, r.Body)
	}
	// 60 exchanges a minute per address, then rate_limited with Retry-After 60.
	for i := 0; i < 59; i++ {
		if r := mint(t, s, form, map[string]string{"X-Forwarded-For": "198.51.100.50"}); r.Status != 200 {
			t.Fatalf("exchange %d: %d %s", i, r.Status, r.Body)
		}
	}
	r = mint(t, s, form, map[string]string{"X-Forwarded-For": "198.51.100.50"})
	r2 := mint(t, s, form, map[string]string{"X-Forwarded-For": "198.51.100.50"})
	if r2.Status != 429 || r2.Header.Get("Retry-After") != "60" || r2.JSON(t)["error"] != "rate_limited" || r2.JSON(t)["error_description"] != "Too many token requests." {
		t.Fatalf("61st exchange: %d %q %s (60th: %d)", r2.Status, r2.Header.Get("Retry-After"), r2.Body, r.Status)
	}
	for _, p := range []string{"/.well-known/oauth-authorization-server", "/.well-known/oauth-protected-resource"} {
		r := s.Do(t, Req{Path: p})
		if r.Status != 200 || !strings.Contains(string(r.Body), "/oauth/token") && !strings.Contains(string(r.Body), "authorization_servers") {
			t.Fatalf("%s: %d %s", p, r.Status, r.Body)
		}
	}
}
