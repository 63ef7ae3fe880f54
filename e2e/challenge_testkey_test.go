package e2e

import (
	"testing"
)

// TestTestKeyLeavesDeviceEvidence: the personal test key's evaluations show
// in no later answer (SPEC 2.2 customer_history "excludes test-key
// traffic"; SPEC 5.2: the test key "cannot call the device-evidence
// challenge"). A test-key evaluation carrying gpuEvidence used to consume
// the live key's one-use challenge (the live evaluation after it answered
// expired_or_used) and stored its sample, which then showed as a live
// evaluation's nearest device for 30 days. It now reads the challenge and
// the samples without using or changing them.
func TestTestKeyLeavesDeviceEvidence(t *testing.T) {
	s := Start(t, bin)
	a := s.CreateAccount(t, map[string]any{"email": "gputest@example.com", "plan": "starter"})
	if r := s.Admin(t, "PATCH", "/admin/v1/accounts/"+a.ID, map[string]any{"device_evidence_beta": true, "origins": []string{"https://shop.example"}}); r.Status != 200 {
		t.Fatalf("patch: %d %s", r.Status, r.Body)
	}
	challenge := func(ev string) string {
		r := s.Do(t, Req{Method: "POST", Path: "/v1/device-evidence/challenge", Bearer: a.LiveKey, Body: map[string]any{"fingerprintEventId": ev}})
		ch, _ := r.JSON(t)["challenge"].(string)
		if r.Status != 200 {
			t.Fatalf("challenge: %d %s", r.Status, r.Body)
		}
		return ch
	}
	gpu := func(m map[string]any) map[string]any {
		d, _ := m["device"].(map[string]any)
		g, _ := d["gpu_evidence"].(map[string]any)
		return g
	}
	tok := collectToken(t, s, a.PublishableKey, "73.0.0.1", nil)

	// The test key first: its evidence is read, not recorded.
	ev := collectDeviceFrom(t, s, a.PublishableKey, "73.0.0.1", "https://shop.example", "chrome_desktop_windows")
	ch := challenge(ev)
	if st, m := evalJSON(t, s, a.TestKey, map[string]any{"token": tok, "fingerprintEventId": ev, "gpuEvidence": gpuEvidence(ch, 0.5)}); st != 200 || gpu(m)["status"] != "not_saved" {
		t.Fatalf("test key: %d %v", st, gpu(m))
	}
	// The live evaluation after it still holds an unused challenge, and no
	// other device's sample is there to be nearest.
	if st, m := evalJSON(t, s, a.LiveKey, map[string]any{"token": tok, "fingerprintEventId": ev, "gpuEvidence": gpuEvidence(ch, 0.5)}); st != 200 || gpu(m)["status"] != "recorded" {
		t.Fatalf("live after test key: %d %v", st, gpu(m))
	}

	// A test-key sample of another device is never a live answer's nearest.
	ev2 := collectDeviceFrom(t, s, a.PublishableKey, "73.0.0.1", "https://shop.example", "brave_macos")
	ch2 := challenge(ev2)
	if _, m := evalJSON(t, s, a.TestKey, map[string]any{"token": tok, "fingerprintEventId": ev2, "gpuEvidence": gpuEvidence(ch2, 0.25)}); gpu(m)["status"] != "not_saved" || gpu(m)["nearest_device"] == nil {
		t.Fatalf("test key, second device: %v", gpu(m))
	}
	s.Advance(t, "31s")
	ev3 := collectDeviceFrom(t, s, a.PublishableKey, "73.0.0.1", "https://shop.example", "chrome_desktop_windows")
	ch3 := challenge(ev3)
	if _, m := evalJSON(t, s, a.LiveKey, map[string]any{"token": tok, "fingerprintEventId": ev3, "gpuEvidence": gpuEvidence(ch3, 0.5)}); gpu(m)["status"] != "recorded" || gpu(m)["nearest_device"] != nil {
		t.Fatalf("live, first device again: %v", gpu(m))
	}
	// The test key's one read left the challenge for the live key.
	if _, m := evalJSON(t, s, a.LiveKey, map[string]any{"token": tok, "fingerprintEventId": ev2, "gpuEvidence": gpuEvidence(ch2, 0.25)}); gpu(m)["status"] != "recorded" {
		t.Fatalf("live, second device: %v", gpu(m))
	}
}
