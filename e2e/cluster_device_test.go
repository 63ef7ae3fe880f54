package e2e

import (
	"fmt"
	"testing"
	"time"
)

// TestClusterDeviceEventAnyNode: a browser's device report collected on
// one node resolves in an evaluation on another (the event id names the
// node that stored it, which the evaluating node asks: one round trip),
// which counts the use where the event lives, so a third node sees the
// next evaluation of it as a replay.
func TestClusterDeviceEventAnyNode(t *testing.T) {
	c := StartCluster(t, bin, ClusterOptions{})
	a := c.Nodes[0].CreateAccount(t, map[string]any{"email": "devices@example.com", "plan": "starter"})
	usageEverywhere(t, c.Nodes, a.LiveKey)
	tok := collectToken(t, c.Nodes[0], a.PublishableKey, "73.0.0.1", nil)
	emu := collectDevice(t, c.Nodes[0], a.PublishableKey, "73.0.0.1", "android_emulator")

	st, m := evalJSON(t, c.Nodes[1], a.LiveKey, map[string]any{"token": tok, "fingerprintEventId": emu})
	d, _ := m["device"].(map[string]any)
	if st != 200 || d == nil || d["emulator"] != true || m["decision"] != "block" || m["device_status"] != "ok" {
		t.Fatalf("node 2, an event node 1 stored: %d %v", st, m)
	}
	if e, _ := m["evidence"].(map[string]any); e["device_replayed"] == true {
		t.Fatalf("node 2: the first use is a replay: %v", m)
	}
	st, m = evalJSON(t, c.Nodes[2], a.LiveKey, map[string]any{"token": tok, "fingerprintEventId": emu})
	if e, _ := m["evidence"].(map[string]any); st != 200 || m["device_status"] != "ok" || e["device_replayed"] != true {
		t.Fatalf("node 3, the second use: %d %v", st, m)
	}
	// Every node, the storing one included, for events stored anywhere.
	for i := range c.Nodes {
		for j, s := range c.Nodes {
			ev := collectDevice(t, c.Nodes[i], a.PublishableKey, fmt.Sprintf("73.0.0.%d", 2+i), "chrome_desktop_windows")
			if _, m := evalJSON(t, s, a.LiveKey, map[string]any{"token": tok, "fingerprintEventId": ev}); m["device_status"] != "ok" || m["device"] == nil {
				t.Fatalf("collected on node %d, evaluated on node %d: %v", i+1, j+1, m)
			}
		}
	}
	// The storing node gone (SIGKILL, its lease run out): its events are
	// unavailable elsewhere, and the evaluation answers network-only.
	lost := collectDevice(t, c.Nodes[2], a.PublishableKey, "73.0.0.9", "chrome_desktop_windows")
	c.Nodes[2].Kill()
	Within(t, 15*time.Second, "node 1 answers node 3's event unavailable", func() bool {
		st, m := evalJSON(t, c.Nodes[0], a.LiveKey, map[string]any{"token": tok, "fingerprintEventId": lost})
		return st == 200 && m["device_status"] == "unavailable" && m["device"] == nil
	})
}
