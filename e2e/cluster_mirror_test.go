package e2e

import (
	"fmt"
	"testing"
	"time"
)

// TestClusterLeasedMirror: a hot account's two lease holders answer its
// evaluations with events stored at the owner from their mirrors of the
// owner's device history, with no round trip, and each holder's answers
// count what the other holder observed: a device seen with a second
// end-user account on one holder shows two linked accounts on the other
// within a moment. The owner's history, read through any node, holds each
// observation once.
func TestClusterLeasedMirror(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster mirror test skipped in -short mode")
	}
	c := StartCluster(t, bin, ClusterOptions{Args: []string{"--cluster-lease-after", "2"}})
	a := c.Nodes[0].CreateAccount(t, map[string]any{"email": "mirror@example.com", "plan": "custom", "hourly_limit": 1000000, "monthly_limit": 10000000})
	usageEverywhere(t, c.Nodes, a.LiveKey)
	tok := collectToken(t, c.Nodes[0], a.PublishableKey, "73.0.3.9", nil)
	ev1 := collectDevice(t, c.Nodes[0], a.PublishableKey, "73.0.3.9", "chrome_desktop_windows")
	ev2 := collectDevice(t, c.Nodes[0], a.PublishableKey, "73.0.3.9", "brave_macos")
	var visitor1, visitor2 string
	eval := func(s *Server, ev, user string) map[string]any {
		t.Helper()
		st, m := evalJSON(t, s, a.LiveKey, map[string]any{"token": tok, "fingerprintEventId": ev, "accountId": user})
		if st != 200 {
			t.Fatalf("evaluation on %s: %d %v", s.URL, st, m)
		}
		d, _ := m["device"].(map[string]any)
		if d == nil {
			t.Fatalf("evaluation on %s without a device block: %v", s.URL, m)
		}
		return d
	}
	mirrored := func(s *Server) float64 {
		return scrapeMetrics(t, s.URL+"/metrics", AdminToken).value("fraudd_cluster_mirrored_evaluations_total")
	}
	// Warm-up: every node evaluates (ev1, alice) and (ev2, bob) until two
	// of them (the owner's lease holders) answer from their mirrors.
	var holders []*Server
	Within(t, 30*time.Second, "two nodes answer from mirrors", func() bool {
		holders = holders[:0]
		for _, s := range c.Nodes {
			visitor1, _ = eval(s, ev1, "alice")["visitor_id"].(string)
			visitor2, _ = eval(s, ev2, "bob")["visitor_id"].(string)
			if mirrored(s) > 0 {
				holders = append(holders, s)
			}
		}
		return len(holders) == 2
	})
	// bob on the first device, on one holder: his account and the device
	// are in its mirror, so it answers from there, and counts both.
	if d := eval(holders[0], ev1, "bob"); d["linked_accounts"] != float64(2) {
		t.Fatalf("the first device with a second account on one holder: %v", d)
	}
	// The other holder's answers count it once the owner's change reached
	// its mirror; they come from the mirror, with no round trip.
	before := mirrored(holders[1])
	Within(t, 5*time.Second, "the other holder counts the first holder's observation", func() bool {
		d := eval(holders[1], ev1, "alice")
		switch d["linked_accounts"] {
		case float64(2):
			return true
		case float64(1):
			return false
		}
		t.Fatalf("linked accounts on the other holder: %v", d)
		return false
	})
	if after := mirrored(holders[1]); after <= before {
		t.Fatalf("the other holder's answers did not come from its mirror (%v → %v)", before, after)
	}
	// A new end-user account on a holder: the owner's existence filter
	// tells the holder the owner has no record of it, so that evaluation
	// comes from the mirror too.
	n := 0
	Within(t, 15*time.Second, "a new end-user account's evaluation on a holder comes from its mirror", func() bool {
		n++
		before := mirrored(holders[0])
		if d := eval(holders[0], ev2, fmt.Sprintf("new-%d", n)); d["linked_accounts"] != float64(n+1) {
			t.Fatalf("a new account on the second device: %v", d)
		}
		return mirrored(holders[0]) > before
	})
	// A fresh event, collected after the mirrors began: the owner pushes
	// it to the holders, so its first evaluation on a holder comes from
	// the holder's mirror, as the first use; the other holder then sees it
	// used.
	replayed := func(m map[string]any) any {
		ev, _ := m["evidence"].(map[string]any)
		return ev["device_replayed"]
	}
	var fresh string
	Within(t, 15*time.Second, "a fresh event's first evaluation on a holder comes from its mirror", func() bool {
		fresh = collectDevice(t, c.Nodes[0], a.PublishableKey, "73.0.3.9", "safari_private")
		time.Sleep(20 * time.Millisecond) // the owner's push
		before := mirrored(holders[0])
		st, m := evalJSON(t, holders[0], a.LiveKey, map[string]any{"token": tok, "fingerprintEventId": fresh, "accountId": "alice"})
		if st != 200 || replayed(m) != false {
			t.Fatalf("a fresh event's first evaluation: %d %v", st, m)
		}
		return mirrored(holders[0]) > before
	})
	time.Sleep(200 * time.Millisecond)
	if st, m := evalJSON(t, holders[1], a.LiveKey, map[string]any{"token": tok, "fingerprintEventId": fresh, "accountId": "bob"}); st != 200 || replayed(m) != true {
		t.Fatalf("the fresh event on the other holder after the first used it: %d %v", st, m)
	}
	// One history, at the owner: each device once with its visit (an event
	// resubmitted counts once) and its accounts.
	for i, s := range c.Nodes {
		r := s.Admin(t, "GET", "/admin/v1/accounts/"+a.ID+"/devices", nil)
		var devs []map[string]any
		if err := jsonUnmarshal(r.Body, &devs); err != nil || r.Status != 200 || len(devs) != 3 {
			t.Fatalf("devices view on node %d: %d %s", i+1, r.Status, r.Body)
		}
		linked := map[string]string{}
		for _, d := range devs {
			id, _ := d["visitor_id"].(string)
			linked[id] = fmt.Sprint(d["visits"], " ", d["linked_accounts"])
		}
		if linked[visitor1] != "1 2" || linked[visitor2] != fmt.Sprint("1 ", n+1) {
			t.Fatalf("devices view on node %d (visits, linked accounts): %v", i+1, linked)
		}
	}
}
