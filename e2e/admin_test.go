package e2e

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

func TestAdminAccounts(t *testing.T) {
	s := Start(t, bin)
	if r := s.Do(t, Req{Method: "POST", Path: "/admin/v1/accounts", Body: map[string]any{"email": "x@y.z"}, Bearer: "wrong"}); r.Status != 401 {
		t.Fatalf("wrong admin token: %d", r.Status)
	}
	if r := s.Do(t, Req{Method: "POST", Path: "/admin/v1/accounts", Body: map[string]any{"email": "x@y.z"}}); r.Status != 401 {
		t.Fatalf("no admin token: %d", r.Status)
	}
	a := s.CreateAccount(t, map[string]any{"email": "ops@example.com"})
	if !strings.HasPrefix(a.ID, "acc_") || !strings.HasPrefix(a.LiveKey, "sk_live_") || !strings.HasPrefix(a.TestKey, "sk_test_") ||
		!strings.HasPrefix(a.PublishableKey, "pk_live_") || !strings.HasPrefix(a.WebhookSecret, "whsec_") {
		t.Fatalf("created account: %+v", a)
	}
	if len(a.LiveKey) != len("sk_live_")+43 {
		t.Errorf("live key length %d", len(a.LiveKey))
	}
	if r := s.Admin(t, "POST", "/admin/v1/accounts", map[string]any{"email": "OPS@example.com"}); r.Status != 409 {
		t.Fatalf("duplicate email: %d %s", r.Status, r.Body)
	}
	for _, bad := range []map[string]any{
		{"email": "not-an-email"}, {"email": "a@b.c", "plan": "gold"}, {"email": "a@b.c", "hourly_limit": 5},
		{"email": "a@b.c", "plan": "custom", "hourly_limit": -1}, {"email": "a@b.c", "created_at": "yesterday"},
		{"email": "a@b.c", "plna": "free"},
	} {
		if r := s.Admin(t, "POST", "/admin/v1/accounts", bad); r.Status != 400 || r.JSON(t)["error"] == "" {
			t.Errorf("create %v: %d %s", bad, r.Status, r.Body)
		}
	}

	r := s.Admin(t, "GET", "/admin/v1/accounts/"+a.ID, nil)
	if r.Status != 200 {
		t.Fatalf("get: %d %s", r.Status, r.Body)
	}
	if strings.Contains(string(r.Body), a.LiveKey) || strings.Contains(string(r.Body), a.TestKey) || strings.Contains(string(r.Body), a.WebhookSecret) {
		t.Fatalf("GET account leaks a secret: %s", r.Body)
	}
	m := r.JSON(t)
	if m["plan"] != "free" || m["suspended"] != false || m["live_key"].(map[string]any)["last4"] != a.LiveKey[len(a.LiveKey)-4:] {
		t.Fatalf("get body: %s", r.Body)
	}
	if r := s.Admin(t, "GET", "/admin/v1/accounts/acc_nope", nil); r.Status != 404 {
		t.Fatalf("unknown account: %d", r.Status)
	}

	r = s.Admin(t, "PATCH", "/admin/v1/accounts/"+a.ID, map[string]any{
		"plan": "custom", "hourly_limit": 100, "monthly_limit": nil, "allowlist": []string{"203.0.113.7", "198.51.100.0/24"},
		"origins": []string{"https://Shop.example"}, "device_evidence_beta": true,
	})
	if r.Status != 200 {
		t.Fatalf("patch: %d %s", r.Status, r.Body)
	}
	m = r.JSON(t)
	if m["plan"] != "custom" || m["hourly_limit"].(float64) != 100 || m["monthly_limit"] != nil || m["device_evidence_beta"] != true {
		t.Fatalf("patched: %s", r.Body)
	}
	if al := m["allowlist"].([]any); len(al) != 2 || al[0] != "203.0.113.7/32" {
		t.Fatalf("allowlist: %v", al)
	}
	if o := m["origins"].([]any); len(o) != 1 || o[0] != "https://shop.example" {
		t.Fatalf("origins: %v", o)
	}
	for _, bad := range []map[string]any{{"allowlist": []string{"nope"}}, {"plan": "x"}, {"origins": []string{"ftp://a"}}, {"suspended": "yes"}} {
		if r := s.Admin(t, "PATCH", "/admin/v1/accounts/"+a.ID, bad); r.Status != 400 {
			t.Errorf("patch %v: %d %s", bad, r.Status, r.Body)
		}
	}
	if r := s.Admin(t, "PATCH", "/admin/v1/accounts/acc_nope", map[string]any{"suspended": true}); r.Status != 404 {
		t.Errorf("patch unknown: %d", r.Status)
	}
}

