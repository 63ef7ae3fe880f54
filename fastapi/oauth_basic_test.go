package fastapi

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/internal/accesstoken"
	"github.com/fraudd/fraudd/internal/clock"
	"github.com/fraudd/fraudd/internal/secrets"
)

// TestBasicKeepsPlusInEmail: client_secret_basic as curl -u and requests'
// HTTPBasicAuth send it, the email's plus addressing not form-encoded. The
// '+' is the email's own (an email has no spaces), so the account's own
// email and key mint a token; the form-encoded %2B does too.
func TestBasicKeepsPlusInEmail(t *testing.T) {
	e := newTestEnv(t)
	e.srv.deps.Tokens = accesstoken.NewIssuer(secrets.FromBytes([]byte("unit")))
	c, err := e.accts.Create(accounts.NewAccount{Email: "ops+fraud@example.com", Plan: "starter"})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"ops+fraud@example.com", "ops%2Bfraud%40example.com"} {
		basic := base64.StdEncoding.EncodeToString([]byte(id + ":" + c.LiveKey))
		ctx := e.serve(testRequest{method: "POST", uri: "/oauth/token",
			header: [][2]string{{"Authorization", "Basic " + basic}, {"Content-Type", "application/x-www-form-urlencoded"}},
			body:   []byte("grant_type=client_credentials")})
		if ctx.Response.StatusCode() != 200 {
			t.Fatalf("Basic %s: %d %s", id, ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
}

// TestTokenEndpointDatedAdditions: SPEC 4.9 and §9's dated additions,
// read at the request's time as the others are: an unreadable store is 503
// since 2026-09-26 ("before that this answered 401"), and the live key's
// allowlist applies to minting since 2026-09-28.
func TestTokenEndpointDatedAdditions(t *testing.T) {
	e := newTestEnv(t)
	e.srv.deps.Tokens = accesstoken.NewIssuer(secrets.FromBytes([]byte("unit")))
	mint := func(at time.Time, remote string) (int, string) {
		e.srv.deps.Clock = clock.Fixed{T: at}
		ctx := e.serve(testRequest{method: "POST", uri: "/oauth/token", remote: remote,
			header: [][2]string{{"Content-Type", "application/x-www-form-urlencoded"}},
			body:   []byte("grant_type=client_credentials&client_id=unit%40example.com&client_secret=" + e.acct.LiveKey)})
		return ctx.Response.StatusCode(), string(ctx.Response.Body())
	}
	if ctx := e.do("PATCH", "/admin/v1/accounts/"+e.acct.View.ID, "Bearer adm", []byte(`{"allowlist":["198.51.100.7"]}`)); ctx.Response.StatusCode() != 200 {
		t.Fatalf("allowlist: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	d28 := time.Date(2026, 9, 28, 0, 0, 0, 0, time.UTC)
	if st, b := mint(d28, "203.0.113.9:1000"); st != 400 || !strings.Contains(b, "unauthorized_client") {
		t.Errorf("at 2026-09-28 from outside the allowlist: %d %s", st, b)
	}
	if st, b := mint(d28.Add(-time.Second), "203.0.113.9:1000"); st != 200 {
		t.Errorf("at 2026-09-27T23:59:59Z from outside the allowlist: %d %s; the allowlist applies to minting since 2026-09-28", st, b)
	}
	e.do("PATCH", "/admin/v1/accounts/"+e.acct.View.ID, "Bearer adm", []byte(`{"allowlist":[]}`))
	e.store.down = true
	d26 := time.Date(2026, 9, 26, 0, 0, 0, 0, time.UTC)
	if st, b := mint(d26, "198.51.100.7:1000"); st != 503 || !strings.Contains(b, "temporarily_unavailable") {
		t.Errorf("store down at 2026-09-26: %d %s", st, b)
	}
	if st, b := mint(d26.Add(-time.Second), "198.51.100.7:1000"); st != 401 || !strings.Contains(b, "invalid_client") {
		t.Errorf("store down at 2026-09-25T23:59:59Z: %d %s; 503 only since 2026-09-26", st, b)
	}
}

// TestTokenEndpointRefusesTwoAuthorizationHeaders: two Authorization
// headers (a proxy's beside the client's) are ambiguous: the token endpoint
// refuses them as it refuses unreadable Basic credentials, 400
// invalid_request, whichever header comes first; one header still mints.
func TestTokenEndpointRefusesTwoAuthorizationHeaders(t *testing.T) {
	e := newTestEnv(t)
	e.srv.deps.Tokens = accesstoken.NewIssuer(secrets.FromBytes([]byte("unit")))
	good := "Basic " + base64.StdEncoding.EncodeToString([]byte("unit@example.com:"+e.acct.LiveKey))
	other := "Basic " + base64.StdEncoding.EncodeToString([]byte("other@example.com:sk_live_other"))
	mint := func(auth ...string) (int, string) {
		h := [][2]string{{"Content-Type", "application/x-www-form-urlencoded"}}
		for _, a := range auth {
			h = append(h, [2]string{"Authorization", a})
		}
		ctx := e.serve(testRequest{method: "POST", uri: "/oauth/token", header: h, body: []byte("grant_type=client_credentials")})
		return ctx.Response.StatusCode(), string(ctx.Response.Body())
	}
	if st, b := mint(good); st != 200 {
		t.Fatalf("one Basic header: %d %s", st, b)
	}
	for _, pair := range [][]string{{good, other}, {other, good}, {good, good}, {good, "Bearer " + e.acct.LiveKey}} {
		if st, b := mint(pair...); st != 400 || !strings.Contains(b, `"invalid_request"`) || !strings.Contains(b, "one Authorization header") {
			t.Errorf("Authorization %q: %d %s; want 400 invalid_request", pair, st, b)
		}
	}
}
