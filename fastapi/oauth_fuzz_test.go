package fastapi

import (
	"encoding/base64"
	"encoding/json"
	"net/url"
	"testing"
	"unicode/utf8"

	"github.com/valyala/fasthttp"
)

// tokenRequestOf reads a POST /oauth/token body and Authorization header as
// handleToken does.
func tokenRequestOf(body []byte, authorization string) tokenRequest {
	tr, _ := tokenRequestWithHeader(body, authorization)
	return tr
}

// tokenRequestWithHeader also returns the Authorization header as fasthttp
// kept it.
func tokenRequestWithHeader(body []byte, authorization string) (tokenRequest, []byte) {
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod(fasthttp.MethodPost)
	ctx.Request.SetBody(body)
	if authorization != "" {
		ctx.Request.Header.Set("Authorization", authorization)
	}
	return readTokenRequest(&ctx), ctx.Request.Header.Peek("Authorization")
}

// FuzzTokenRequest: the token endpoint's body and Authorization header come
// from anyone and are read without panicking; the same grant and
// credentials read back alike whether the client sends them as a form
// (client_secret_post), as JSON, or the credentials in Basic
// (client_secret_basic).
func FuzzTokenRequest(f *testing.F) {
	f.Add([]byte("grant_type=client_credentials&client_id=ops%40example.com&client_secret=sk_live_x"), "", "client_credentials", "ops@example.com", "sk_live_x")
	f.Add([]byte(`{"grant_type":"client_credentials","client_id":"a\u00e9","client_secret":"s\"x"}`), "Basic YTpi", "x", "a:b", "c%2")
	f.Add([]byte("grant_type=a;b&grant_type=c"), "basic !!", "", "", "\u2028")
	f.Add([]byte(` {"client_id":1}`), "Bearer x", "g", "é", "s")
	f.Fuzz(func(t *testing.T, body []byte, authorization, grant, id, secret string) {
		tr, h := tokenRequestWithHeader(body, authorization)
		if bid, _, bsecret, present, ok := basicCredentials(h); tr.bad == "" && present &&
			(!ok || tr.clientID != bid || tr.clientSecret != bsecret) {
			// Basic credentials are used as sent, or the request is refused.
			t.Fatalf("%q with %q read as %+v", body, authorization, tr)
		}
		if !utf8.ValidString(grant) || !utf8.ValidString(id) || !utf8.ValidString(secret) {
			return // JSON cannot carry invalid UTF-8
		}
		want := tokenRequest{grantType: grant, clientID: id, clientSecret: secret}
		form := []byte(url.Values{"grant_type": {grant}, "client_id": {id}, "client_secret": {secret}}.Encode())
		if got := tokenRequestOf(form, ""); got != want {
			t.Fatalf("form %q read as %+v, want %+v", form, got, want)
		}
		js, err := json.Marshal(map[string]string{"grant_type": grant, "client_id": id, "client_secret": secret})
		if err != nil {
			t.Fatal(err)
		}
		if got := tokenRequestOf(js, ""); got != want {
			t.Fatalf("JSON %s read as %+v, want %+v", js, got, want)
		}
		if id == "" && secret == "" {
			return // Basic with nothing in it is still a credential pair; not this property's case
		}
		basic := "Basic " + base64.StdEncoding.EncodeToString([]byte(basicID(id)+":"+url.QueryEscape(secret)))
		grantOnly := []byte(url.Values{"grant_type": {grant}}.Encode())
		got := tokenRequestOf(grantOnly, basic)
		got.clientIDSent = "" // the id as sent, form-encoded: not this property's
		if got != want {
			t.Fatalf("form %q with %q read as %+v, want %+v", grantOnly, basic, got, want)
		}
	})
}
