package e2e

import (
	"strings"
	"testing"
)

func TestEvaluateBodiesAndAliases(t *testing.T) {
	s := Start(t, bin)
	a := s.CreateAccount(t, map[string]any{"email": "ev@example.com", "plan": "growth"})
	for _, c := range []struct {
		name, ctype, body, decision string
	}{
		{"json", "application/json", `{"token":"test_vpn"}`, "review"},
		{"text/plain", "text/plain", `{"token":"test_tor"}`, "block"},
		{"vendor json", "application/vnd.example+json", `{"token":"test_proxy"}`, "block"},
		{"no content type", "", `{"token":"test_datacenter"}`, "allow"},
		{"form", "application/x-www-form-urlencoded", `token=test_vpn&email=a%40b.co&tz=Europe%2FBerlin`, "review"},
		{"form aliases", "application/x-www-form-urlencoded", `netcheck=test_tor&service_tz=UTC&service_fp=abc`, "block"},
		{"json aliases", "application/json", `{"netcheck":"test_vpn","service_tz":"Asia/Calcutta"}`, "review"},
		{"token wins", "application/json", `{"token":"test_clean","netcheck":"test_tor"}`, "allow"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := map[string]string{}
			if c.ctype != "" {
				h["Content-Type"] = c.ctype
			}
			r := s.Do(t, Req{Method: "POST", Path: "/v1/evaluate", Bearer: a.LiveKey, Body: c.body, Header: h})
			if r.Status != 200 {
				t.Fatalf("%d %s", r.Status, r.Body)
			}
			m := r.JSON(t)
			if m["decision"] != c.decision || m["status"] != "success" || m["test"] != true {
				t.Fatalf("decision %v: %s", m["decision"], r.Body)
			}
			if r.Header.Get("X-Request-Id") == "" || r.Header.Get("X-RateLimit-Limit") != "20000" {
				t.Fatalf("headers: %v", r.Header)
			}
		})
	}
	// The time zone alias is read: Asia/Calcutta is a backward name for IN.
	r := s.Do(t, Req{Method: "POST", Path: "/v1/evaluate", Bearer: a.LiveKey, Body: `{"token":"test_clean","service_tz":"Asia/Calcutta"}`})
	tz, _ := r.JSON(t)["timezone"].(map[string]any)
	if tz == nil || tz["country"] != "IN" || tz["matches_ip"] != false || tz["checked"] != true {
		t.Fatalf("timezone block: %s", r.Body)
	}
	if !strings.Contains(string(r.Body), "timezone_mismatch") || r.JSON(t)["decision"] != "review" {
		t.Fatalf("a checked mismatch raises allow to review: %s", r.Body)
	}
	// Multipart is not read: the answer is the degraded one.
	r = s.Do(t, Req{Method: "POST", Path: "/v1/evaluate", Bearer: a.LiveKey, Body: "--x\r\n\r\ntoken=test_tor\r\n--x--", Header: map[string]string{"Content-Type": "multipart/form-data; boundary=x"}})
	if r.Status != 200 || r.JSON(t)["degraded"] != true {
		t.Fatalf("multipart: %d %s", r.Status, r.Body)
	}
}

