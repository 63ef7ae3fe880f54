package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
)

// collectToken asks the running service for a network token as a browser at
// addr would (the harness trusts loopback as a proxy, so X-Forwarded-For
// names the visitor).
func collectToken(t *testing.T, s *Server, pk, addr string, body map[string]any) string {
	t.Helper()
	if body == nil {
		body = map[string]any{"v": 1}
	}
	body["key"] = pk
	r := s.Do(t, Req{Method: "POST", Path: "/v1/collect/network", Body: body,
		Header: map[string]string{"X-Forwarded-For": addr, "Origin": "https://shop.example"}})
	m := r.JSON(t)
	tok, _ := m["token"].(string)
	if r.Status != 200 || tok == "" || m["expires_in"] != float64(900) {
		t.Fatalf("collect network: %d %s", r.Status, r.Body)
	}
	if r.Header.Get("Access-Control-Allow-Origin") != "https://shop.example" {
		t.Fatalf("CORS answer: %v", r.Header)
	}
	return tok
}

// fixtureSignals is a browser's device report from intel/device's test
// fixtures, for the publishable key pk.
func fixtureSignals(t *testing.T, fixture, pk string) map[string]any {
	t.Helper()
	b, err := os.ReadFile("../intel/device/testdata/" + fixture + ".json")
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		Signals map[string]any `json:"signals"`
	}
	if err := json.Unmarshal(b, &fx); err != nil {
		t.Fatal(err)
	}
	fx.Signals["key"] = pk
	return fx.Signals
}

func collectDevice(t *testing.T, s *Server, pk, addr, fixture string) string {
	t.Helper()
	r := s.Do(t, Req{Method: "POST", Path: "/v1/collect/device", Body: fixtureSignals(t, fixture, pk), Header: map[string]string{"X-Forwarded-For": addr}})
	id, _ := r.JSON(t)["event_id"].(string)
	if r.Status != 200 || !strings.HasPrefix(id, "ev_") {
		t.Fatalf("collect device: %d %s", r.Status, r.Body)
	}
	return id
}

func evalJSON(t *testing.T, s *Server, key string, body map[string]any) (int, map[string]any) {
	t.Helper()
	r := s.Do(t, Req{Method: "POST", Path: "/v1/evaluate", Bearer: key, Body: body})
	var m map[string]any
	json.Unmarshal(r.Body, &m)
	return r.Status, m
}

func TestCollectorScriptServed(t *testing.T) {
	s := Start(t, bin)
	r := s.Do(t, Req{Path: "/collector.js"})
	if r.Status != 200 || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/javascript") ||
		!strings.Contains(r.Header.Get("Cache-Control"), "max-age=") || r.Header.Get("ETag") == "" {
		t.Fatalf("%d %v", r.Status, r.Header)
	}
	if len(r.Body) == 0 || len(r.Body) >= 20<<10 || !strings.Contains(string(r.Body), "FraudCollector") {
		t.Fatalf("collector.js is %d bytes", len(r.Body))
	}
	again := s.Do(t, Req{Path: "/collector.js", Header: map[string]string{"If-None-Match": r.Header.Get("ETag")}})
	if again.Status != http.StatusNotModified {
		t.Fatalf("revalidation: %d", again.Status)
	}
	pre := s.Do(t, Req{Method: "OPTIONS", Path: "/v1/collect/network", Header: map[string]string{
		"Origin": "https://shop.example", "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type,x-publishable-key"}})
	if pre.Status != 204 || pre.Header.Get("Access-Control-Allow-Origin") != "https://shop.example" {
		t.Fatalf("preflight: %d %v", pre.Status, pre.Header)
	}
}

