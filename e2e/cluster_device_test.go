package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/fraudd/fraudd/actors/events"
	"github.com/fraudd/fraudd/cluster/rpc"
)

// TestClusterDeviceEventAnyNode: a browser's device report collected on
// one node resolves in an evaluation on another (the event is stored at
// the account's owner in the collection budget's round trip, and its id
// names that node), which counts the use where the event lives, so a third
// node sees the next evaluation of it as a replay.
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
	// unavailable elsewhere, and the evaluation answers network-only. An
	// event is stored by the account's owner, whichever node collected it
	// (its id names the node).
	lost := collectDevice(t, c.Nodes[2], a.PublishableKey, "73.0.0.9", "chrome_desktop_windows")
	storer, other := storerOf(t, c, lost)
	storer.Kill()
	Within(t, 15*time.Second, "another node answers the dead storer's event unavailable", func() bool {
		st, m := evalJSON(t, other, a.LiveKey, map[string]any{"token": tok, "fingerprintEventId": lost})
		return st == 200 && m["device_status"] == "unavailable" && m["device"] == nil
	})
}

// storerOf is the node whose route the event id names, and another node.
func storerOf(t *testing.T, c *Cluster, id string) (storer, other *Server) {
	t.Helper()
	eid, ok := events.ParseEventID(id)
	if !ok {
		t.Fatalf("event id %q", id)
	}
	for i, n := range c.Nodes {
		if rpc.NodeRoute(fmt.Sprintf("node%d", i+1)) == events.NodeOf(&eid) {
			return n, c.Nodes[(i+1)%len(c.Nodes)]
		}
	}
	t.Fatalf("event id %q names no node", id)
	return nil, nil
}
