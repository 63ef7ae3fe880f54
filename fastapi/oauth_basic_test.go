package fastapi

import (
	"encoding/base64"
	"encoding/json"
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

// TestEmptyGrantTypeIsMissing: RFC 6749 §3.1 reads a parameter sent
// without a value as omitted, so grant_type= is the missing grant type's
// invalid_request, not unsupported_grant_type.
func TestEmptyGrantTypeIsMissing(t *testing.T) {
	e := oauthEnv(t)
	for _, c := range []struct{ ctype, body string }{
		{"application/x-www-form-urlencoded", "grant_type=&client_id=unit%40example.com&client_secret=" + e.acct.LiveKey},
		{"application/json", `{"grant_type":"","client_id":"unit@example.com","client_secret":"` + e.acct.LiveKey + `"}`},
	} {
		ctx := e.serve(testRequest{method: "POST", uri: "/oauth/token", remote: "198.51.100.2:1",
			header: [][2]string{{"Content-Type", c.ctype}}, body: []byte(c.body)})
		var m map[string]any
		_ = json.Unmarshal(ctx.Response.Body(), &m)
		if ctx.Response.StatusCode() != 400 || m["error"] != "invalid_request" {
			t.Errorf("%s: %d %v; want 400 invalid_request", c.ctype, ctx.Response.StatusCode(), m)
		}
	}
}

// TestExpiredTokenDoesNotLockOutMinting: a fleet sharing one access token
// gets a 401 for each call once it expires, and SPEC §5.4 has it mint a new
// one on that 401. Counted as invalid credentials, twenty such calls locked
// the address out of /oauth/token (and the key) for 15 minutes; a token
// altered in one byte still counts.
func TestExpiredTokenDoesNotLockOutMinting(t *testing.T) {
	e := oauthEnv(t)
	const addr = "198.51.100.1:1"
	good := "grant_type=client_credentials&client_id=unit%40example.com&client_secret=" + e.acct.LiveKey
	mint := func() (int, map[string]any) {
		ctx := e.serve(testRequest{method: "POST", uri: "/oauth/token", remote: addr,
			header: [][2]string{{"Content-Type", "application/x-www-form-urlencoded"}}, body: []byte(good)})
		var m map[string]any
		_ = json.Unmarshal(ctx.Response.Body(), &m)
		return ctx.Response.StatusCode(), m
	}
	st, m := mint()
	if st != 200 {
		t.Fatalf("mint: %d %v", st, m)
	}
	tok := m["access_token"].(string)
	e.srv.deps.Clock = clock.Fixed{T: fixedNow.Add(time.Hour + time.Second)} // past expires_in
	for i := 0; i < 25; i++ {
		ctx := e.serve(testRequest{method: "GET", uri: "/v1/usage", remote: addr, header: [][2]string{{"Authorization", "Bearer " + tok}}})
		if ctx.Response.StatusCode() != 401 {
			t.Fatalf("expired token, call %d: %d %s", i, ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
	if st, m := mint(); st != 200 {
		t.Fatalf("minting after the token expired: %d %v", st, m)
	}
	// A tampered token is an invalid credential: twenty lock the address.
	bad := tok[:len(tok)-3] + "AAA"
	for i := 0; i < 20; i++ {
		e.serve(testRequest{method: "GET", uri: "/v1/usage", remote: addr, header: [][2]string{{"Authorization", "Bearer " + bad}}})
	}
	if st, _ := mint(); st != 429 {
		t.Fatalf("minting after twenty tampered tokens: %d, want the lockout's 429", st)
	}
}

// oauthEnv is a test server with an access-token issuer the checks verify
// with too.
func oauthEnv(t *testing.T) *testEnv {
	e := newTestEnv(t)
	e.srv.deps.Tokens = accesstoken.NewIssuer(secrets.FromBytes([]byte("unit")))
	e.srv.rewire()
	return e
}

// TestTokenEndpointEdgeRefusalsAreOAuthShaped: what the edge refuses on
// /oauth/token before the handler runs (a body that does not decode, a
// coding it does not read, a method) reaches an OAuth library, which reads
// error and error_description (SPEC §2.4, §7), with no-store as every
// token endpoint answer.
func TestTokenEndpointEdgeRefusalsAreOAuthShaped(t *testing.T) {
	e := oauthEnv(t)
	for _, c := range []struct {
		method, enc string
		status      int
	}{
		{"POST", "gzip", 400},
		{"POST", "compress", 415},
		{"GET", "", 405},
	} {
		h := [][2]string{{"Content-Type", "application/x-www-form-urlencoded"}}
		if c.enc != "" {
			h = append(h, [2]string{"Content-Encoding", c.enc})
		}
		ctx := e.serve(testRequest{method: c.method, uri: "/oauth/token", remote: "198.51.100.3:1", header: h, body: []byte("grant_type=client_credentials")})
		var m map[string]any
		_ = json.Unmarshal(ctx.Response.Body(), &m)
		if ctx.Response.StatusCode() != c.status || m["error"] != "invalid_request" || m["error_description"] == nil ||
			string(ctx.Response.Header.Peek("Cache-Control")) != "no-store" {
			t.Errorf("%s with Content-Encoding %q: %d Cache-Control=%q %v; want %d, an OAuth error body (invalid_request, error_description) and no-store",
				c.method, c.enc, ctx.Response.StatusCode(), ctx.Response.Header.Peek("Cache-Control"), m, c.status)
		}
	}
	// Other routes keep the API's error shape.
	ctx := e.serve(testRequest{method: "POST", uri: "/v1/evaluate", remote: "198.51.100.3:1",
		header: [][2]string{{"Content-Encoding", "compress"}, {"Authorization", "Bearer " + e.acct.LiveKey}}, body: []byte("{}")})
	var m map[string]any
	_ = json.Unmarshal(ctx.Response.Body(), &m)
	if ctx.Response.StatusCode() != 415 || m["error_description"] != nil || m["error"] == "invalid_request" {
		t.Errorf("/v1/evaluate 415: %d %v", ctx.Response.StatusCode(), m)
	}
}

// TestBasicWithClientIDInBody: RFC 6749 §3.2.1 lets a client name itself
// with client_id in the body beside its Basic credentials (only a secret in
// both is two authentication methods, §2.3), as the MCP Python SDK does for
// client_secret_basic: that mints. A client_id naming someone else, or a
// client_secret in the body too, is refused 400 invalid_request.
func TestBasicWithClientIDInBody(t *testing.T) {
	e := newTestEnv(t)
	e.srv.deps.Tokens = accesstoken.NewIssuer(secrets.FromBytes([]byte("unit")))
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("unit%40example.com:"+e.acct.LiveKey))
	for _, c := range []struct {
		body   string
		status int
		error  string
	}{
		{"grant_type=client_credentials&client_id=unit%40example.com", 200, ""},
		{"grant_type=client_credentials&client_id=UNIT%40example.com", 200, ""},
		{`{"grant_type":"client_credentials","client_id":"unit@example.com"}`, 200, ""},
		{"grant_type=client_credentials&client_id=other%40example.com", 400, "invalid_request"},
		{"grant_type=client_credentials&client_secret=" + e.acct.LiveKey, 400, "invalid_request"},
		{"grant_type=client_credentials&client_id=unit%40example.com&client_secret=" + e.acct.LiveKey, 400, "invalid_request"},
	} {
		ctx := e.serve(testRequest{method: "POST", uri: "/oauth/token",
			header: [][2]string{{"Authorization", basic}, {"Content-Type", "application/x-www-form-urlencoded"}},
			body:   []byte(c.body)})
		var got struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(ctx.Response.Body(), &got)
		if ctx.Response.StatusCode() != c.status || got.Error != c.error {
			t.Errorf("Basic with body %s: %d %s, want %d %q", c.body, ctx.Response.StatusCode(), ctx.Response.Body(), c.status, c.error)
		}
	}
}

// TestBasicKeepsPercentInEmail: an email may hold '%' (RFC 5322 atext), and
// a client that does not form-encode Basic (curl -u, as the README shows;
// requests' HTTPBasicAuth) sends "save%41now@…" as is, which unescapes to
// another address. The account's own email mints however the client sent
// it: raw, form-encoded (x/oauth2), and with the id in the body too. The
// unescaped reading still names the account it spells.
func TestBasicKeepsPercentInEmail(t *testing.T) {
	e := newTestEnv(t)
	e.srv.deps.Tokens = accesstoken.NewIssuer(secrets.FromBytes([]byte("unit")))
	pct, err := e.accts.Create(accounts.NewAccount{Email: "save%41now@example.com", Plan: "starter"})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := e.accts.Create(accounts.NewAccount{Email: "saveB@example.com", Plan: "starter"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ id, key, body string }{
		{"save%41now@example.com", pct.LiveKey, ""},
		{"save%2541now%40example.com", pct.LiveKey, ""},
		{"save%41now@example.com", pct.LiveKey, "&client_id=save%2541now%40example.com"},
		{"save%42@example.com", plain.LiveKey, ""},
	} {
		basic := base64.StdEncoding.EncodeToString([]byte(c.id + ":" + c.key))
		ctx := e.serve(testRequest{method: "POST", uri: "/oauth/token",
			header: [][2]string{{"Authorization", "Basic " + basic}, {"Content-Type", "application/x-www-form-urlencoded"}},
			body:   []byte("grant_type=client_credentials" + c.body)})
		if ctx.Response.StatusCode() != 200 {
			t.Errorf("Basic %s (body %q): %d %s", c.id, c.body, ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
	// Either reading names only the account that holds the key.
	basic := base64.StdEncoding.EncodeToString([]byte("save%42@example.com:" + pct.LiveKey))
	ctx := e.serve(testRequest{method: "POST", uri: "/oauth/token",
		header: [][2]string{{"Authorization", "Basic " + basic}, {"Content-Type", "application/x-www-form-urlencoded"}},
		body:   []byte("grant_type=client_credentials")})
	if ctx.Response.StatusCode() != 401 {
		t.Errorf("another account's email with this key: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
}

// TestTokenJSONRepeatedParameter: RFC 6749 §3.2 allows each parameter once;
// the form body refuses a repeat (400 invalid_request), and the JSON body
// does the same rather than keep the last member, so one request reads
// alike in both encodings. Other members may repeat (they are not read).
func TestTokenJSONRepeatedParameter(t *testing.T) {
	e := newTestEnv(t)
	e.srv.deps.Tokens = accesstoken.NewIssuer(secrets.FromBytes([]byte("unit")))
	creds := `"client_id":"unit@example.com","client_secret":"` + e.acct.LiveKey + `"`
	for _, c := range []struct {
		body, ctype string
		status      int
	}{
		{`{"grant_type":"password","grant_type":"client_credentials",` + creds + `}`, "application/json", 400},
		{`{"grant_type":"client_credentials",` + creds + `,"client_id":"unit@example.com"}`, "application/json", 400},
		{`{"grant_type":"client_credentials",` + creds + `,"client_secret":"x"}`, "application/json", 400},
		{"grant_type=password&grant_type=client_credentials&client_id=unit%40example.com&client_secret=" + e.acct.LiveKey, "application/x-www-form-urlencoded", 400},
		{`{"grant_type":"client_credentials",` + creds + `,"scope":"api","scope":"api"}`, "application/json", 200},
	} {
		ctx := e.serve(testRequest{method: "POST", uri: "/oauth/token",
			header: [][2]string{{"Content-Type", c.ctype}}, body: []byte(c.body)})
		var got struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(ctx.Response.Body(), &got)
		if ctx.Response.StatusCode() != c.status || (c.status == 400 && got.Error != "invalid_request") {
			t.Errorf("%s: %d %s, want %d", c.body, ctx.Response.StatusCode(), ctx.Response.Body(), c.status)
		}
	}
}
