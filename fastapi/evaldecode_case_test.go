package fastapi

import (
	"testing"
)

// CLARIFICATIONS.md "Evaluate": "Unknown request fields are ignored."
// SPEC 2.1 names the fields token, netcheck, fingerprintEventId, service_fp,
// accountId, email, tz, service_tz, gpuEvidence, browserEvidence; JSON
// member names are case-sensitive, so "Token", "TOKEN", "Tz", "EMAIL" are
// unknown fields and must not change the answer.
func TestUnknownCaseVariantFieldsIgnored(t *testing.T) {
	e := newTestEnv(t)
	for _, c := range []struct {
		name, body, wantDecision string
	}{
		// Fails open: the unknown "Token" erases test_tor's block.
		{"Token after token", `{"token":"test_tor","Token":""}`, "block"},
		{"TOKEN null after token", `{"token":"test_tor","TOKEN":null}`, "block"},
		// Fails open: an unknown field erases a disposable email.
		{"EMAIL null after email", `{"token":"test_clean","email":"x@mailinator.com","EMAIL":null}`, "review"},
		// An unknown field of another type is refused (400).
		{"Tz number", `{"token":"test_vpn","Tz":5}`, "review"},
		// An unknown field is acted upon.
		{"Email used", `{"token":"test_clean","Email":"x@mailinator.com"}`, "allow"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := e.post("/v1/evaluate", "Bearer "+e.acct.LiveKey, "application/json", c.body)
			if ctx.Response.StatusCode() != 200 {
				t.Fatalf("%s: status %d %s, want 200 (unknown fields ignored)", c.body, ctx.Response.StatusCode(), ctx.Response.Body())
			}
			m := jsonOf(t, ctx)
			if m["decision"] != c.wantDecision {
				t.Fatalf("%s: decision %v degraded %v reasons %v, want %s", c.body, m["decision"], m["degraded"], m["reasons"], c.wantDecision)
			}
		})
	}
}
