package e2e

import (
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestClusterLeasedHotAccount: an account with an hourly cap of N, sent
// 3N evaluations at once spread over three nodes (past
// --cluster-lease-after on each, so the two that do not own it charge
// slices of its allowance lent by the owner, with no round trip). No more
// than N are admitted; once the slices are reported the rest of the cap is
// admitted and nothing beyond: exactly N in all, and used_this_hour,
// month_used and the console's daily usage read N through every node.
func TestClusterLeasedHotAccount(t *testing.T) {
	c := StartCluster(t, bin, ClusterOptions{Args: []string{"--cluster-lease-after", "20"}})
	const n = 300
	a := c.Nodes[0].CreateAccount(t, map[string]any{"email": "hot@example.com", "plan": "custom", "hourly_limit": n, "monthly_limit": 100 * n})
	usageEverywhere(t, c.Nodes, a.LiveKey)

	var admitted, seq atomic.Int64
	send := func(s *Server) int {
		i := seq.Add(1)
		r := evaluate(s, t, a.LiveKey, map[string]any{}, map[string]string{"X-Forwarded-For": fmt.Sprintf("198.51.%d.%d", 100+i/250%20, 1+i%250)})
		if r.Status != 200 && r.Status != 429 {
			t.Errorf("evaluation %d: %d %s", i, r.Status, r.Body)
		}
		if r.Status == 200 {
			admitted.Add(1)
		}
		return r.Status
	}
	var wg sync.WaitGroup
	for _, s := range c.Nodes {
		for range 4 {
			wg.Go(func() {
				for range n / 4 {
					send(s)
				}
			})
		}
	}
	wg.Wait()
	burst := admitted.Load()
	if burst > n {
		t.Fatalf("hourly cap %d: %d admitted in the burst", n, burst)
	}
	var leased float64
	for _, s := range c.Nodes {
		leased += scrapeMetrics(t, s.URL+"/metrics", AdminToken).value("fraudd_cluster_leased_charges_total")
	}
	if leased <= 0 {
		t.Fatalf("no evaluation was charged from a slice (fraudd_cluster_leased_charges_total %v)", leased)
	}
	// The slices are reported within their time: the rest of the cap is
	// admitted, through any node.
	Within(t, 15*time.Second, fmt.Sprintf("the cap of %d is reached", n), func() bool {
		for _, s := range c.Nodes {
			if admitted.Load() < n {
				send(s)
			}
		}
		return admitted.Load() >= n
	})
	for range 3 {
		for _, s := range c.Nodes {
			if st := send(s); st != 429 {
				t.Fatalf("an evaluation past the cap answered %d", st)
			}
		}
	}
	if got := admitted.Load(); got != n {
		t.Fatalf("hourly cap %d: %d admitted", n, got)
	}
	t.Logf("%d admitted in the burst of %d, %d after; %v charged from slices", burst, 3*n, n-burst, leased)
	for i, s := range c.Nodes {
		Within(t, 5*time.Second, fmt.Sprintf("node %d reads the whole count", i+1), func() bool {
			return hourUsed(t, s, a.LiveKey) == n && monthUsed(t, s, a.LiveKey) == n
		})
	}
	// The console's daily usage sums what every member stored for the day:
	// the owner's charges and the slice holders'.
	for i, s := range c.Nodes {
		r := s.Admin(t, "GET", "/admin/v1/accounts/"+a.ID+"/usage", nil)
		if r.Status != 200 {
			t.Fatalf("node %d: account usage %d %s", i+1, r.Status, r.Body)
		}
		var u struct {
			Daily []struct {
				Used int64 `json:"used"`
			} `json:"daily"`
		}
		if err := json.Unmarshal(r.Body, &u); err != nil || len(u.Daily) == 0 {
			t.Fatalf("node %d: account usage %s: %v", i+1, r.Body, err)
		}
		if today := u.Daily[len(u.Daily)-1].Used; today != n {
			t.Fatalf("node %d: the console's daily usage shows %d today; %d were counted", i+1, today, n)
		}
	}
}