func TestEvaluateDegradedSandboxSampleErrors(t *testing.T) {
	s := Start(t, bin)
	a := s.CreateAccount(t, map[string]any{"email": "dg@example.com"})
	for _, body := range []string{``, `{}`, `{"token":null}`, `{"token":""}`} {
		r := s.Do(t, Req{Method: "POST", Path: "/v1/evaluate", Bearer: a.LiveKey, Body: body, Header: map[string]string{"Content-Type": "application/json"}})
		m := r.JSON(t)
		if r.Status != 200 || m["degraded"] != true || m["ip"] != "unknown" || m["country"] != nil || m["decision"] != "allow" || m["device_status"] != "not_sent" {
			t.Fatalf("degraded %q: %d %s", body, r.Status, r.Body)
		}
	}
	r := s.Do(t, Req{Method: "POST", Path: "/v1/evaluate", Bearer: a.LiveKey, Body: `{"email":"someone@mailinator.com"}`})
	if m := r.JSON(t); m["decision"] != "review" || m["degraded"] != true || m["email"].(map[string]any)["disposable"] != true {
		t.Fatalf("degraded with a disposable email: %s", r.Body)
	}
	for _, c := range []struct{ body, msg string }{
		{`{"token":"forged.token.value"}`, "Invalid token."},
		{`{"token":123}`, "Invalid token."},
		{`{"accountId":"` + strings.Repeat("x", 257) + `"}`, "accountId"},
		{`{"tz":"` + strings.Repeat("x", 65) + `"}`, "tz"},
	} {
		r := s.Do(t, Req{Method: "POST", Path: "/v1/evaluate", Bearer: a.LiveKey, Body: c.body})
		if r.Status != 400 || !strings.Contains(r.JSON(t)["error"].(string), c.msg) {
			t.Fatalf("%s: %d %s", c.body, r.Status, r.Body)
		}
	}
	// Sandbox: test tokens only, no rate-limit headers, sandbox: true.
	r = s.Do(t, Req{Method: "POST", Path: "/v1/evaluate", Bearer: "sk_test_sandbox", Body: `{"token":"test_proxy"}`})
	if m := r.JSON(t); r.Status != 200 || m["sandbox"] != true || m["test"] != true || m["decision"] != "block" || r.Header.Get("X-RateLimit-Limit") != "" {
		t.Fatalf("sandbox: %d %v %s", r.Status, r.Header, r.Body)
	}
	for _, body := range []string{`{}`, `{"token":"real-looking"}`} {
		if r := s.Do(t, Req{Method: "POST", Path: "/v1/evaluate", Bearer: "sk_test_sandbox", Body: body}); r.Status != 400 {
			t.Fatalf("sandbox %s: %d", body, r.Status)
		}
	}
	if r := s.Do(t, Req{Path: "/v1/lookup/1.1.1.1", Bearer: "sk_test_sandbox"}); r.Status == 200 {
		t.Fatalf("sandbox key must not work on lookup: %d", r.Status)
	}
	// Sample: deterministic, sample: true, default scenario vpn, unknown → 400.
	r = s.Do(t, Req{Path: "/v1/evaluate/sample"})
	if m := r.JSON(t); r.Status != 200 || m["sample"] != true || m["decision"] != "review" || m["network"].(map[string]any)["vpn"] != true {
		t.Fatalf("default sample: %s", r.Body)
	}
	if m := s.Do(t, Req{Path: "/v1/evaluate/sample?scenario=bot"}).JSON(t); m["decision"] != "block" || !strings.Contains(strings.Join(toStrings(m["reasons"]), ","), "automation_detected") {
		t.Fatalf("bot sample: %v", m)
	}
	if r := s.Do(t, Req{Path: "/v1/evaluate/sample?scenario=martian"}); r.Status != 400 {
		t.Fatalf("unknown scenario: %d", r.Status)
	}
}

func toStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

func TestEvaluateRulesAndPins(t *testing.T) {
	s := Start(t, bin)
	a := s.CreateAccount(t, map[string]any{"email": "pol@example.com"})
	base := "/admin/v1/accounts/" + a.ID
	s.Admin(t, "PUT", base+"/rules", []map[string]any{{"signal": "vpn", "action": "block"}, {"signal": "tor", "action": "review"}})
	ev := func(tok string) map[string]any {
		return s.Do(t, Req{Method: "POST", Path: "/v1/evaluate", Bearer: a.LiveKey, Body: map[string]any{"token": tok}}).JSON(t)
	}
	m := ev("test_vpn")
	if m["decision"] != "block" || m["decision_source"] != "rules" || m["engine_decision"] != "review" || toStrings(m["rule_matched"])[0] != "vpn" {
		t.Fatalf("vpn rule: %v", m)
	}
	if m := ev("test_tor"); m["decision"] != "review" || m["engine_decision"] != "block" {
		t.Fatalf("tor rule: %v", m)
	}
	if m := ev("test_clean"); m["decision_source"] != nil || m["engine_decision"] != nil {
		t.Fatalf("no rule matched: %v", m)
	}
	// Test-key answers obey the same policy.
	tm := s.Do(t, Req{Method: "POST", Path: "/v1/evaluate", Bearer: a.TestKey, Body: map[string]any{"token": "test_vpn"}}).JSON(t)
	if tm["decision"] != "block" || tm["test"] != true {
		t.Fatalf("test key with rules: %v", tm)
	}
	// Pins outrank rules.
	s.Admin(t, "PUT", base+"/exceptions", []map[string]any{{"ip": "89.187.178.0/24", "action": "allow", "label": "vendor"}})
	if m := ev("test_vpn"); m["decision"] != "allow" || m["decision_source"] != "exception" || m["exception_matched"] != "vendor" || m["engine_decision"] != "review" {
		t.Fatalf("pin: %v", m)
	}
	// The risk score is the engine's, whatever the policy says.
	if ev("test_vpn")["risk_score"] != s.Do(t, Req{Method: "POST", Path: "/v1/evaluate", Bearer: "sk_test_sandbox", Body: map[string]any{"token": "test_vpn"}}).JSON(t)["risk_score"] {
		t.Fatal("policy changed the risk score")
	}
}
