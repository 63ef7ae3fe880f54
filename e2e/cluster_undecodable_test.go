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

// TestClusterUndecodableRecordRefusesStart: an account record in etcd this
// build cannot decode (written by a newer build during a rolling upgrade,
// or damaged) was left out with an ERROR line, and a node started on an
// empty data dir served without that account: its keys answered 401
// "unknown key" as if it never existed. A node now refuses to start on a
// configuration it cannot read whole, with one line naming the record; a
// running node keeps its previous copy.
func TestClusterUndecodableRecordRefusesStart(t *testing.T) {
	c := StartCluster(t, bin, ClusterOptions{Nodes: 1})
	n1 := c.Nodes[0]
	a := n1.CreateAccount(t, map[string]any{"email": "undecodable@example.com", "plan": "free"})
	if s := evalStatus(t, n1, a.LiveKey); s != http.StatusOK {
		t.Fatalf("the new account on node 1: %d", s)
	}

	cli := c.Etcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key := "/fraudd/" + c.Name + "/config/account/" + a.ID
	if _, err := cli.Put(ctx, key, "\xff\x7fa record of a newer build"); err != nil {
		t.Fatal(err)
	}

	// The running node keeps the copy it had.
	time.Sleep(200 * time.Millisecond)
	if s := evalStatus(t, n1, a.LiveKey); s != http.StatusOK {
		t.Fatalf("node 1 dropped the account it held: %d", s)
	}

	// A new node refuses to start, naming the record.
	grpcAddr := freePort(t)
	cmd := exec.CommandContext(ctx, bin, "serve", "--addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--admin-token", AdminToken,
		"--test-clock", "--cluster-etcd", strings.Join(c.Endpoints, ","), "--cluster-name", c.Name, "--cluster-node-id", "node2",
		"--cluster-listen", grpcAddr, "--cluster-advertise", grpcAddr, "--cluster-lease-ttl", c.LeaseTTL.String())
	cmd.Env = append(os.Environ(), "FRAUDD_SECRET=e2e-master-secret")
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		cancel()
		<-done
		t.Fatalf("a node started on a configuration holding an undecodable record:\n%s", out)
	}
	if err == nil || !strings.Contains(string(out), "config/account/"+a.ID) || strings.Contains(string(out), "goroutine ") {
		t.Fatalf("a node started on an undecodable record: %v\n%s", err, out)
	}
	t.Logf("refused start:\n%s", out)
}

// TestClusterUndecodableRecordWhileRunning: a running node that receives an
// account record it cannot decode (a newer build created the account
// during a rolling upgrade) cannot bind that account's keys. It answered
// them 401 "invalid key" as if the account never existed, counted them
// toward the caller's lockout, and reported itself operational. While
// such a record stands it now reports the API degraded and answers a key
// it cannot resolve 503 storage_unavailable; the keys it knows still work,
// and once the record is readable (here: gone) unknown keys are 401 again.
func TestClusterUndecodableRecordWhileRunning(t *testing.T) {
	c := StartCluster(t, bin, ClusterOptions{Nodes: 1})
	n1 := c.Nodes[0]
	a := n1.CreateAccount(t, map[string]any{"email": "running@example.com", "plan": "free"})
	unknown := "sk_live_" + strings.Repeat("Q", 32)
	if s := evalStatus(t, n1, unknown); s != http.StatusUnauthorized {
		t.Fatalf("an unknown key before: %d", s)
	}

	cli := c.Etcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key := "/fraudd/" + c.Name + "/config/account/acc_ofanewerbuild"
	if _, err := cli.Put(ctx, key, "\xff\x7fa record of a newer build"); err != nil {
		t.Fatal(err)
	}
	status := func() string {
		var st struct {
			Status string `json:"status"`
		}
		r := n1.Do(t, Req{Method: "GET", Path: "/api/status"})
		_ = jsonUnmarshal(r.Body, &st)
		return st.Status
	}
	Within(t, 10*time.Second, "node 1 reports the API degraded", func() bool { return status() == "degraded" })
	if s := evalStatus(t, n1, unknown); s != http.StatusServiceUnavailable {
		t.Fatalf("a key node 1 cannot resolve while a record is unreadable: %d, want 503", s)
	}
	if s := evalStatus(t, n1, a.LiveKey); s != http.StatusOK {
		t.Fatalf("a known account while a record is unreadable: %d", s)
	}
	collect := func() int {
		return n1.Do(t, Req{Method: "POST", Path: "/v1/collect/device", Body: fixtureSignals(t, "chrome_desktop_windows", "pk_live_"+strings.Repeat("Q", 32)),
			Header: map[string]string{"Content-Type": "text/plain", "Origin": "https://shop.example", "X-Forwarded-For": "198.51.100.77"}}).Status
	}
	if s := collect(); s != http.StatusServiceUnavailable {
		t.Fatalf("a publishable key node 1 cannot resolve while a record is unreadable: %d, want 503", s)
	}

	if _, err := cli.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	Within(t, 10*time.Second, "node 1 operational again", func() bool { return status() == "operational" })
	if s := evalStatus(t, n1, unknown); s != http.StatusUnauthorized {
		t.Fatalf("an unknown key after the record went: %d", s)
	}
	if s := collect(); s != http.StatusUnauthorized {
		t.Fatalf("an unknown publishable key after the record went: %d", s)
	}
}
