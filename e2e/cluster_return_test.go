package e2e

import (
	"fmt"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fraudd/fraudd/cluster"
)

// TestClusterKilledOwnerReturns: the owner of an account's shard is killed
// with SIGKILL under load on all three nodes and started again on its data
// dir. Once it has its shards back, the account's monthly count, read
// through any node, is the sum of every member's share again: the returning
// node's own (what it charged before the kill, less at most what it
// acknowledged in the last sync interval, the default durability's bound)
// and the others' (what they charged while it was away, all of it flushed
// before they handed the shard back). So it equals the evaluations
// acknowledged with 200 over the whole run within that bound, and is never
// above them plus the calls in flight at the kill.
func TestClusterKilledOwnerReturns(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster crash test skipped in -short mode")
	}
	const ttl = time.Second
	c, v, a, base := node3Account(t, ttl)
	var down atomic.Bool // node 3 is not running
	l := startAckLoad(c, a.LiveKey, func(i int) bool { return i == 2 && down.Load() })
	time.Sleep(700 * time.Millisecond)
	down.Store(true)
	kill := time.Since(l.start)
	c.Nodes[2].Kill()
	time.Sleep(ttl + 1500*time.Millisecond) // the survivors take node 3's shards
	c.Nodes[2].Restart()
	down.Store(false)
	Within(t, 20*time.Second, "node 3 has its shards back", func() bool { return v.settled([]string{"node1", "node2", "node3"}) })
	time.Sleep(700 * time.Millisecond) // load with node 3 back as the owner
	acks := l.end()

	if o := v.owners()[cluster.ShardOf(cluster.KindAccount, a.ID)]; o != "node3" {
		t.Fatalf("the account's shard is owned by %q after node 3 returned", o)
	}
	ack, fly := int64(len(acks)), l.inflight.Load()
	// Node 3 owned the shard until the kill, so it charged every call
	// acknowledged then, on any node; the default durability may lose what
	// it acknowledged in the last interval (crashSlack as in the
	// single-node crash test). An answer relayed by node 1 or 2 may arrive
	// a little after the kill.
	const interval, relay = 10 * time.Millisecond, 100 * time.Millisecond
	ackedIn := func(from, to time.Duration) int64 { return ackedSince(acks, from) - ackedSince(acks, to) }
	bound := ackedIn(kill-interval-crashSlack, kill+relay)
	for i, s := range c.Nodes {
		used := monthUsed(t, s, a.LiveKey) - base
		if i == 0 {
			t.Logf("month_used grew by %d; %d acknowledged (%d in the last %v before the kill), %d unanswered (in flight at the kill), %d refused; %v",
				used, ack, ackedIn(kill-interval, kill+relay), interval, fly, l.refused.Load(), l.statuses)
		}
		if used < ack-bound || used > ack+fly {
			t.Fatalf("node %d: month_used grew by %d over the run; want between %d (the %d acknowledged less %d around the kill: the last %v + %v before it, %v after) and %d (+ %d unanswered)",
				i+1, used, ack-bound, ack, bound, interval, crashSlack, relay, ack+fly, fly)
		}
	}
	if ack < 100 {
		t.Fatalf("only %d evaluations acknowledged: no steady load", ack)
	}
}

// node3Account starts three nodes with ttl leases, waits until they settle
// on the shard assignment, and creates an account whose shard node 3 owns,
// with a cap nothing reaches; every node has evaluated it once (counted),
// and base is month_used after those.
func node3Account(t *testing.T, ttl time.Duration) (c *Cluster, v *ownerView, a Account, base int64) {
	t.Helper()
	c = StartCluster(t, bin, ClusterOptions{LeaseTTL: ttl})
	v = newOwnerView(t, c)
	Within(t, 30*time.Second, "the three nodes settle on the shard assignment", func() bool { return v.settled([]string{"node1", "node2", "node3"}) })
	a = accountOwnedBy(t, v, c.Nodes[0], "node3", map[string]any{"plan": "custom", "hourly_limit": 1000000})
	for i, s := range c.Nodes {
		Within(t, 10*time.Second, fmt.Sprintf("node %d evaluates the account", i+1), func() bool {
			st, err := countedEval(s, a.LiveKey)
			return err == nil && st == http.StatusOK
		})
	}
	return c, v, a, monthUsed(t, c.Nodes[0], a.LiveKey)
}

// ackLoad sends counted evaluations for one account to every node, one
// client each, about 200 a second per node, and notes when each 200 came.
type ackLoad struct {
	start             time.Time
	inflight, refused atomic.Int64
	stop              chan struct{}
	wg                sync.WaitGroup

	mu       sync.Mutex
	acks     []time.Duration // since start
	statuses map[string]int  // "node<i>:<status>" → count (0: no answer)

	// busy counts, per node, the clients between deciding to send to it
	// and its answer (drain).
	busy [8]atomic.Int32
}

// drain waits until no request to node i is under way, once skip says
// true for it: what a load balancer does before a node is restarted. A
// client marks itself busy before it asks skip, so once skip is true and
// busy is zero no request to the node can start.
func (l *ackLoad) drain(i int) {
	for l.busy[i].Load() != 0 {
		time.Sleep(time.Millisecond)
	}
}

// startAckLoad starts the clients; a node for which skip says true gets
// nothing meanwhile (it is down).
func startAckLoad(c *Cluster, key string, skip func(i int) bool) *ackLoad {
	l := &ackLoad{start: time.Now(), stop: make(chan struct{}), statuses: map[string]int{}}
	for i, s := range c.Nodes {
		l.wg.Go(func() {
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				l.busy[i].Add(1)
				if skip(i) {
					l.busy[i].Add(-1)
					time.Sleep(5 * time.Millisecond)
					continue
				}
				st, err := countedEval(s, key)
				l.busy[i].Add(-1)
				l.mu.Lock()
				switch {
				case err != nil:
					// No answer: it may have been charged before the
					// connection broke.
					l.inflight.Add(1)
				case st == http.StatusOK:
					l.acks = append(l.acks, time.Since(l.start))
				default:
					l.refused.Add(1) // 503 while the shard has no owner: nothing charged
				}
				l.statuses[fmt.Sprintf("node%d:%d", i+1, st)]++
				l.mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	return l
}

// end stops the clients and returns the acknowledgement times, in order.
func (l *ackLoad) end() []time.Duration {
	close(l.stop)
	l.wg.Wait()
	sort.Slice(l.acks, func(i, j int) bool { return l.acks[i] < l.acks[j] })
	return l.acks
}

// countedEval makes one evaluation that counts toward month_used (no token:
// network-only) from a fresh address, as evalTry does; 0 and the error when
// the exchange failed.
func countedEval(s *Server, key string) (int, error) {
	n := evalSeq.Add(1)
	from := fmt.Sprintf("%s.%d", [...]string{"198.51.100", "203.0.113"}[n/250%2], 1+n%250)
	r, err := s.try(Req{Method: "POST", Path: "/v1/evaluate", Bearer: key, Body: map[string]any{},
		Header: map[string]string{"X-Forwarded-For": from}})
	if err != nil {
		return 0, err
	}
	return r.Status, nil
}

// monthUsed reads month_used through s, which asks the account's owner. A
// read may meet a shard between owners (503); it is retried for 5 s.
func monthUsed(t *testing.T, s *Server, key string) int64 {
	t.Helper()
	var r *Response
	Within(t, 5*time.Second, "usage answers 200", func() bool {
		r = s.Do(t, Req{Path: "/v1/usage", Bearer: key})
		return r.Status == http.StatusOK
	})
	return num(t, r.JSON(t), "month_used")
}
