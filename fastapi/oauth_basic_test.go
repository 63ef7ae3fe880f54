package fastapi

import (
	"encoding/base64"
	"testing"

	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/internal/accesstoken"
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