func TestNetworkTokenEvaluate(t *testing.T) {
	s := Start(t, bin)
	a := s.CreateAccount(t, map[string]any{"email": "net@example.com", "plan": "starter"})
	b := s.CreateAccount(t, map[string]any{"email": "net2@example.com", "plan": "starter"})

	tok := collectToken(t, s, a.PublishableKey, "73.0.0.1", nil)
	st, m := evalJSON(t, s, a.LiveKey, map[string]any{"token": tok})
	n, _ := m["network"].(map[string]any)
	if st != 200 || m["ip"] != "73.0.0.1" || m["country"] != "US" || m["decision"] != "allow" || n["complete"] != true ||
		n["sdk_blocked"] != false || n["residential"] != true || m["device_status"] != "not_sent" || m["test"] != false {
		t.Fatalf("%d %v", st, m)
	}
	// A real token counts toward the month and the totals.
	u := s.Do(t, Req{Path: "/v1/usage", Bearer: a.LiveKey}).JSON(t)
	if u["month_used"] != float64(1) || u["total_evaluations"] != float64(1) {
		t.Fatalf("usage after one real token: %v", u)
	}

	// Tor, and a home address seen through a proxy header chain.
	tor := collectToken(t, s, a.PublishableKey, "102.130.113.9", nil)
	if _, m := evalJSON(t, s, a.LiveKey, map[string]any{"netcheck": tor}); m["decision"] != "block" || m["network"].(map[string]any)["tor"] != true {
		t.Fatalf("tor: %v", m)
	}
	chained := collectToken(t, s, a.PublishableKey, "24.0.0.1, 73.0.0.1", nil)
	if _, m := evalJSON(t, s, a.LiveKey, map[string]any{"token": chained}); m["ip"] != "73.0.0.1" || m["network"].(map[string]any)["proxy"] != true {
		t.Fatalf("forwarded chain: %v", m)
	}
	// A WebRTC candidate on another network: proxy evidence.
	leak := collectToken(t, s, a.PublishableKey, "73.0.0.1", map[string]any{"v": 1, "webrtc": map[string]any{"status": "ok", "addrs": []string{"24.0.0.1"}}})
	if _, m := evalJSON(t, s, a.LiveKey, map[string]any{"token": leak}); m["decision"] != "block" || !browserHasReason(m, "proxy_detected") {
		t.Fatalf("webrtc leak: %v", m)
	}

	// Tampered, malformed and foreign tokens: 400 Invalid token.
	foreign := collectToken(t, s, b.PublishableKey, "73.0.0.1", nil)
	for _, bad := range []string{tok[:len(tok)-1] + map[bool]string{true: "B", false: "A"}[strings.HasSuffix(tok, "A")], "nt1.xyz", foreign} {
		if st, m := evalJSON(t, s, a.LiveKey, map[string]any{"token": bad}); st != 400 || m["error"] != "Invalid token." {
			t.Fatalf("token %q: %d %v", bad, st, m)
		}
	}

	// Two hours later the same token still evaluates, with its age.
	s.Advance(t, "2h")
	st, m = evalJSON(t, s, a.LiveKey, map[string]any{"token": tok})
	if age, _ := m["evidence"].(map[string]any)["network_age_s"].(float64); st != 200 || age < 7200 {
		t.Fatalf("old token: %d %v", st, m)
	}
}

func TestDeviceEventEvaluateAndRestart(t *testing.T) {
	s := Start(t, bin)
	a := s.CreateAccount(t, map[string]any{"email": "dev@example.com", "plan": "starter"})
	tok := collectToken(t, s, a.PublishableKey, "73.0.0.1", nil)

	emu := collectDevice(t, s, a.PublishableKey, "73.0.0.1", "android_emulator")
	st, m := evalJSON(t, s, a.LiveKey, map[string]any{"token": tok, "fingerprintEventId": emu})
	d, _ := m["device"].(map[string]any)
	if st != 200 || d == nil || d["emulator"] != true || m["decision"] != "block" || !browserHasReason(m, "emulator_detected") || m["device_status"] != "ok" {
		t.Fatalf("emulator: %d %v", st, m)
	}
	vm := collectDevice(t, s, a.PublishableKey, "73.0.0.1", "vm_vmware_windows")
	if _, m := evalJSON(t, s, a.LiveKey, map[string]any{"token": tok, "fingerprintEventId": vm}); m["decision"] != "review" || !browserHasReason(m, "virtual_machine") {
		t.Fatalf("vm alone: %v", m)
	}
	inc := collectDevice(t, s, a.PublishableKey, "73.0.0.1", "chrome_incognito")
	if _, m := evalJSON(t, s, a.LiveKey, map[string]any{"token": tok, "fingerprintEventId": inc}); !browserHasReason(m, "private_browsing") {
		t.Fatalf("incognito: %v", m)
	}
	// A blocklisted address at collection time.
	bl := collectDevice(t, s, a.PublishableKey, "77.90.185.20", "chrome_desktop_windows")
	if _, m := evalJSON(t, s, a.LiveKey, map[string]any{"token": tok, "fingerprintEventId": bl}); m["device"].(map[string]any)["ip_blocklisted"] != true || !browserHasReason(m, "ip_blocklisted") {
		t.Fatalf("blocklisted: %v", m)
	}
	// Unknown id: unavailable, network-only, no device object.
	if _, m := evalJSON(t, s, a.LiveKey, map[string]any{"token": tok, "fingerprintEventId": "ev_0123456789abcdef0123456789abcdef"}); m["device_status"] != "unavailable" || m["device"] != nil || m["degraded"] != false {
		t.Fatalf("unknown event: %v", m)
	}

	// Events, uses and history survive a restart.
	s.Restart()
	st, m = evalJSON(t, s, a.LiveKey, map[string]any{"token": tok, "fingerprintEventId": emu})
	if e, _ := m["evidence"].(map[string]any); st != 200 || m["device_status"] != "ok" || e["device_replayed"] != true {
		t.Fatalf("after restart: %d %v", st, m)
	}
	again := collectDevice(t, s, a.PublishableKey, "73.0.0.1", "android_emulator")
	_, m = evalJSON(t, s, a.LiveKey, map[string]any{"token": tok, "fingerprintEventId": again})
	if d := m["device"].(map[string]any); d["times_seen"] != float64(2) || d["returning"] != true {
		t.Fatalf("history after restart: %v", d)
	}
}
