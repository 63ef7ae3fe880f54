package fastapi

import (
	"encoding/json"
	"testing"
)

// TestLookupPathNotOneIP: a lookup path that is not one address — a pasted
// CIDR, an encoded slash, nothing — answers 400 "Invalid IP format." (SPEC
// §7 "Lookup path not one public IP"), not the router's 404; one address,
// with or without a trailing slash, is looked up.
func TestLookupPathNotOneIP(t *testing.T) {
	e := newTestEnv(t)
	auth := "Bearer " + e.acct.LiveKey
	for _, p := range []string{"/v1/lookup/10.0.0.0/8", "/v1/lookup/1.2.3.4%2F24", "/v1/lookup/", "/v1/lookup", "/v1/lookup/8.8.8.8/x/y"} {
		ctx := e.do("GET", p, auth, nil)
		var m struct{ Error string }
		_ = json.Unmarshal(ctx.Response.Body(), &m)
		if ctx.Response.StatusCode() != 400 || m.Error != "Invalid IP format." {
			t.Errorf("GET %s: %d %s, want 400 Invalid IP format.", p, ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
	for _, p := range []string{"/v1/lookup/8.8.8.8", "/v1/lookup/8.8.8.8/"} {
		if ctx := e.do("GET", p, auth, nil); ctx.Response.StatusCode() != 200 {
			t.Errorf("GET %s: %d %s", p, ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
	if ctx := e.do("POST", "/v1/lookup/8.8.8.8", auth, nil); ctx.Response.StatusCode() != 405 {
		t.Errorf("POST: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	if ctx := e.do("GET", "/v1/lookups", auth, nil); ctx.Response.StatusCode() != 404 {
		t.Errorf("GET /v1/lookups: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
}
