package e2e

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

// collectDeviceFrom is collectDevice with the page's Origin header, as a
// browser on the customer's website sends it.
func collectDeviceFrom(t *testing.T, s *Server, pk, addr, origin, fixture string) string {
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
	r := s.Do(t, Req{Method: "POST", Path: "/v1/collect/device", Body: fx.Signals,
		Header: map[string]string{"X-Forwarded-For": addr, "Origin": origin}})
	id, _ := r.JSON(t)["event_id"].(string)
	if r.Status != 200 || !strings.HasPrefix(id, "ev_") {
		t.Fatalf("collect device: %d %s", r.Status, r.Body)
	}
	return id
}

func gpuEvidence(challenge string, v float64) map[string]any {
	f := make([]float64, 128)
	for i := range f {
		f[i] = v
	}
	return map[string]any{"challenge": challenge, "protocol": "atomic-order-group-median-v1:128x128:32:low-power", "features": f}
}

func gpuStatus(m map[string]any) any {
	d, _ := m["device"].(map[string]any)
	g, _ := d["gpu_evidence"].(map[string]any)
	return g["status"]
}

func TestDeviceEvidenceChallenge(t *testing.T) {
	s := Start(t, bin)
	a := s.CreateAccount(t, map[string]any{"email": "gpu@example.com", "plan": "starter"})
	challenge := func(key, ev string) *Response {
		return s.Do(t, Req{Method: "POST", Path: "/v1/device-evidence/challenge", Bearer: key, Body: map[string]any{"fingerprintEventId": ev}})
	}
	tok := collectToken(t, s, a.PublishableKey, "73.0.0.1", nil)
	ev := collectDeviceFrom(t, s, a.PublishableKey, "73.0.0.1", "https://shop.example", "chrome_desktop_windows")

	bare := collectDevice(t, s, a.PublishableKey, "73.0.0.1", "chrome_desktop_windows")
	// Beta off by default: 409.
	if r := challenge(a.LiveKey, ev); r.Status != 409 {
		t.Fatalf("beta off: %d %s", r.Status, r.Body)
	}
	if r := s.Admin(t, "PATCH", "/admin/v1/accounts/"+a.ID, map[string]any{"device_evidence_beta": true, "origins": []string{"https://shop.example"}}); r.Status != 200 {
		t.Fatalf("patch: %d %s", r.Status, r.Body)
	}
	if r := challenge(a.TestKey, ev); r.Status != 401 || r.JSON(t)["error"] != "live key required" {
		t.Fatalf("test key: %d %s", r.Status, r.Body)
	}
	// An event sent without an Origin (collected before origins were set) is
	// not from the confirmed website.
	if r := challenge(a.LiveKey, bare); r.Status != 422 {
		t.Fatalf("no origin: %d %s", r.Status, r.Body)
	}

	r := challenge(a.LiveKey, ev)
	c := r.JSON(t)
	ch, _ := c["challenge"].(string)
	if r.Status != 200 || !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(ch) || c["experimental"] != true ||
		c["protocol"] != "atomic-order-group-median-v1:128x128:32:low-power" || c["consistency_protocol"] != "browser-consistency-v1" {
		t.Fatalf("challenge: %d %s", r.Status, r.Body)
	}
	st, m := evalJSON(t, s, a.LiveKey, map[string]any{"token": tok, "fingerprintEventId": ev, "gpuEvidence": gpuEvidence(ch, 0.5)})
	if ev, _ := m["evidence"].(map[string]any); st != 200 || gpuStatus(m) != "recorded" || m["decision"] != "allow" || ev["device_replayed"] == true {
		t.Fatalf("recorded: %d %v", st, m)
	}
	if _, m := evalJSON(t, s, a.LiveKey, map[string]any{"token": tok, "fingerprintEventId": ev, "gpuEvidence": gpuEvidence(ch, 0.5)}); gpuStatus(m) != "expired_or_used" {
		t.Fatalf("second use: %v", m)
	}

	// A fresh challenge left unused for 3 minutes has expired.
	ev2 := collectDeviceFrom(t, s, a.PublishableKey, "73.0.0.1", "https://shop.example", "brave_macos")
	r = challenge(a.LiveKey, ev2)
	ch2, _ := r.JSON(t)["challenge"].(string)
	if r.Status != 200 {
		t.Fatalf("second challenge: %d %s", r.Status, r.Body)
	}
	s.Advance(t, "3m")
	if _, m := evalJSON(t, s, a.LiveKey, map[string]any{"token": tok, "fingerprintEventId": ev2, "gpuEvidence": gpuEvidence(ch2, 0.5)}); gpuStatus(m) != "expired_or_used" {
		t.Fatalf("expired: %v", m)
	}
	// The event is now past 5 minutes: 422.
	s.Advance(t, "3m")
	if r := challenge(a.LiveKey, ev2); r.Status != 422 {
		t.Fatalf("old event: %d %s", r.Status, r.Body)
	}
}
