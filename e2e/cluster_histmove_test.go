package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fraudd/fraudd/cluster"
)

// TestClusterHistoryMoves: a customer's device history moves with its
// shard. A device seen three times (once through each node) at the
// account's owner, node 3, which then leaves with SIGTERM: it hands the
// shard's history to the next owner before releasing the shard, so the
// next two visits count four and five. That owner is then killed with
// SIGKILL: the survivor serves the account with the history it has — none,
// so the next visit counts one (the history of a dead owner is away until
// it returns). Once the killed node is back and has its shard again, the
// survivor's records travel to it (with the survivor's release of the
// shard, or the mover's next round) and add to its own: the next visit
// counts seven, as on one node.
func TestClusterHistoryMoves(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster history test skipped in -short mode")
	}
	const ttl = time.Second
	c, v, a, _ := node3Account(t, ttl)
	tok := collectToken(t, c.Nodes[0], a.PublishableKey, "73.0.2.9", nil)
	visit := func(n *Server, want int, what string) {
		t.Helper()
		ev := collectDevice(t, n, a.PublishableKey, "73.0.2.9", "chrome_desktop_windows")
		st, m := evalJSON(t, n, a.LiveKey, map[string]any{"token": tok, "fingerprintEventId": ev, "accountId": "user-1"})
		d, _ := m["device"].(map[string]any)
		ch, _ := d["customer_history"].(map[string]any)
		if st != 200 || ch == nil || ch["visits"] != float64(want) {
			logHistory(t, c)
			t.Fatalf("%s: %d, customer_history %v (want %d visits); %v", what, st, d["customer_history"], want, m)
		}
	}
	for i, n := range c.Nodes {
		visit(n, i+1, fmt.Sprintf("visit %d through node %d", i+1, i+1))
	}

	shard := cluster.ShardOf(cluster.KindAccount, a.ID)
	if err := c.Nodes[2].Stop(); err != nil {
		t.Fatalf("node 3 did not leave cleanly: %v", err)
	}
	Within(t, 10*time.Second, "nodes 1 and 2 own every shard", func() bool { return v.settled([]string{"node1", "node2"}) })
	visit(c.Nodes[0], 4, "the visit after the owner left")
	visit(c.Nodes[1], 5, "the next, through the other node")

	owner := v.owners()[shard]
	oi, si := 0, 1 // the new owner and the survivor
	if owner == "node2" {
		oi, si = 1, 0
	}
	time.Sleep(300 * time.Millisecond) // the owner's history writes land (they sync every 10 ms)
	c.Nodes[oi].Kill()
	Within(t, 10*time.Second, "the survivor owns the killed node's shards", func() bool {
		return v.owners()[shard] == fmt.Sprint("node", si+1)
	})
	visit(c.Nodes[si], 1, "a visit while the owner is dead")
	c.Nodes[oi].Restart()
	Within(t, 20*time.Second, "the killed node has its shards back", func() bool { return v.settled([]string{"node1", "node2"}) })
	if o := v.owners()[shard]; o != owner {
		t.Fatalf("the shard is owned by %q after %s returned", o, owner)
	}
	// The survivor's record reaches the owner with the shard's handoff
	// or, when that delivery did not happen (1 run in about 30: its cause
	// is not known), with the mover's next round: within 10 s, as
	// docs/cluster.md says. Counted once either way.
	Within(t, 10*time.Second, "the owner holds the device's 5 + 1 visits", func() bool {
		r := c.Nodes[si].Admin(t, "GET", "/admin/v1/accounts/"+a.ID+"/devices", nil)
		var devs []map[string]any
		return jsonUnmarshal(r.Body, &devs) == nil && r.Status == 200 && len(devs) == 1 && devs[0]["visits"] == float64(6)
	})
	visit(c.Nodes[si], 7, "the visit after the owner returned (5 + 1 + this one)")
	r := c.Nodes[si].Admin(t, "GET", "/admin/v1/accounts/"+a.ID+"/devices", nil)
	var devs []map[string]any
	if err := jsonUnmarshal(r.Body, &devs); err != nil || r.Status != 200 || len(devs) != 1 || devs[0]["visits"] != float64(7) {
		t.Fatalf("devices view after the moves: %d %s", r.Status, r.Body)
	}
}

// logHistory logs the nodes' lines about device history, warnings and
// errors: what a failed count needs to be read.
func logHistory(t *testing.T, c *Cluster) {
	t.Helper()
	for i, n := range c.Nodes {
		for _, l := range strings.Split(n.Logs(), "\n") {
			if strings.Contains(l, "histor") || strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
				t.Logf("node%d: %s", i+1, l)
			}
		}
	}
}
