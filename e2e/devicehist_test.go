package e2e

import (
	"testing"
)

// TestDeviceSharedByAccounts walks SPEC 2.2's account object and linked
// accounts: one desktop device used by three of a shop's accounts in a day.
func TestDeviceSharedByAccounts(t *testing.T) {
	s := Start(t, bin)
	a := s.CreateAccount(t, map[string]any{"email": "shared@example.com", "plan": "growth"})
	tok := collectToken(t, s, a.PublishableKey, "73.0.0.9", nil)
	var m map[string]any
	for i, user := range []string{"user-1", "user-2", "user-3"} {
		ev := collectDevice(t, s, a.PublishableKey, "73.0.0.9", "chrome_desktop_windows")
		var st int
		st, m = evalJSON(t, s, a.LiveKey, map[string]any{"token": tok, "fingerprintEventId": ev, "accountId": user})
		if st != 200 || m["device_status"] != "ok" {
			t.Fatalf("evaluate %d: %d %v", i, st, m)
		}
	}
	acct, _ := m["account"].(map[string]any)
	if acct == nil || acct["accounts_24h_on_this_device"] != float64(3) || acct["devices_24h_for_this_account"] != float64(1) {
		t.Fatalf("account object: %v", m["account"])
	}
	d := m["device"].(map[string]any)
	if d["linked_accounts"] != float64(3) || d["multi_account"] != true || d["times_seen"] != float64(3) || d["returning"] != true {
		t.Fatalf("device history: %v", d)
	}
	ch, _ := d["customer_history"].(map[string]any)
	if ch == nil || ch["visits"] != float64(3) || ch["window_days"] != float64(90) || ch["accounts"] != float64(3) {
		t.Fatalf("customer_history: %v", d["customer_history"])
	}
	if !browserHasReason(m, "device_many_accounts") || !browserHasReason(m, "multi_account_device") || m["decision"] == "allow" {
		t.Fatalf("three accounts on one device must raise allow to review: %v %v", m["decision"], m["reasons"])
	}
	// The test key reads the history but gets no account object.
	ev := collectDevice(t, s, a.PublishableKey, "73.0.0.9", "chrome_desktop_windows")
	_, tm := evalJSON(t, s, a.TestKey, map[string]any{"token": tok, "fingerprintEventId": ev, "accountId": "user-1"})
	if tm["account"] != nil {
		t.Fatalf("test key answer carries the account object: %v", tm["account"])
	}
	// An accountId without device evidence: the device count is null.
	_, dm := evalJSON(t, s, a.LiveKey, map[string]any{"token": tok, "accountId": "user-9"})
	if ac, _ := dm["account"].(map[string]any); ac == nil || ac["accounts_24h_on_this_device"] != nil || ac["new_device"] != nil {
		t.Fatalf("account object without a device: %v", dm["account"])
	}
	// The admin view lists the device.
	r := s.Admin(t, "GET", "/admin/v1/accounts/"+a.ID+"/devices", nil)
	var devs []map[string]any
	if err := jsonUnmarshal(r.Body, &devs); err != nil || len(devs) != 1 || devs[0]["visitor_id"] != d["visitor_id"] {
		t.Fatalf("devices view: %d %s", r.Status, r.Body)
	}
	// History survives a restart.
	s.Restart()
	ev = collectDevice(t, s, a.PublishableKey, "73.0.0.9", "chrome_desktop_windows")
	_, m = evalJSON(t, s, a.LiveKey, map[string]any{"token": tok, "fingerprintEventId": ev, "accountId": "user-4"})
	if acct := m["account"].(map[string]any); acct["accounts_24h_on_this_device"] != float64(4) {
		t.Fatalf("after restart: %v", m["account"])
	}
}

// TestTestKeyUseIsNotALiveReplay: the personal test key evaluating an event
// first leaves the live history as it was (SPEC 2.2 customer_history
// "excludes test-key traffic"): the live evaluation of that event counts a
// visit, is not device_replayed, and its account stays linked when another
// account uses the device.
func TestTestKeyUseIsNotALiveReplay(t *testing.T) {
	s := Start(t, bin)
	a := s.CreateAccount(t, map[string]any{"email": "testkey-first@example.com", "plan": "growth"})
	tok := collectToken(t, s, a.PublishableKey, "73.0.0.9", nil)
	ev := collectDevice(t, s, a.PublishableKey, "73.0.0.9", "chrome_desktop_windows")
	if st, m := evalJSON(t, s, a.TestKey, map[string]any{"token": tok, "fingerprintEventId": ev, "accountId": "u1"}); st != 200 || m["device_status"] != "ok" {
		t.Fatalf("test key: %d %v", st, m)
	}
	st, m := evalJSON(t, s, a.LiveKey, map[string]any{"token": tok, "fingerprintEventId": ev, "accountId": "u1"})
	d, _ := m["device"].(map[string]any)
	ch, _ := d["customer_history"].(map[string]any)
	if e, _ := m["evidence"].(map[string]any); st != 200 || ch == nil || ch["visits"] != float64(1) || e["device_replayed"] != false {
		t.Fatalf("live after the test key: %d customer_history %v evidence %v", st, ch, m["evidence"])
	}
	ev2 := collectDevice(t, s, a.PublishableKey, "73.0.0.9", "chrome_desktop_windows")
	_, m = evalJSON(t, s, a.LiveKey, map[string]any{"token": tok, "fingerprintEventId": ev2, "accountId": "u2"})
	d, _ = m["device"].(map[string]any)
	if d["linked_accounts"] != float64(2) || d["multi_account"] != true {
		t.Fatalf("second account on the device: %v", d)
	}
	// The live key's second use of the first event is a replay.
	_, m = evalJSON(t, s, a.LiveKey, map[string]any{"token": tok, "fingerprintEventId": ev, "accountId": "u1"})
	if e, _ := m["evidence"].(map[string]any); e["device_replayed"] != true {
		t.Fatalf("second live use: %v", m["evidence"])
	}
}
