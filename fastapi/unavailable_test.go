package fastapi

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fraudd/fraudd/internal/accesstoken"
	"github.com/fraudd/fraudd/internal/secrets"
)

// TestActorUnavailableAnswers503: a request whose actor cannot answer (its
// shards stopped or down, or it timed out) gets the SPEC §7 503 with
// Retry-After at once — never a 500, never a hang.
func TestActorUnavailableAnswers503(t *testing.T) {
	e := newTestEnv(t)
	e.srv.deps.Tokens = accesstoken.NewIssuer(secrets.FromBytes([]byte("unit")))
	if err := e.srv.deps.Limits.Stop(); err != nil {
		t.Fatal(err)
	}
	check := func(name string, status int, retryAfter, code string, body []byte, took time.Duration) {
		t.Helper()
		if status != 503 || retryAfter != "30" || took > 2*time.Second {
			t.Errorf("%s: %d Retry-After=%q after %s: %s", name, status, retryAfter, took, body)
			return
		}
		var out map[string]any
		if err := json.Unmarshal(body, &out); err != nil || out["code"] != code {
			t.Errorf("%s: body %s", name, body)
		}
	}
	start := time.Now()
	ctx := e.do("GET", "/v1/usage", "Bearer "+e.acct.LiveKey, nil)
	check("usage", ctx.Response.StatusCode(), string(ctx.Response.Header.Peek("Retry-After")), "storage_unavailable", ctx.Response.Body(), time.Since(start))
	start = time.Now()
	ctx = e.do("GET", "/v1/evaluate/sample", "", nil)
	check("sample", ctx.Response.StatusCode(), string(ctx.Response.Header.Peek("Retry-After")), "storage_unavailable", ctx.Response.Body(), time.Since(start))
	start = time.Now()
	ctx = e.do("POST", "/oauth/token", "", []byte("grant_type=client_credentials&client_id=unit%40example.com&client_secret="+e.acct.LiveKey))
	check("oauth", ctx.Response.StatusCode(), string(ctx.Response.Header.Peek("Retry-After")), "storage_unavailable", ctx.Response.Body(), time.Since(start))
	if !strings.Contains(string(ctx.Response.Body()), `"error":"temporarily_unavailable"`) {
		t.Errorf("oauth shape: %s", ctx.Response.Body())
	}

	// The accounts actor: an admin change answers 503, not a hang or a 500.
	e.accts.Stop()
	start = time.Now()
	ctx = e.do("PATCH", "/admin/v1/accounts/"+e.acct.View.ID, "Bearer adm", []byte(`{"suspended": true}`))
	check("admin change", ctx.Response.StatusCode(), string(ctx.Response.Header.Peek("Retry-After")), "storage_unavailable", ctx.Response.Body(), time.Since(start))
}
