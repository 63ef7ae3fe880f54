package e2e

import (
	"fmt"
	"testing"
)

// TestClusterDeviceHistoryAtOwner: one customer's device history is one
// across the nodes. A desktop used by three of a shop's accounts, each
// evaluated on another node (and each event collected there): the
// evaluations go to the account's owner with their charge, which observes
// its history, so the third answer counts three accounts on the device, as
// on one node. Kept per node, each answer would count one. The admin
// device list on any node shows the owner's.
func TestClusterDeviceHistoryAtOwner(t *testing.T) {
	c := StartCluster(t, bin, ClusterOptions{})
	a := c.Nodes[0].CreateAccount(t, map[string]any{"email": "history@example.com", "plan": "growth"})
	usageEverywhere(t, c.Nodes, a.LiveKey)
	tok := collectToken(t, c.Nodes[0], a.PublishableKey, "73.0.1.9", nil)
	var m map[string]any
	for i, n := range c.Nodes {
		ev := collectDevice(t, n, a.PublishableKey, "73.0.1.9", "chrome_desktop_windows")
		var st int
		st, m = evalJSON(t, n, a.LiveKey, map[string]any{"token": tok, "fingerprintEventId": ev, "accountId": fmt.Sprintf("user-%d", i+1)})
		if st != 200 || m["device_status"] != "ok" {
			t.Fatalf("evaluate on node %d: %d %v", i+1, st, m)
		}
		acct, _ := m["account"].(map[string]any)
		d, _ := m["device"].(map[string]any)
		if acct == nil || d == nil || acct["accounts_24h_on_this_device"] != float64(i+1) || d["linked_accounts"] != float64(i+1) {
			t.Fatalf("node %d, account %d on the device: account %v, device %v", i+1, i+1, m["account"], m["device"])
		}
		if ch, _ := d["customer_history"].(map[string]any); ch == nil || ch["visits"] != float64(i+1) {
			t.Fatalf("node %d: customer_history %v", i+1, d["customer_history"])
		}
	}
	if !browserHasReason(m, "multi_account_device") {
		t.Fatalf("three accounts on one device over three nodes: %v", m["reasons"])
	}
	// The admin device list reads the owner's history through any node.
	for i, n := range c.Nodes {
		r := n.Admin(t, "GET", "/admin/v1/accounts/"+a.ID+"/devices", nil)
		var devs []map[string]any
		if err := jsonUnmarshal(r.Body, &devs); err != nil || r.Status != 200 || len(devs) != 1 || devs[0]["visits"] != float64(3) || devs[0]["linked_accounts"] != float64(3) {
			t.Fatalf("devices view on node %d: %d %s", i+1, r.Status, r.Body)
		}
	}
}
