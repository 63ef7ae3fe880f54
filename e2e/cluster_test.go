package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// evalStatus evaluates once with key on s and returns the status. Each call
// comes from another documentation address, so polling a key that is not
// (or no longer) valid never trips the per-address invalid-key lockout.
func evalStatus(t *testing.T, s *Server, key string) int {
	t.Helper()
	n := evalSeq.Add(1)
	from := fmt.Sprintf("%s.%d", [...]string{"198.51.100", "203.0.113"}[n/250%2], 1+n%250)
	return s.Do(t, Req{Method: "POST", Path: "/v1/evaluate", Bearer: key, Body: `{"token":"test_clean"}`,
		Header: map[string]string{"X-Forwarded-For": from}}).Status
}

var evalSeq atomic.Int64

// TestClusterConfigPropagates: the account configuration lives in etcd and
// every node applies it: an account created on node 1 evaluates on nodes 2
// and 3 within a second, a key rotated on node 3 is refused on node 1 within
// a second, and a node that was down meanwhile starts with the current
// configuration.
func TestClusterConfigPropagates(t *testing.T) {
	c := StartCluster(t, bin, ClusterOptions{})
	n1, n2, n3 := c.Nodes[0], c.Nodes[1], c.Nodes[2]

	a := n1.CreateAccount(t, map[string]any{"email": "cluster@example.com", "plan": "free"})
	for _, n := range []*Server{n2, n3} {
		Within(t, time.Second, "the new account's live key evaluates on "+n.URL, func() bool { return evalStatus(t, n, a.LiveKey) == http.StatusOK })
		Within(t, time.Second, "the new account's test key evaluates on "+n.URL, func() bool { return evalStatus(t, n, a.TestKey) == http.StatusOK })
	}

	// The test key rotated on node 3 stops at once everywhere.
	r := n3.Admin(t, "POST", "/admin/v1/accounts/"+a.ID+"/keys/test/rotate", nil)
	if r.Status != http.StatusOK {
		t.Fatalf("rotate test key on node 3: %d %s", r.Status, r.Body)
	}
	var rot struct {
		Key string `json:"test_key"`
	}
	if err := json.Unmarshal(r.Body, &rot); err != nil || rot.Key == "" {
		t.Fatalf("rotate answer: %s", r.Body)
	}
	Within(t, time.Second, "the old test key is refused on node 1", func() bool { return evalStatus(t, n1, a.TestKey) == http.StatusUnauthorized })
	if s := evalStatus(t, n1, rot.Key); s != http.StatusOK {
		t.Fatalf("the new test key on node 1: %d", s)
	}

	// The live key rotated on node 3, its grace ended at once: refused on
	// node 1 within a second.
	r = n3.Admin(t, "POST", "/admin/v1/accounts/"+a.ID+"/keys/live/rotate", nil)
	var live struct {
		Key string `json:"live_key"`
	}
	if err := json.Unmarshal(r.Body, &live); r.Status != http.StatusOK || err != nil || live.Key == "" {
		t.Fatalf("rotate live key: %d %s", r.Status, r.Body)
	}
	if r := n3.Admin(t, "POST", "/admin/v1/accounts/"+a.ID+"/keys/live/revoke-previous", nil); r.Status/100 != 2 {
		t.Fatalf("revoke previous live key: %d %s", r.Status, r.Body)
	}
	Within(t, time.Second, "the revoked live key is refused on node 1", func() bool { return evalStatus(t, n1, a.LiveKey) == http.StatusUnauthorized })
	if s := evalStatus(t, n1, live.Key); s != http.StatusOK {
		t.Fatalf("the new live key on node 1: %d", s)
	}

	// Node 2 is down while the account changes; started again, it serves
	// the configuration of the cluster, not the one it stopped with.
	if err := n2.Stop(); err != nil {
		t.Fatalf("stop node 2: %v\n%s", err, n2.Logs())
	}
	if r := n1.Admin(t, "POST", "/admin/v1/accounts/"+a.ID+"/keys/test/rotate", nil); r.Status != http.StatusOK {
		t.Fatalf("rotate test key on node 1: %d %s", r.Status, r.Body)
	} else if err := json.Unmarshal(r.Body, &rot); err != nil {
		t.Fatal(err)
	}
	b := n1.CreateAccount(t, map[string]any{"email": "while-down@example.com", "plan": "free"})
	n2.start()
	if s := evalStatus(t, n2, rot.Key); s != http.StatusOK {
		t.Fatalf("restarted node 2, the test key rotated while it was down: %d", s)
	}
	if s := evalStatus(t, n2, b.LiveKey); s != http.StatusOK {
		t.Fatalf("restarted node 2, the account created while it was down: %d", s)
	}
	if s := evalStatus(t, n2, a.TestKey); s != http.StatusUnauthorized {
		t.Fatalf("restarted node 2, a key rotated before it stopped: %d", s)
	}
}

