package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/fraudd/fraudd/cluster"
)

// TestClusterOperatorListsMerged: each node keeps the operator lists of
// what it handled itself (the evaluations it answered, the webhook
// attempts it made, the mail it sent); the admin lists on any node are
// every member's, merged newest first and limited as on one node.
// Evaluations and webhook test events go to both nodes, and each node's
// usage warnings go to the account it owns.
func TestClusterOperatorListsMerged(t *testing.T) {
	c := StartCluster(t, bin, ClusterOptions{Nodes: 2, Args: []string{"--allow-private-webhooks"}})
	rcv := newHookReceiver(t)
	// An account owned by each node: each node warns the accounts it owns.
	ids := []string{"node1", "node2"}
	owned := map[string]Account{}
	for i := 0; len(owned) < 2; i++ {
		if i == 16 {
			t.Fatalf("16 accounts, none owned by one of %v", ids)
		}
		a := c.Nodes[0].CreateAccount(t, map[string]any{"email": fmt.Sprintf("lists-%d@example.com", i), "plan": "custom", "hourly_limit": 10})
		o := cluster.Owner(cluster.KindAccount, cluster.ShardOf(cluster.KindAccount, a.ID), ids)
		if _, ok := owned[o]; !ok {
			owned[o] = a
		}
	}
	a, b := owned["node1"], owned["node2"]
	usageEverywhere(t, c.Nodes, a.LiveKey)
	usageEverywhere(t, c.Nodes, b.LiveKey)

	// Recent evaluations: a's, answered by both nodes in turn.
	var reqIDs []string
	evaluate := func(s *Server, key string) string {
		t.Helper()
		// A degraded answer with a reason: the bare degraded allow is not
		// stored (SPEC 2.8.6), so not listed.
		r := s.Do(t, Req{Method: "POST", Path: "/v1/evaluate", Bearer: key, Body: map[string]any{"email": "x@mailinator.com"}})
		if r.Status != http.StatusOK {
			t.Fatalf("evaluate: %d %s", r.Status, r.Body)
		}
		return r.Header.Get("X-Request-Id")
	}
	for i := range 4 {
		reqIDs = append(reqIDs, evaluate(c.Nodes[i%2], a.LiveKey))
	}
	slices.Reverse(reqIDs) // newest first
	for i, s := range c.Nodes {
		var got []map[string]any
		if err := jsonUnmarshal(s.Admin(t, "GET", "/admin/v1/accounts/"+a.ID+"/evaluations", nil).Body, &got); err != nil {
			t.Fatal(err)
		}
		if ids := field(got, "request_id"); !slices.Equal(ids, reqIDs) {
			t.Fatalf("evaluations through node %d: %v, want both nodes' newest first %v", i+1, ids, reqIDs)
		}
		if err := jsonUnmarshal(s.Admin(t, "GET", "/admin/v1/accounts/"+a.ID+"/evaluations?limit=3", nil).Body, &got); err != nil {
			t.Fatal(err)
		}
		if ids := field(got, "request_id"); !slices.Equal(ids, reqIDs[:3]) {
			t.Fatalf("evaluations through node %d, limit=3: %v, want %v", i+1, ids, reqIDs[:3])
		}
	}

	// Webhook deliveries: a test event sent by each node.
	if r := c.Nodes[0].Admin(t, "PUT", "/admin/v1/accounts/"+a.ID+"/webhook", map[string]any{"url": rcv.URL + "/ok"}); r.Status != 200 {
		t.Fatalf("set webhook: %d %s", r.Status, r.Body)
	}
	var events []string
	for i, s := range c.Nodes {
		Within(t, 10*time.Second, fmt.Sprintf("node %d sends a test event", i+1), func() bool {
			r := s.Admin(t, "POST", "/admin/v1/accounts/"+a.ID+"/webhook/test", nil)
			if r.Status != http.StatusAccepted {
				return false // the webhook's URL has not reached the node yet
			}
			events = append(events, r.JSON(t)["event_id"].(string))
			return true
		})
	}
	for i, s := range c.Nodes {
		var got []map[string]any
		Within(t, 10*time.Second, fmt.Sprintf("node %d lists both nodes' deliveries", i+1), func() bool {
			if err := jsonUnmarshal(s.Admin(t, "GET", "/admin/v1/accounts/"+a.ID+"/webhook/deliveries", nil).Body, &got); err != nil {
				t.Fatal(err)
			}
			ids := field(got, "event_id")
			return len(ids) == 2 && slices.Contains(ids, events[0]) && slices.Contains(ids, events[1])
		})
		if got[0]["attempted_at"].(string) < got[1]["attempted_at"].(string) || got[0]["status"] != "delivered" {
			t.Fatalf("deliveries through node %d: %v", i+1, got)
		}
	}

	// Mail: each owner warns its account at 80% of its hourly 10.
	for range 6 {
		evaluate(c.Nodes[0], a.LiveKey) // 10 in all: 80% and the cap
	}
	for range 8 {
		evaluate(c.Nodes[1], b.LiveKey)
	}
	for i, s := range c.Nodes {
		var got []map[string]any
		Within(t, 10*time.Second, fmt.Sprintf("node %d lists both owners' mail", i+1), func() bool {
			if err := jsonUnmarshal(s.Admin(t, "GET", "/admin/v1/mail", nil).Body, &got); err != nil {
				t.Fatal(err)
			}
			kinds := map[string]bool{}
			for _, m := range got {
				kinds[fmt.Sprint(m["account_id"], " ", m["kind"])] = true
			}
			return len(got) == 3 && kinds[a.ID+" usage_hourly_80"] && kinds[a.ID+" usage_hourly_cap"] && kinds[b.ID+" usage_hourly_80"]
		})
		for j := 1; j < len(got); j++ {
			if got[j-1]["at"].(string) < got[j]["at"].(string) {
				t.Fatalf("mail through node %d not newest first: %v", i+1, got)
			}
		}
		if err := jsonUnmarshal(s.Admin(t, "GET", "/admin/v1/mail?limit=1", nil).Body, &got); err != nil || len(got) != 1 {
			t.Fatalf("mail through node %d, limit=1: %v %v", i+1, got, err)
		}
		if err := jsonUnmarshal(s.Admin(t, "GET", "/admin/v1/mail?account="+b.ID, nil).Body, &got); err != nil || len(got) != 1 || got[0]["account_id"] != b.ID {
			t.Fatalf("mail of node 2's account through node %d: %v %v", i+1, got, err)
		}
	}
}

// field is each line's string field name.
func field(lines []map[string]any, name string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i], _ = l[name].(string)
	}
	return out
}