func TestAdminRulesPinsWebhook(t *testing.T) {
	s := Start(t, bin)
	a := s.CreateAccount(t, map[string]any{"email": "r@example.com", "plan": "growth"})
	base := "/admin/v1/accounts/" + a.ID
	if r := s.Admin(t, "GET", base+"/rules", nil); r.Status != 200 || strings.TrimSpace(string(r.Body)) != "[]" {
		t.Fatalf("empty rules: %d %s", r.Status, r.Body)
	}
	rules := []map[string]any{{"signal": "vpn", "action": "block"}, {"signal": "datacenter", "action": "review"}}
	if r := s.Admin(t, "PUT", base+"/rules", rules); r.Status != 200 || !strings.Contains(string(r.Body), `"signal":"vpn"`) {
		t.Fatalf("put rules: %d %s", r.Status, r.Body)
	}
	for _, bad := range []any{[]map[string]any{{"signal": "vpnn", "action": "block"}}, []map[string]any{{"signal": "vpn", "action": "deny"}}, map[string]any{}} {
		if r := s.Admin(t, "PUT", base+"/rules", bad); r.Status != 400 {
			t.Errorf("bad rules %v: %d %s", bad, r.Status, r.Body)
		}
	}
	pins := []map[string]any{{"ip": "203.0.113.0/24", "action": "allow", "label": "office"}, {"visitor_id": "v_1", "action": "block", "label": "fraudster"}}
	if r := s.Admin(t, "PUT", base+"/exceptions", pins); r.Status != 200 || !strings.Contains(string(r.Body), "203.0.113.0/24") {
		t.Fatalf("put pins: %d %s", r.Status, r.Body)
	}
	if r := s.Admin(t, "PUT", base+"/exceptions", []map[string]any{{"ip": "1.2.3.4", "visitor_id": "v", "action": "allow"}}); r.Status != 400 {
		t.Errorf("pin with both ip and visitor: %d", r.Status)
	}
	if r := s.Admin(t, "PUT", base+"/webhook", map[string]any{"url": "https://hooks.example/fraud"}); r.Status != 200 {
		t.Fatalf("webhook: %d %s", r.Status, r.Body)
	}
	if r := s.Admin(t, "PUT", base+"/webhook", map[string]any{"url": "not a url"}); r.Status != 400 {
		t.Errorf("bad webhook url: %d", r.Status)
	}
	r := s.Admin(t, "POST", base+"/webhook/secret/rotate", nil)
	if r.Status != 200 || !strings.HasPrefix(r.JSON(t)["webhook_secret"].(string), "whsec_") || r.JSON(t)["webhook_secret"] == a.WebhookSecret {
		t.Fatalf("rotate webhook secret: %d %s", r.Status, r.Body)
	}
	for _, p := range []string{base + "/webhook/deliveries", base + "/devices", "/admin/v1/mail"} {
		if r := s.Admin(t, "GET", p, nil); r.Status != 200 || !strings.HasPrefix(string(r.Body), "[") {
			t.Errorf("%s: %d %s", p, r.Status, r.Body)
		}
	}

	// Everything survives a restart on the same data dir.
	s.Restart()
	if r := s.Admin(t, "GET", base+"/rules", nil); !strings.Contains(string(r.Body), `"datacenter"`) {
		t.Fatalf("rules after restart: %s", r.Body)
	}
	if r := s.Admin(t, "GET", base+"/exceptions", nil); !strings.Contains(string(r.Body), "fraudster") {
		t.Fatalf("pins after restart: %s", r.Body)
	}
	if r := s.Admin(t, "GET", base, nil); r.JSON(t)["webhook_url"] != "https://hooks.example/fraud" || r.JSON(t)["plan"] != "growth" {
		t.Fatalf("account after restart: %s", r.Body)
	}
}

