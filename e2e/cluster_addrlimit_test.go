package e2e

import (
	"net/http"
	"testing"
	"time"
)

// untilRefused asks once every 250 ms until the answer is 429, for at most
// 5 s, and returns how many were admitted before it.
func untilRefused(t *testing.T, s *Server, r Req) int {
	t.Helper()
	admitted := 0
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		got := s.Do(t, r)
		switch {
		case got.Status == http.StatusTooManyRequests:
			if got.Header.Get("Retry-After") == "" {
				t.Fatalf("429 without Retry-After on %s: %s", s.URL, got.Body)
			}
			return admitted
		case got.Status/100 != 2:
			t.Fatalf("%s %s on %s: %d %s", r.Method, r.Path, s.URL, got.Status, got.Body)
		}
		admitted++
		if time.Now().After(deadline) {
			t.Fatalf("%s on %s still admitted after 5 s (%d more)", r.Path, s.URL, admitted)
		}
	}
}

// TestClusterAddressLimits: an address's per-address limits hold across the
// nodes, not per node. Each node reports what it admitted to the address
// shard's owner every 100 ms and learns the others' part in the answer, so
// past the limit a node admits at most what it served before its next
// answer; without the sums each node would admit the whole limit again.
// The invalid-key lockout likewise: 21 invalid keys spread over three nodes
// lock the address on every node, good key or not.
func TestClusterAddressLimits(t *testing.T) {
	c := StartCluster(t, bin, ClusterOptions{})

	// Sample allows 30 a minute per address: 10 on each node, one after the other.
	sample := Req{Path: "/v1/evaluate/sample", Header: map[string]string{"X-Forwarded-For": "192.0.2.77"}}
	for _, n := range c.Nodes {
		for i := range 10 {
			if r := n.Do(t, sample); r.Status != http.StatusOK {
				t.Fatalf("sample %d on %s: %d %s", i+1, n.URL, r.Status, r.Body)
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	extra := 0
	for _, n := range c.Nodes {
		extra += untilRefused(t, n, sample)
	}
	// Node 3 learnt the others' 20 in its first answer; nodes 1 and 2 may
	// each admit one request before theirs carries the later counts.
	if extra > len(c.Nodes) {
		t.Fatalf("%d requests past the address's 30 over the cluster", extra)
	}

	a := c.Nodes[0].CreateAccount(t, map[string]any{"email": "addr-lock@example.com", "plan": "free"})
	for _, n := range c.Nodes {
		Within(t, time.Second, "the account's key reaches "+n.URL, func() bool {
			return n.Do(t, Req{Path: authProbe, Bearer: a.LiveKey, Header: map[string]string{"X-Forwarded-For": "192.0.2.79"}}).Status == http.StatusOK
		})
	}
	from := map[string]string{"X-Forwarded-For": "192.0.2.78"}
	for _, n := range c.Nodes {
		for i := range 7 {
			if r := n.Do(t, Req{Path: authProbe, Bearer: "sk_live_wrong", Header: from}); r.Status != http.StatusUnauthorized {
				t.Fatalf("invalid key %d on %s: %d %s", i+1, n.URL, r.Status, r.Body)
			}
		}
	}
	// The owner locks the address once the three nodes' counts reach it
	// (each reports within 100 ms), and every node learns the lockout
	// within a second (a member it has nothing to report to is asked once a
	// second). A good key from the locked address is then refused on every
	// node at once: a good key counts nothing toward the lockout, so only
	// the owner's lock refuses it.
	time.Sleep(2 * time.Second)
	for _, n := range c.Nodes {
		if r := n.Do(t, Req{Path: authProbe, Bearer: a.LiveKey, Header: from}); r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" {
			t.Fatalf("%s, a good key from the address 21 invalid keys over the cluster locked: %d %s", n.URL, r.Status, r.Body)
		}
	}
}
