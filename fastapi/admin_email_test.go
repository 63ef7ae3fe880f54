package fastapi

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestAdminEmailIsOneAddress: an account's email is where its usage
// warnings go. One that reads as two addresses in a To header (a comma, a
// semicolon, angle brackets, a second @ outside a quoted local part) is
// refused; the limit is 254 bytes, as the message says; a quoted local
// part and an internationalised address within it are accepted.
func TestAdminEmailIsOneAddress(t *testing.T) {
	e := newTestEnv(t)
	for email, want := range map[string]int{
		"owner@x.example,someone@y.example": 400,
		"owner@x.example;someone@y.example": 400,
		"Owner <owner@x.example>":           400,
		"a@b@x.example":                     400,
		"owner@x.example>":                  400,
		// No mailbox has an empty domain label (RFC 5321 4.1.2).
		"owner@x..example":  400,
		"owner@.x.example":  400,
		"owner@x.example.":  400,
		"owner@.":           400,
		"owner@[192.0.2.1]": 201,
		"owner@localhost":   201,
		strings.Repeat("ü", 130) + "@example.de": 400, // 271 bytes
		`"a,b"@x.example`:                        201,
		"bücher@bücher.example":                  201,
		"ops+fraud@example.com":                  201,
	} {
		ctx := e.do("POST", "/admin/v1/accounts", "Bearer adm", func() []byte { b, _ := json.Marshal(map[string]string{"email": email}); return b }())
		if ctx.Response.StatusCode() != want {
			t.Errorf("%q: %d %s, want %d", email, ctx.Response.StatusCode(), ctx.Response.Body(), want)
		}
		if want == 400 && !strings.Contains(string(ctx.Response.Body()), "254 bytes") {
			t.Errorf("%q: %s, want the message to give the limit in bytes", email, ctx.Response.Body())
		}
	}
}
