package e2e

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// refusedNode runs a cluster node of c as id on dataDir, expects it to stop
// before serving, and returns what it wrote.
func refusedNode(t *testing.T, c *Cluster, id, dataDir string) string {
	t.Helper()
	grpcAddr := freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve", "--addr", "127.0.0.1:0", "--data-dir", dataDir, "--admin-token", AdminToken,
		"--test-clock", "--cluster-etcd", strings.Join(c.Endpoints, ","), "--cluster-name", c.Name, "--cluster-node-id", id,
		"--cluster-listen", grpcAddr, "--cluster-advertise", grpcAddr, "--cluster-lease-ttl", c.LeaseTTL.String())
	cmd.Env = append(os.Environ(), "FRAUDD_SECRET=e2e-master-secret")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("node %s on %s did not stop:\n%s", id, dataDir, out)
	}
	if err == nil || strings.Contains(string(out), "goroutine ") || strings.Contains(string(out), "fraudd listening") {
		t.Fatalf("node %s on %s: %v\n%s", id, dataDir, err, out)
	}
	return string(out)
}

// TestClusterNodeDataDirIsItsOwn: a node keeps its share of the counts in
// its data dir under its node id. Killed and started again under the same
// id on an empty data dir (lost, or a wrong path), it joined and answered
// a share of nothing: the evaluations it had acknowledged were gone from
// the account's month_used, and since shares merge by maximum its next
// ones did not count until they passed them. A data dir started under
// another node's id answered that node's share as its own. Both now stop
// the start with one line; the node on its own data dir starts as before.
func TestClusterNodeDataDirIsItsOwn(t *testing.T) {
	c := StartCluster(t, bin, ClusterOptions{Nodes: 2, LeaseTTL: time.Second})
	n1, n2 := c.Nodes[0], c.Nodes[1]
	a := n1.CreateAccount(t, map[string]any{"email": "datadir@example.com", "plan": "free"})
	usageEverywhere(t, c.Nodes, a.LiveKey)
	for range 3 {
		if s := evaluate(n2, t, a.LiveKey, map[string]any{}, nil).Status; s != http.StatusOK {
			t.Fatalf("evaluate on node 2: %d", s)
		}
	}

	// Stored by node 2 (the default durability syncs within 10 ms), and
	// counted.
	Within(t, 10*time.Second, "month_used holds node 2's evaluations", func() bool {
		time.Sleep(200 * time.Millisecond) // under the usage endpoint's limit
		r := n1.Do(t, Req{Path: "/v1/usage", Bearer: a.LiveKey})
		return r.Status == http.StatusOK && num(t, r.JSON(t), "month_used") == 3
	})
	n2.Kill()
	time.Sleep(c.LeaseTTL + time.Second) // node 2's lease has expired
	out := refusedNode(t, c, "node2", t.TempDir())
	if !strings.Contains(out, `own data dir`) || !strings.Contains(out, "etcdctl del /fraudd/"+c.Name+"/nodes/node2") {
		t.Fatalf("node 2 on an empty data dir, refused without naming the way out:\n%s", out)
	}
	out = refusedNode(t, c, "node3", n2.DataDir)
	if !strings.Contains(out, `belongs to node \"node2\"`) {
		t.Fatalf("node 2's data dir started as node 3, refused without saying whose it is:\n%s", out)
	}

	// On its own data dir node 2 starts, and every evaluation it
	// acknowledged is counted.
	n2.start()
	var last []byte
	ok := false
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end) && !ok; time.Sleep(time.Second) {
		r := n1.Do(t, Req{Path: "/v1/usage", Bearer: a.LiveKey})
		last = r.Body
		ok = r.Status == http.StatusOK && num(t, r.JSON(t), "month_used") == 3
	}
	if !ok {
		t.Fatalf("month_used after node 2 returned on its own data dir: %s\n%s", last, n2.Logs())
	}
}
