package e2e

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestClusterWrongAdvertiseRefusesToStart: a node whose --cluster-advertise
// is an address of this machine where it does not answer (a typo in the
// port) stops with one line naming the flag, instead of claiming shards the
// other members then cannot reach (every node answered 503 for their
// accounts while it reported itself healthy); the cluster keeps serving.
func TestClusterWrongAdvertiseRefusesToStart(t *testing.T) {
	c := StartCluster(t, bin, ClusterOptions{Nodes: 1})
	listen, wrong := freePort(t), freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve", "--addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--admin-token", AdminToken,
		"--cluster-etcd", strings.Join(c.Endpoints, ","), "--cluster-name", c.Name, "--cluster-node-id", "node9",
		"--cluster-listen", listen, "--cluster-advertise", wrong, "--cluster-lease-ttl", c.LeaseTTL.String())
	cmd.Env = append(os.Environ(), "FRAUDD_SECRET=e2e-master-secret")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("a node advertising %s while listening on %s did not stop:\n%s", wrong, listen, out)
	}
	if err == nil || !strings.Contains(string(out), "--cluster-advertise address "+wrong) || strings.Contains(string(out), "goroutine ") {
		t.Fatalf("a node advertising %s while listening on %s: %v\n%s", wrong, listen, err, out)
	}
	t.Logf("refused start:\n%s", out)
	a := c.Nodes[0].CreateAccount(t, map[string]any{"email": "advertise@example.com", "plan": "free"})
	Within(t, 10*time.Second, "the cluster serves every account after the refused node", func() bool {
		return evalStatus(t, c.Nodes[0], a.LiveKey) == 200
	})
}
