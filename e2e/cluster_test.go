package e2e

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

// evalStatus evaluates once with key on s and returns the status.
func evalStatus(t *testing.T, s *Server, key string) int {
	t.Helper()
	return s.Do(t, Req{Method: "POST", Path: "/v1/evaluate", Bearer: key, Body: `{"token":"test_clean"}`}).Status
}

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
