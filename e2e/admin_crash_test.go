package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestAdminWritesSurviveKill: every operator write answered 2xx survives a
// SIGKILL sent the moment the answer arrives (an acknowledged admin change
// is rare, so it is synced before its answer): account creation, a patch of
// plan, suspension, allowlist, origins and beta, rules, pins, the webhook
// URL, both key rotations, the revocation of the previous live key, the
// webhook secret's rotation, and the test event, whose 202 says it is
// stored as pending (README Webhooks). The test event was written behind
// the 202, so a kill right after it lost the event: never sent, never
// listed.
func TestAdminWritesSurviveKill(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	s := Start(t, bin, "--allow-private-webhooks")
	rcv := newHookReceiver(t)
	crash := func() { s.Kill(); s.start() }
	a := s.CreateAccount(t, map[string]any{"email": "admin-crash@example.com", "plan": "growth"})
	crash()
	base := "/admin/v1/accounts/" + a.ID
	if r := s.Do(t, Req{Path: "/v1/usage", Bearer: a.LiveKey}); r.Status != 200 {
		t.Fatalf("created account's live key after SIGKILL: %d %s", r.Status, r.Body)
	}
	get := func(path string) string { return string(s.Admin(t, "GET", base+path, nil).Body) }
	steps := []struct {
		name, method, path string
		body               any
		read               string // the GET that shows it
		want               []string
	}{
		{"patch", "PATCH", "", map[string]any{"plan": "scale", "suspended": true, "allowlist": []string{"127.0.0.0/8"},
			"origins": []string{"https://shop.example"}, "device_evidence_beta": true},
			"", []string{`"plan":"scale"`, `"suspended":true`, `127.0.0.0/8`, `https://shop.example`, `"device_evidence_beta":true`}},
		{"unsuspend", "PATCH", "", map[string]any{"suspended": false}, "", []string{`"suspended":false`}},
		{"rules", "PUT", "/rules", []map[string]any{{"signal": "vpn", "action": "block"}}, "/rules", []string{`"vpn"`}},
		{"pins", "PUT", "/exceptions", []map[string]any{{"ip": "203.0.113.7", "action": "allow", "label": "office"}}, "/exceptions", []string{"203.0.113.7"}},
		{"webhook", "PUT", "/webhook", map[string]any{"url": rcv.URL + "/fail"}, "", []string{rcv.URL + "/fail"}},
	}
	for _, st := range steps {
		if r := s.Admin(t, st.method, base+st.path, st.body); r.Status/100 != 2 {
			t.Fatalf("%s: %d %s", st.name, r.Status, r.Body)
		}
		crash()
		got := get(st.read)
		for _, w := range st.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s lost to SIGKILL: %s not in %s", st.name, w, got)
			}
		}
	}
	live := s.Admin(t, "POST", base+"/keys/live/rotate", nil).JSON(t)["live_key"].(string)
	crash()
	if r := s.Do(t, Req{Path: "/v1/usage", Bearer: live}); r.Status != 200 {
		t.Errorf("rotated live key lost to SIGKILL: %d %s", r.Status, r.Body)
	}
	if r := s.Admin(t, "POST", base+"/keys/live/revoke-previous", nil); r.Status != 204 {
		t.Fatalf("revoke-previous: %d %s", r.Status, r.Body)
	}
	crash()
	if r := s.Do(t, Req{Path: "/v1/usage", Bearer: a.LiveKey}); r.Status != 401 {
		t.Errorf("revocation lost to SIGKILL: the previous key answers %d", r.Status)
	}
	test := s.Admin(t, "POST", base+"/keys/test/rotate", nil).JSON(t)["test_key"].(string)
	crash()
	if r := s.Do(t, Req{Path: "/v1/usage", Bearer: test}); r.Status != 200 {
		t.Errorf("rotated test key lost to SIGKILL: %d %s", r.Status, r.Body)
	}
	secret := s.Admin(t, "POST", base+"/webhook/secret/rotate", nil).JSON(t)["webhook_secret"].(string)
	crash()
	r := s.Admin(t, "POST", base+"/webhook/test", nil)
	if r.Status != 202 {
		t.Fatalf("webhook test: %d %s", r.Status, r.Body)
	}
	crash()
	// Attempt 1 went out before the kill or is made after the restart;
	// either way attempt 2 comes a minute after it, signed with the
	// rotated secret, and the attempts are listed.
	time.Sleep(1500 * time.Millisecond) // a tick or more
	s.Advance(t, "61s")
	hits := rcv.waitHits(t, 2)
	if hits[0].EventID != hits[1].EventID || !verifySignature(hits[1], secret) {
		t.Fatalf("test event after SIGKILL: events %s and %s; signed with the rotated secret: %v", hits[0].EventID, hits[1].EventID, verifySignature(hits[1], secret))
	}
	waitDelivery(t, s, a.ID, hits[0].EventID, 1)
}
