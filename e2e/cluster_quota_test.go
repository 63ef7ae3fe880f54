package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fraudd/fraudd/cluster"
)

// TestClusterCapsAcrossNodes: three fraudd processes on one etcd (the
// cluster harness, an embedded member in the test process); an account
// created on node 1 with an hourly cap of N; 3N evaluations spread over the
// three nodes at once admit exactly N, every other one is refused 429, none
// fails. Then the same with a monthly cap of N, and with a daily device-
// collection budget of 10 events.
func TestClusterCapsAcrossNodes(t *testing.T) {
	c := StartCluster(t, bin, ClusterOptions{})
	nodes, ids := c.Nodes, []string{"node1", "node2", "node3"}

	// Settled: every account shard owned as the rendezvous assignment over
	// the three says, so no shard moves (and no hourly window restarts)
	// while the test charges.
	cli := c.Etcd(t)
	root, err := cluster.Root(c.Name)
	if err != nil {
		t.Fatal(err)
	}
	want := cluster.Assign(cluster.KindAccount, ids)
	settled := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := cli.Get(ctx, root+"owners/account/", clientv3.WithPrefix())
		if err != nil || len(resp.Kvs) != len(want) {
			return false
		}
		for _, kv := range resp.Kvs {
			shard, err := strconv.Atoi(string(kv.Key[len(root+"owners/account/"):]))
			if err != nil || want[shard] != string(kv.Value) {
				return false
			}
		}
		return true
	}
	Within(t, 30*time.Second, "the three nodes settle on the shard assignment", settled)

	const n = 12
	a := nodes[0].CreateAccount(t, map[string]any{"email": "cap@example.com", "plan": "custom", "hourly_limit": n})
	for _, s := range nodes {
		s.SetClock(t, "2026-11-20T10:00:00Z")
	}
	// The account reaches every node through etcd; usage (which charges
	// nothing) answers once it has, and once the owner answers for it.
	usageEverywhere(t, nodes, a.LiveKey)

	if statuses, perNode := burstAcrossNodes(t, nodes, a.LiveKey, 3*n); statuses[200] != n || statuses[429] != 2*n {
		t.Fatalf("hourly cap %d over 3 nodes: statuses %v, per node %v", n, statuses, perNode)
	}
	if !settled() {
		t.Fatal("a shard moved during the test")
	}
	u := nodes[2].Do(t, Req{Method: "GET", Path: "/v1/usage", Bearer: a.LiveKey}).JSON(t)
	if num(t, u, "used_this_hour") != n || num(t, u, "remaining") != 0 {
		t.Fatalf("usage read on node 3: %v", u)
	}

	// A monthly cap of N, the same way: exactly N admitted across the
	// nodes, and month_used N wherever it is read.
	m := nodes[1].CreateAccount(t, map[string]any{"email": "monthly@example.com", "plan": "custom", "hourly_limit": 1000, "monthly_limit": n})
	usageEverywhere(t, nodes, m.LiveKey)
	if statuses, perNode := burstAcrossNodes(t, nodes, m.LiveKey, 3*n); statuses[200] != n || statuses[429] != 2*n {
		t.Fatalf("monthly cap %d over 3 nodes: statuses %v, per node %v", n, statuses, perNode)
	}
	if !settled() {
		t.Fatal("a shard moved during the test")
	}
	for i, s := range nodes {
		u := s.Do(t, Req{Method: "GET", Path: "/v1/usage", Bearer: m.LiveKey}).JSON(t)
		if num(t, u, "month_used") != n {
			t.Fatalf("monthly usage read on node %d: %v", i+1, u)
		}
	}

	// The daily device-collection budget (a custom plan of 30 checks a
	// month: 10 events a day), taken by browsers whose reports reach any
	// node: exactly 10 stored in all.
	d := nodes[2].CreateAccount(t, map[string]any{"email": "collect@example.com", "plan": "custom", "hourly_limit": 5, "monthly_limit": 30})
	usageEverywhere(t, nodes, d.LiveKey)
	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Go(func() {
			r := nodes[i%3].Do(t, Req{Method: "POST", Path: "/v1/collect/device", Body: fixtureSignals(t, "chrome_desktop_windows", d.PublishableKey),
				Header: map[string]string{"Content-Type": "text/plain", "Origin": "https://shop.example",
					"X-Forwarded-For": fmt.Sprintf("198.51.100.%d", 1+i)}})
			mu.Lock()
			statuses[r.Status]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if statuses[200] != 10 || statuses[429] != 20 {
		t.Fatalf("a collection budget of 10 events a day over 3 nodes: statuses %v", statuses)
	}
}

// usageEverywhere waits until every node answers key's usage (which charges
// nothing): the account reached it through etcd, and its owner answers.
func usageEverywhere(t *testing.T, nodes []*Server, key string) {
	t.Helper()
	for i, s := range nodes {
		Within(t, 20*time.Second, fmt.Sprintf("node %d serves the account's usage", i+1), func() bool {
			return s.Do(t, Req{Path: "/v1/usage", Bearer: key}).Status == http.StatusOK
		})
	}
}

// burstAcrossNodes sends count evaluations for key at once, spread over the
// nodes in turn, each from its own address; any answer but 200 or 429 fails
// the test. It returns the statuses, in all and per node.
func burstAcrossNodes(t *testing.T, nodes []*Server, key string, count int) (statuses map[int]int, perNode map[string]int) {
	t.Helper()
	var mu sync.Mutex
	statuses, perNode = map[int]int{}, map[string]int{}
	var wg sync.WaitGroup
	for i := range count {
		s := nodes[i%len(nodes)]
		wg.Go(func() {
			r := evaluate(s, t, key, map[string]any{}, map[string]string{"X-Forwarded-For": fmt.Sprintf("198.51.100.%d", 1+i%250)})
			mu.Lock()
			defer mu.Unlock()
			statuses[r.Status]++
			perNode[fmt.Sprintf("n%d-%d", i%len(nodes)+1, r.Status)]++
			if r.Status != 200 && r.Status != 429 {
				t.Errorf("evaluation %d at node %d: %d %s", i, i%len(nodes)+1, r.Status, r.Body)
			}
		})
	}
	wg.Wait()
	return statuses, perNode
}
