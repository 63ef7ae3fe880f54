package e2e

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fraudd/fraudd/cluster"
)

// TestClusterPauseFencing: the owner of an account's shard is stopped with
// SIGSTOP for twice its lease TTL under load on all three nodes, then
// continued. Meanwhile another node takes the shard and serves the account.
// On resuming, the paused node finds its lease gone and refuses the claims
// it held (the local fence: its log says so) instead of charging from them,
// so no call is counted twice: the monthly count afterwards equals the
// calls acknowledged with 200 (nothing is lost, as no process died). It
// rejoins with a new lease and takes its shards back.
func TestClusterPauseFencing(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster pause test skipped in -short mode")
	}
	const ttl = time.Second
	c := StartCluster(t, bin, ClusterOptions{LeaseTTL: ttl})
	v := newOwnerView(t, c)
	ids := []string{"node1", "node2", "node3"}
	Within(t, 30*time.Second, "the three nodes settle on the shard assignment", func() bool { return v.settled(ids) })
	a := accountOwnedBy(t, v, c.Nodes[0], "node3", map[string]any{"plan": "custom", "hourly_limit": 1000000})
	shard := cluster.ShardOf(cluster.KindAccount, a.ID)
	for i, s := range c.Nodes {
		Within(t, 10*time.Second, fmt.Sprintf("node %d evaluates the account", i+1), func() bool {
			st, err := countedEval(s, a.LiveKey)
			return err == nil && st == http.StatusOK
		})
	}
	base := monthUsed(t, c.Nodes[0], a.LiveKey)

	var (
		inflight, refused atomic.Int64
		acks              []time.Duration
		stop              = make(chan struct{})
		wg                sync.WaitGroup
		mu                sync.Mutex
		statuses          = map[string]int{}
	)
	start := time.Now()
	for i, s := range c.Nodes {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				st, err := countedEval(s, a.LiveKey) // blocks on node 3 while it is stopped
				mu.Lock()
				switch {
				case err != nil:
					inflight.Add(1)
				case st == http.StatusOK:
					acks = append(acks, time.Since(start))
				default:
					refused.Add(1) // 503 while the shard moves: nothing charged
				}
				statuses[fmt.Sprintf("node%d:%d", i+1, st)]++
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	time.Sleep(500 * time.Millisecond)
	c.Nodes[2].Signal(t, syscall.SIGSTOP)
	paused := time.Now()
	// The others take the shard once node 3's lease has run out.
	var taker string
	Within(t, ttl+3*time.Second, "another node owns the paused node's shard", func() bool {
		taker = v.owners()[shard]
		return taker != "" && taker != "node3"
	})
	taken := time.Since(paused)
	time.Sleep(2*ttl - time.Since(paused))
	c.Nodes[2].Signal(t, syscall.SIGCONT)
	resumed := time.Now()
	Within(t, 20*time.Second, "node 3 rejoins and has its shards back", func() bool { return v.settled(ids) })
	rejoined := time.Since(resumed)
	time.Sleep(500 * time.Millisecond) // load with node 3 the owner again
	close(stop)
	wg.Wait()

	if !strings.Contains(c.Nodes[2].Logs(), "cluster shard lost with the membership lease") {
		t.Fatalf("node 3 did not report refusing the claims its expired lease held; its log:\n%s", tail(c.Nodes[2].Logs()))
	}
	ack, fly := int64(len(acks)), inflight.Load()
	sort.Slice(acks, func(i, j int) bool { return acks[i] < acks[j] })
	for i, s := range c.Nodes {
		used := monthUsed(t, s, a.LiveKey) - base
		if i == 0 {
			t.Logf("paused node3 for %v: %s owned its shard %v after the stop; node 3 owned its shards again %v after SIGCONT; month_used grew by %d, %d acknowledged, %d unanswered, %d refused; %v",
				2*ttl, taker, taken.Round(time.Millisecond), rejoined.Round(time.Millisecond), used, ack, fly, refused.Load(), statuses)
		}
		if used < ack || used > ack+fly {
			t.Fatalf("node %d: month_used grew by %d; want the %d acknowledged (+ at most %d unanswered): a call counted twice or lost across the pause", i+1, used, ack, fly)
		}
	}
}