// TestClusterEmbeddedEtcd: node 1 runs the cluster's etcd member in its own
// process (--cluster-embedded-etcd) and node 2 uses it; the configuration
// written on either serves on both, and survives node 1's restart (the
// member keeps its data in node 1's data dir). A third node then joins the
// running etcd cluster with a member of its own (--cluster-etcd-join).
func TestClusterEmbeddedEtcd(t *testing.T) {
	client, peer := "http://"+freePort(t), "http://"+freePort(t)
	// Each node advertises its real gRPC address: an evaluation on the
	// node that does not own the account's shard charges at the owner.
	grpc1, grpc2 := freePort(t), freePort(t)
	n1 := StartServer(t, &Server{Bin: bin, Args: []string{"--cluster-embedded-etcd", "--cluster-node-id", "node1",
		"--cluster-etcd-client-url", client, "--cluster-etcd-peer-url", peer,
		"--cluster-listen", grpc1, "--cluster-advertise", grpc1, "--cluster-lease-ttl", "2s"}})
	if !strings.Contains(n1.Logs(), `msg="embedded etcd member started"`) {
		t.Fatalf("node 1 did not start its etcd member:\n%s", n1.Logs())
	}
	n2 := StartServer(t, &Server{Bin: bin, Args: []string{"--cluster-etcd", client, "--cluster-node-id", "node2",
		"--cluster-listen", grpc2, "--cluster-advertise", grpc2, "--cluster-lease-ttl", "2s"}})

	a := n2.CreateAccount(t, map[string]any{"email": "embedded@example.com", "plan": "free"})
	Within(t, time.Second, "node 2's account evaluates on node 1", func() bool { return evalStatus(t, n1, a.LiveKey) == http.StatusOK })

	n1.Restart()
	if s := evalStatus(t, n1, a.LiveKey); s != http.StatusOK {
		t.Fatalf("node 1 after its restart: %d", s)
	}
	// Node 2 watched through node 1's restart (a full re-read after the
	// broken watch) and takes writes again.
	b := n1.CreateAccount(t, map[string]any{"email": "after-restart@example.com", "plan": "free"})
	Within(t, 10*time.Second, "an account created after node 1's restart evaluates on node 2", func() bool { return evalStatus(t, n2, b.LiveKey) == http.StatusOK })

	// A third node joins the running etcd cluster with a member of its own
	// (--cluster-etcd-join: a learner, then promoted), and serves the
	// cluster's accounts; one it creates evaluates on node 1. (Stopped
	// first at the end, as its cleanup was registered last: two members
	// need both for a quorum.)
	grpc3 := freePort(t)
	n3 := StartServer(t, &Server{Bin: bin, Args: []string{"--cluster-embedded-etcd", "--cluster-node-id", "node3",
		"--cluster-etcd-join", client, "--cluster-etcd-client-url", "http://" + freePort(t), "--cluster-etcd-peer-url", "http://" + freePort(t),
		"--cluster-listen", grpc3, "--cluster-advertise", grpc3, "--cluster-lease-ttl", "2s"}})
	if !strings.Contains(n3.Logs(), `msg="embedded etcd member started"`) {
		t.Fatalf("node 3 did not start its etcd member:\n%s", n3.Logs())
	}
	Within(t, 10*time.Second, "node 1's account evaluates on node 3", func() bool { return evalStatus(t, n3, b.LiveKey) == http.StatusOK })
	c := n3.CreateAccount(t, map[string]any{"email": "joined@example.com", "plan": "free"})
	Within(t, 10*time.Second, "node 3's account evaluates on node 1", func() bool { return evalStatus(t, n1, c.LiveKey) == http.StatusOK })

	// Node 3 goes for good: the operator removes its etcd member first
	// (etcdctl member remove does this call; two members need both for a
	// quorum, so a dead one could not be removed), then stops it, and node
	// 1's member serves writes alone again.
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{client}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := cli.MemberList(ctx)
	if err != nil || len(list.Members) != 2 {
		t.Fatalf("etcd members with node 3 joined: %+v %v", list, err)
	}
	for _, m := range list.Members {
		if m.IsLearner {
			t.Fatalf("node 3's member is still a learner: %+v", m)
		}
		if m.Name == "node3" {
			// etcd refuses a reconfiguration ("unhealthy cluster") until
			// every member has been connected for a few seconds.
			Within(t, 20*time.Second, "node 3's etcd member is removed", func() bool {
				_, err := cli.MemberRemove(ctx, m.ID)
				return err == nil
			})
		}
	}
	n3.Kill()
	d := n1.CreateAccount(t, map[string]any{"email": "after-node3@example.com", "plan": "free"})
	Within(t, 10*time.Second, "an account created after node 3's removal evaluates on node 2", func() bool { return evalStatus(t, n2, d.LiveKey) == http.StatusOK })
}

