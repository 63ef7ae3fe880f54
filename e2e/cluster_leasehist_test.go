package e2e

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestClusterLeasedDeviceHistory: a hot account evaluates one device over
// and over on all three nodes at once, each evaluation with an event
// collected on the node it runs on, past --cluster-lease-after: the two
// nodes that do not own the account charge from slices of its allowance.
// The events live at the owner (collections store them there). A holder
// begins its mirror of the owner's history when it asks for its first
// slice; the owner pushes each event it stores to the holders, whose
// evaluations are answered from their mirrors and whose observations are
// recorded at the owner. A leased evaluation whose event or records the
// mirror lacks yet goes to the owner (EvaluateLeased), which observes it
// there. So when the load ends, the device's visits in the owner's
// history, read through any node, are exactly the evaluations answered —
// kept on each lease holder, or lost or doubled on their way, the leased
// ones would not add up.
func TestClusterLeasedDeviceHistory(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster lease test skipped in -short mode")
	}
	c := StartCluster(t, bin, ClusterOptions{Args: []string{"--cluster-lease-after", "2"}})
	a := c.Nodes[0].CreateAccount(t, map[string]any{"email": "hot-history@example.com", "plan": "custom", "hourly_limit": 1000000, "monthly_limit": 10000000})
	usageEverywhere(t, c.Nodes, a.LiveKey)
	tok := collectToken(t, c.Nodes[0], a.PublishableKey, "73.0.3.9", nil)
	var answered atomic.Int64
	stop := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	for i, s := range c.Nodes {
		wg.Go(func() {
			for time.Now().Before(stop) {
				ev := collectDevice(t, s, a.PublishableKey, "73.0.3.9", "chrome_desktop_windows")
				st, m := evalJSON(t, s, a.LiveKey, map[string]any{"token": tok, "fingerprintEventId": ev})
				if d, _ := m["device"].(map[string]any); st != 200 || d["customer_history"] == nil {
					t.Errorf("evaluation on node %d: %d %v", i+1, st, m)
					return
				}
				answered.Add(1)
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	var rests, mirrored, leased, pipeCalls, pipeFrames float64
	for _, s := range c.Nodes {
		m := scrapeMetrics(t, s.URL+"/metrics", AdminToken)
		rests += m.value("fraudd_cluster_leased_rests_total")
		mirrored += m.value("fraudd_cluster_mirrored_evaluations_total")
		leased += m.value("fraudd_cluster_leased_charges_total")
		pipeCalls += m.value("fraudd_cluster_pipe_calls_total")
		pipeFrames += m.value("fraudd_cluster_pipe_frames_total")
	}
	if mirrored == 0 {
		t.Fatalf("no leased evaluation was answered from a mirror (%v leased charges, %v at the owner): the test proves nothing", leased, rests)
	}
	// The rests, if any (since the 28th of November a holder's mirror
	// begins with its first lease call, so there are usually none), and
	// the charges before the first slice rode the members' pipes.
	if pipeCalls < rests || pipeFrames < 1 || pipeFrames > pipeCalls {
		t.Fatalf("pipes carried %v calls in %v frames for %v leased rests", pipeCalls, pipeFrames, rests)
	}
	n := answered.Load()
	t.Logf("%d evaluations answered, %v charged from slices, %v of them completed at the owner, %v from mirrors", n, leased, rests, mirrored)
	for i, s := range c.Nodes {
		r := s.Admin(t, "GET", "/admin/v1/accounts/"+a.ID+"/devices", nil)
		var devs []map[string]any
		if err := jsonUnmarshal(r.Body, &devs); err != nil || r.Status != 200 || len(devs) != 1 || devs[0]["visits"] != float64(n) {
			t.Fatalf("devices view on node %d after %d evaluations: %d %s", i+1, n, r.Status, r.Body)
		}
	}
}
