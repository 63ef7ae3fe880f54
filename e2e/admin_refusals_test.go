package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestAdminAlmostValidRefusedAndKept walks, through the real binary, admin
// bodies that almost parse and were stored or answered 200: a webhook port
// past 65535, a wildcard origin, a null allowlist or suspension, a body of
// null, an email with an empty domain label, a null clock set. Each is a 400
// in the {"error", …} shape (ADMIN.md), the account reads back unchanged,
// and so it does after a restart on the same data directory.
func TestAdminAlmostValidRefusedAndKept(t *testing.T) {
	s := Start(t, bin)
	a := s.CreateAccount(t, map[string]any{"email": "refuse@example.com"})
	uri := "/admin/v1/accounts/" + a.ID
	if r := s.Admin(t, "PATCH", uri, map[string]any{"suspended": true, "allowlist": []string{"203.0.113.0/24"}, "origins": []string{"https://shop.example"}}); r.Status != 200 {
		t.Fatalf("patch: %d %s", r.Status, r.Body)
	}
	if r := s.Admin(t, "PUT", uri+"/webhook", map[string]any{"url": "https://hooks.example.com/in"}); r.Status != 200 {
		t.Fatalf("webhook: %d %s", r.Status, r.Body)
	}
	read := func() string {
		t.Helper()
		r := s.Admin(t, "GET", uri, nil)
		if r.Status != 200 {
			t.Fatalf("get: %d %s", r.Status, r.Body)
		}
		return string(r.Body)
	}
	before := read()
	clock := func() time.Time {
		t.Helper()
		now, err := time.Parse(time.RFC3339Nano, s.Admin(t, "POST", "/admin/v1/clock", map[string]any{}).JSON(t)["now"].(string))
		if err != nil {
			t.Fatal(err)
		}
		return now
	}
	for _, c := range []struct {
		method, path, body string
	}{
		{"PUT", uri + "/webhook", `{"url":"https://hooks.example.com:99999/in"}`},
		{"PUT", uri + "/webhook", `{"url":"https://hooks.example.com:0/in"}`},
		{"PATCH", uri, `{"origins":["https://*.shop.example"]}`},
		{"PATCH", uri, `{"origins":["https://shop..example"]}`},
		{"PATCH", uri, `{"allowlist":null}`},
		{"PATCH", uri, `{"suspended":null}`},
		{"PATCH", uri, `null`},
		{"POST", "/admin/v1/accounts", `{"email":"owner@example..com"}`},
		{"POST", "/admin/v1/accounts", `{"email":"owner@example.com."}`},
		{"POST", "/admin/v1/clock", `{"set":null,"advance":"1h"}`},
	} {
		at := clock()
		r := s.Admin(t, c.method, c.path, c.body)
		if r.Status != 400 || r.JSON(t)["error"] == "" {
			t.Errorf("%s %s %s: %d %s", c.method, c.path, c.body, r.Status, r.Body)
		}
		if got := read(); got != before {
			t.Fatalf("%s %s %s changed the account:\n%s\n%s", c.method, c.path, c.body, before, got)
		}
		// The clock runs on; a move is an hour.
		if now := clock(); now.Sub(at) > 30*time.Minute {
			t.Fatalf("%s %s %s moved the clock from %s to %s", c.method, c.path, c.body, at, now)
		}
	}
	if r := s.Admin(t, "GET", "/admin/v1/accounts?q=owner@example", nil); r.Status != 200 || strings.TrimSpace(string(r.Body)) != "[]" {
		t.Fatalf("refused emails created accounts: %s", r.Body)
	}
	s.Restart()
	if got := read(); got != before {
		t.Fatalf("after restart:\n%s\n%s", before, got)
	}
}
