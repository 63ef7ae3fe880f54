package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fraudd/fraudd/cluster"
)

// ownerView reads a cluster's account shard owners from etcd.
type ownerView struct {
	cli  *clientv3.Client
	root string
}

func newOwnerView(t *testing.T, c *Cluster) *ownerView {
	t.Helper()
	cli := c.Etcd(t)
	root, err := cluster.Root(c.Name)
	if err != nil {
		t.Fatal(err)
	}
	return &ownerView{cli: cli, root: root}
}

// owners returns shard → owning node id (nil when etcd does not answer).
func (v *ownerView) owners() map[int]string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	p := v.root + "owners/account/"
	resp, err := v.cli.Get(ctx, p, clientv3.WithPrefix())
	if err != nil {
		return nil
	}
	out := make(map[int]string, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if s, err := strconv.Atoi(string(kv.Key[len(p):])); err == nil {
			out[s] = string(kv.Value)
		}
	}
	return out
}

// settled reports whether every account shard is owned as the rendezvous
// assignment over ids says.
func (v *ownerView) settled(ids []string) bool {
	want, got := cluster.Assign(cluster.KindAccount, ids), v.owners()
	if len(got) != len(want) {
		return false
	}
	for s, id := range want {
		if got[s] != id {
			return false
		}
	}
	return true
}

// accountOwnedBy creates accounts on s (body each time, the email varied)
// until one's shard is owned by node id.
func accountOwnedBy(t *testing.T, v *ownerView, s *Server, id string, body map[string]any) Account {
	t.Helper()
	for i := range 40 {
		b := map[string]any{"email": fmt.Sprintf("owned-%d@example.com", i)}
		for k, x := range body {
			b[k] = x
		}
		a := s.CreateAccount(t, b)
		if v.owners()[cluster.ShardOf(cluster.KindAccount, a.ID)] == id {
			return a
		}
	}
	t.Fatalf("no account of 40 has its shard owned by %s", id)
	return Account{}
}

// evalTry evaluates once with key on s from a fresh address (as evalStatus)
// and returns the status, or 0 and the error when the exchange failed; safe
// to call from any goroutine.
func evalTry(s *Server, key string) (int, string, error) {
	n := evalSeq.Add(1)
	from := fmt.Sprintf("%s.%d", [...]string{"198.51.100", "203.0.113"}[n/250%2], 1+n%250)
	req, err := http.NewRequest("POST", s.URL+"/v1/evaluate", strings.NewReader(`{"token":"test_clean"}`))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("User-Agent", UserAgent)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("X-Forwarded-For", from)
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

type evalResult struct {
	node       int
	start, end time.Time
	status     int
	body       string
}

// TestClusterKillNodeFailover: three nodes with 1 s leases; an account whose
// shard node 3 owns is evaluated without pause on nodes 1 and 2 while node 3
// is killed with SIGKILL. Evaluations on nodes 1 and 2 answer 200 again, and
// stay so, within the lease TTL + 1 s (+ 1 s margin) of the kill.
func TestClusterKillNodeFailover(t *testing.T) {
	const ttl = time.Second
	c := StartCluster(t, bin, ClusterOptions{LeaseTTL: ttl})
	v := newOwnerView(t, c)
	ids := []string{"node1", "node2", "node3"}
	Within(t, 30*time.Second, "the three nodes settle on the shard assignment", func() bool { return v.settled(ids) })

	a := accountOwnedBy(t, v, c.Nodes[0], "node3", map[string]any{"plan": "custom", "hourly_limit": 1000000})
	for i, s := range c.Nodes[:2] {
		Within(t, 10*time.Second, fmt.Sprintf("node %d evaluates the account", i+1), func() bool { return evalStatus(t, s, a.LiveKey) == http.StatusOK })
	}

	var (
		mu      sync.Mutex
		results []evalResult
		stop    = make(chan struct{})
		wg      sync.WaitGroup
	)
	for i, s := range c.Nodes[:2] {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				st, body, err := evalTry(s, a.LiveKey)
				if err != nil {
					body = err.Error()
				}
				mu.Lock()
				results = append(results, evalResult{node: i + 1, start: start, end: time.Now(), status: st, body: body})
				mu.Unlock()
				// Steady, not flat out: ~200 a second per node resolves the
				// window to a few ms without taking the shared cores.
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	time.Sleep(500 * time.Millisecond) // steady load before the kill
	killed := time.Now()
	c.Nodes[2].Kill()
	// Load goes on well past the bound, so "stays successful" is seen.
	time.Sleep(ttl + 4*time.Second)
	close(stop)
	wg.Wait()

	var before, after, failed int
	var lastFail *evalResult
	statuses := map[int]int{}
	for i := range results {
		r := &results[i]
		if r.end.Before(killed) {
			before++
			if r.status != http.StatusOK {
				t.Errorf("node %d before the kill: %d %s", r.node, r.status, r.body)
			}
			continue
		}
		after++
		statuses[r.status]++
		if r.status != http.StatusOK {
			failed++
			if r.status != http.StatusServiceUnavailable {
				t.Errorf("node %d after the kill: %d %s (want 200, or 503 while the shard has no owner)", r.node, r.status, r.body)
			}
			if lastFail == nil || r.end.After(lastFail.end) {
				lastFail = r
			}
		}
	}
	// The window ends where the first success after the last failure began.
	var window time.Duration
	if lastFail != nil {
		end := time.Time{}
		for _, r := range results {
			if r.node == lastFail.node && r.status == http.StatusOK && !r.start.Before(lastFail.end) && (end.IsZero() || r.start.Before(end)) {
				end = r.start
			}
		}
		if end.IsZero() {
			t.Fatalf("node %d never answered 200 again after its last failure (%d %s at %v after the kill)", lastFail.node, lastFail.status, lastFail.body, lastFail.end.Sub(killed))
		}
		window = end.Sub(killed)
	}
	t.Logf("failover window %v (lease TTL %v): %d of %d evaluations after the kill failed, statuses %v; %d before the kill", window.Round(time.Millisecond), ttl, failed, after, statuses, before)
	// TTL + 1 s is the design bound (the lease expires, the watch fires, a
	// survivor claims the shard). The extra second absorbs scheduling on a
	// busy 2-core machine: the etcd member, two fraudd processes and the
	// load run on the same cores, and one evaluation's deadline is 500 ms.
	if bound := ttl + time.Second + time.Second; window > bound {
		t.Fatalf("failover window %v exceeds %v (lease TTL + 1 s + 1 s margin)", window, bound)
	}
	if after < 20 {
		t.Fatalf("only %d evaluations after the kill: no steady load", after)
	}
	if o := v.owners()[cluster.ShardOf(cluster.KindAccount, a.ID)]; o != "node1" && o != "node2" {
		t.Fatalf("the account's shard is owned by %q after the kill", o)
	}
}
