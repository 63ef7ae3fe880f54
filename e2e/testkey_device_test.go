package e2e

import "testing"

// TestTestKeyReadsDeviceSightings: the personal test key "runs the complete
// live pipeline (real tokens, device intelligence, ...)" (SPEC 5.2), and
// device.times_seen, first_seen and returning are the device's sightings,
// "not scoped to the key" (SPEC 2.2). A test-key evaluation counts no use
// of the event, and that path read no sightings: a device seen twice came
// back times_seen 1, returning false, first_seen the event's own time.
func TestTestKeyReadsDeviceSightings(t *testing.T) {
	s := Start(t, bin)
	a := s.CreateAccount(t, map[string]any{"email": "seen@example.com", "plan": "growth"})
	tok := collectToken(t, s, a.PublishableKey, "73.0.0.12", nil)
	first := collectDevice(t, s, a.PublishableKey, "73.0.0.12", "chrome_desktop_windows")
	_, lm := evalJSON(t, s, a.LiveKey, map[string]any{"token": tok, "fingerprintEventId": first})
	ld, _ := lm["device"].(map[string]any)
	if ld == nil || ld["times_seen"] != float64(1) {
		t.Fatalf("live, first sighting: %v", lm)
	}
	s.Advance(t, "90s")
	second := collectDevice(t, s, a.PublishableKey, "73.0.0.12", "chrome_desktop_windows")
	st, tm := evalJSON(t, s, a.TestKey, map[string]any{"token": tok, "fingerprintEventId": second})
	td, _ := tm["device"].(map[string]any)
	if st != 200 || tm["test"] != true || tm["device_status"] != "ok" || td == nil {
		t.Fatalf("test key: %d %v", st, tm)
	}
	if td["times_seen"] != float64(2) || td["returning"] != true || td["first_seen"] != ld["first_seen"] {
		t.Fatalf("test key reads times_seen %v, returning %v, first_seen %v; the device was seen twice, first at %v",
			td["times_seen"], td["returning"], td["first_seen"], ld["first_seen"])
	}
	// The live key's evaluation of the same event then reads the same.
	_, lm = evalJSON(t, s, a.LiveKey, map[string]any{"token": tok, "fingerprintEventId": second})
	if ld, _ = lm["device"].(map[string]any); ld == nil || ld["times_seen"] != float64(2) || ld["first_seen"] != td["first_seen"] {
		t.Fatalf("live after the test key: %v", lm["device"])
	}
	if e, _ := lm["evidence"].(map[string]any); e == nil || e["device_replayed"] != false {
		t.Fatalf("the test key's evaluation made the live one a replay: %v", lm["evidence"])
	}
}
