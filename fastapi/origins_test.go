package fastapi

import (
	"slices"
	"testing"
)

// TestCanonicalOriginsDropDefaultPorts: an origin given with its scheme's
// default port is kept as a browser's Origin header names it (no port);
// another port stays.
func TestCanonicalOriginsDropDefaultPorts(t *testing.T) {
	got, err := canonicalOrigins([]string{"https://Shop.Example:443", "http://shop.example:80/", "https://shop.example:8443", "HTTP://[::1]:80", "https://shop.example:80"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"https://shop.example", "http://shop.example", "https://shop.example:8443", "http://[::1]", "https://shop.example:80"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// TestCanonicalOriginsPunycode: an internationalised host is kept in the
// ASCII form a browser's Origin header carries.
func TestCanonicalOriginsPunycode(t *testing.T) {
	got, err := canonicalOrigins([]string{"https://Bücher.example", "https://bücher.example:8443", "https://xn--bcher-kva.example:443"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"https://xn--bcher-kva.example", "https://xn--bcher-kva.example:8443", "https://xn--bcher-kva.example"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// TestAdminOriginsNoBrowserSends: an origin no browser's Origin header can
// carry — a wildcard, an empty label, a port outside 1-65535 — is a 400 that
// keeps the stored origins (ADMIN.md: origins, "array of confirmed website
// origins"); it was stored, and the site's every page then refused.
func TestAdminOriginsNoBrowserSends(t *testing.T) {
	e := newTestEnv(t)
	uri := "/admin/v1/accounts/" + e.acct.View.ID
	if ctx := e.do("PATCH", uri, "Bearer adm", []byte(`{"origins":["https://shop.example"]}`)); ctx.Response.StatusCode() != 200 {
		t.Fatalf("set: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	for _, o := range []string{"https://*.shop.example", "https://*", "https://shop..example", "https://.shop.example",
		"https://shop.example:99999", "https://shop.example:0", "https://shop!.example", "http://sh$op.example"} {
		ctx := e.do("PATCH", uri, "Bearer adm", []byte(`{"origins":["`+o+`"]}`))
		if got := e.accts.Get(e.acct.View.ID).Origins; ctx.Response.StatusCode() != 400 || !slices.Equal(got, []string{"https://shop.example"}) {
			t.Errorf("origin %q: %d %s; origins now %q", o, ctx.Response.StatusCode(), ctx.Response.Body(), got)
		}
	}
	for _, o := range []string{"https://shop.example.", "https://my_shop.example", "http://203.0.113.7:8080", "https://[2001:db8::1]", "https://shop-1.example:65535", "http://localhost:3000"} {
		if ctx := e.do("PATCH", uri, "Bearer adm", []byte(`{"origins":["`+o+`"]}`)); ctx.Response.StatusCode() != 200 {
			t.Errorf("origin %q: %d %s", o, ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
}