func TestTestClockOnlyWhenEnabled(t *testing.T) {
	s := Start(t, bin)
	r := s.Admin(t, "POST", "/admin/v1/clock", map[string]any{"set": "2026-12-01T00:00:00Z"})
	if r.Status != 200 || !strings.HasPrefix(r.JSON(t)["now"].(string), "2026-12-01T00:00:0") {
		t.Fatalf("set clock: %d %s", r.Status, r.Body)
	}
	r = s.Admin(t, "POST", "/admin/v1/clock", map[string]any{"advance": "25h"})
	if !strings.HasPrefix(r.JSON(t)["now"].(string), "2026-12-02T01:00:0") {
		t.Fatalf("advance: %s", r.Body)
	}
	r = s.Admin(t, "POST", "/admin/v1/clock", map[string]any{"advance": 3600})
	if !strings.HasPrefix(r.JSON(t)["now"].(string), "2026-12-02T02:00:0") {
		t.Fatalf("advance seconds: %s", r.Body)
	}
	if r := s.Admin(t, "POST", "/admin/v1/clock", map[string]any{"advance": "soon"}); r.Status != 400 {
		t.Fatalf("bad advance: %d", r.Status)
	}
	// A server without --test-clock has no clock endpoint.
	noClock := StartServer(t, &Server{Bin: bin, NoTestClock: true})
	if r := noClock.Admin(t, "POST", "/admin/v1/clock", map[string]any{"advance": "1h"}); r.Status != 404 {
		t.Fatalf("clock without --test-clock: %d", r.Status)
	}
}

// TestAdminCLI drives the operator API through `fraudd admin`, as an operator
// would.
func TestAdminCLI(t *testing.T) {
	s := Start(t, bin)
	run := func(args ...string) (string, string, error) {
		cmd := exec.Command(bin, append([]string{"admin", "--url", s.URL, "--admin-token", AdminToken}, args...)...)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), err
	}
	out, stderr, err := run("create-account", "--email", "cli@example.com", "--plan", "scale")
	if err != nil {
		t.Fatalf("create-account: %v\n%s", err, stderr)
	}
	var created map[string]any
	if err := json.Unmarshal([]byte(out), &created); err != nil || !strings.HasPrefix(created["live_key"].(string), "sk_live_") {
		t.Fatalf("create-account output: %v %s", err, out)
	}
	if !strings.Contains(stderr, "not shown again") {
		t.Errorf("create-account should warn that secrets are shown once: %q", stderr)
	}
	id := created["id"].(string)
	if out, _, err := run("set-rules", id, "--json", `[{"signal":"tor","action":"review"}]`); err != nil || !strings.Contains(out, `"tor"`) {
		t.Fatalf("set-rules: %v %s", err, out)
	}
	if out, _, err := run("patch-account", id, "--json", `{"suspended":true}`); err != nil || !strings.Contains(out, `"suspended": true`) {
		t.Fatalf("patch-account: %v %s", err, out)
	}
	if out, _, err := run("get-account", id); err != nil || strings.Contains(out, created["live_key"].(string)) || !strings.Contains(out, `"plan": "scale"`) {
		t.Fatalf("get-account: %v %s", err, out)
	}
	if _, stderr, err := run("get-account", "acc_missing"); err == nil || !strings.Contains(stderr, "404") {
		t.Fatalf("unknown account should fail with the status: %v %s", err, stderr)
	}
	if _, _, err := run("no-such-command"); err == nil {
		t.Fatal("unknown subcommand succeeded")
	}
}