// TestClusterThreatFeedSums: each node counts the API traffic it served;
// /api/threat-feed on any node answers the sum over the members.
func TestClusterThreatFeedSums(t *testing.T) {
	c := StartCluster(t, bin, ClusterOptions{})
	a := c.Nodes[0].CreateAccount(t, map[string]any{"email": "feed@example.com", "plan": "custom", "hourly_limit": 1000})
	usageEverywhere(t, c.Nodes, a.LiveKey)
	want := 0
	for i, s := range c.Nodes {
		for range i + 2 {
			if st, err := countedEval(s, a.LiveKey); err != nil || st != http.StatusOK {
				t.Fatalf("evaluation on node %d: %d %v", i+1, st, err)
			}
			want++
		}
	}
	for i, s := range c.Nodes {
		var f map[string]any
		Within(t, 10*time.Second, fmt.Sprintf("node %d's threat feed counts every node's traffic", i+1), func() bool {
			r := s.Do(t, Req{Path: "/api/threat-feed"})
			if r.Status != http.StatusOK {
				return false
			}
			f = r.JSON(t)
			today := f["today"].(map[string]any)
			return num(t, today, "total") == int64(want) && num(t, f, "week_total") == int64(want)
		})
		if week := f["week"].(map[string]any); num(t, week, "total") != int64(want) {
			t.Fatalf("node %d: week %v", i+1, week)
		}
	}
}

// TestClusterStatusReportsMembers: /api/status on any node reports the
// cluster: a member that stops answering (SIGSTOP, still within its lease)
// degrades every node's status; once it answers again, they are
// operational again.
func TestClusterStatusReportsMembers(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster status test skipped in -short mode")
	}
	c := StartCluster(t, bin, ClusterOptions{LeaseTTL: 5 * time.Second})
	status := func(s *Server) string {
		r := s.Do(t, Req{Path: "/api/status"})
		if r.Status != http.StatusOK {
			return fmt.Sprintf("HTTP %d", r.Status)
		}
		st, _ := r.JSON(t)["status"].(string)
		return st
	}
	for i, s := range c.Nodes[:2] {
		Within(t, 20*time.Second, fmt.Sprintf("node %d operational", i+1), func() bool { return status(s) == "operational" })
	}
	c.Nodes[2].Signal(t, syscall.SIGSTOP)
	stopped := true
	defer func() {
		if stopped {
			c.Nodes[2].Signal(t, syscall.SIGCONT)
		}
	}()
	for i, s := range c.Nodes[:2] {
		Within(t, 4*time.Second, fmt.Sprintf("node %d reports the cluster degraded", i+1), func() bool { return status(s) == "degraded" })
	}
	c.Nodes[2].Signal(t, syscall.SIGCONT)
	stopped = false
	for i, s := range c.Nodes {
		Within(t, 20*time.Second, fmt.Sprintf("node %d operational again", i+1), func() bool { return status(s) == "operational" })
	}
}
