package rpc

import (
	"sync"
	"testing"

	"github.com/fraudd/fraudd/actors/quota"
)

// TestCollectBudgetAcrossNodes: an account's daily collection budget of N
// events, taken 3N times at once across three nodes, admits exactly N:
// the budget is counted at the owner, one round trip from the others.
func TestCollectBudgetAcrossNodes(t *testing.T) {
	ids := []string{"a", "b", "c"}
	nodes := settledNodes(t, nil, ids...)
	const n = 30
	m := quota.Collect{Account: accountOwnedBy("b", ids), Budget: quota.CollectBudget{Events: n, Bytes: 1 << 20}, Bytes: 900, Now: testNow}
	var mu sync.Mutex
	allowed := 0
	var wg sync.WaitGroup
	for _, nd := range nodes {
		for range n {
			wg.Go(func() {
				r, err := nd.q.Collect(m)
				if err != nil || (!r.Allowed && r.RetryAfter < 1) {
					t.Errorf("collect at %s: %+v %v", nd.id, r, err)
					return
				}
				if r.Allowed {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	if allowed != n {
		t.Fatalf("a budget of %d events over three nodes admitted %d", n, allowed)
	}
	if got := []int64{nodes[0].q.RemoteCalls(), nodes[1].q.RemoteCalls(), nodes[2].q.RemoteCalls()}; got[0] != n || got[1] != 0 || got[2] != n {
		t.Fatalf("round trips (a, owner b, c) = %v; want [%d 0 %d]", got, n, n)
	}
}
