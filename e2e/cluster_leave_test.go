package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fraudd/fraudd/cluster"
)

// TestClusterGracefulLeave: the owner of an account's shard leaves with
// SIGTERM under load on the two other nodes (a load balancer sends it
// nothing once it stops answering). It marks itself leaving, hands each
// shard over once what it charged is stored, then hands its counts over
// before its membership ends. No request fails meanwhile (requests for a
// shard wait for the next claim), and the monthly count afterwards, read
// through either remaining node, is exactly what was acknowledged: the
// leaver's share outlives it.
func TestClusterGracefulLeave(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster leave test skipped in -short mode")
	}
	c, v, a, base := node3Account(t, time.Second)
	baseHour := hourUsed(t, c.Nodes[0], a.LiveKey)
	l := startAckLoad(c, a.LiveKey, func(i int) bool { return i == 2 })
	time.Sleep(500 * time.Millisecond)
	left := time.Now()
	if err := c.Nodes[2].Stop(); err != nil {
		t.Fatalf("node 3 did not leave cleanly: %v", err)
	}
	took := time.Since(left)
	Within(t, 10*time.Second, "nodes 1 and 2 own every shard", func() bool { return v.settled([]string{"node1", "node2"}) })
	time.Sleep(500 * time.Millisecond)
	acks := l.end()
	if o := v.owners()[cluster.ShardOf(cluster.KindAccount, a.ID)]; o == "node3" || o == "" {
		t.Fatalf("the account's shard is owned by %q after node 3 left", o)
	}
	ack := int64(len(acks))
	t.Logf("node 3 left in %v; %d acknowledged, %d refused, %d unanswered: %v", took.Round(time.Millisecond), ack, l.refused.Load(), l.inflight.Load(), l.statuses)
	// The hourly window moved with the shard: the new owner resumed node
	// 3's instead of starting the hour afresh.
	exactUnderLoad(t, c, c.Nodes[:2], l, a.LiveKey, base, baseHour, ack, 100)
}

// hourUsed reads used_this_hour through s, as monthUsed reads month_used.
func hourUsed(t *testing.T, s *Server, key string) int64 {
	t.Helper()
	var r *Response
	Within(t, 5*time.Second, "usage answers 200", func() bool {
		r = s.Do(t, Req{Path: "/v1/usage", Bearer: key})
		return r.Status == http.StatusOK
	})
	return num(t, r.JSON(t), "used_this_hour")
}

// TestClusterRollingRestart: each of the three nodes in turn leaves with
// SIGTERM and starts again on its data dir, under load on the others (a
// load balancer takes a node out while it restarts). No request fails, and
// afterwards the monthly count and the hourly window, read through every
// node, hold exactly the acknowledged calls: each leaver's share was handed
// over and is met again, not counted twice, when it returns with its own
// store; each hourly window moved with its shard.
func TestClusterRollingRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster rolling restart test skipped in -short mode")
	}
	c, v, a, base := node3Account(t, time.Second)
	baseHour := hourUsed(t, c.Nodes[0], a.LiveKey)
	var down [3]atomic.Bool
	l := startAckLoad(c, a.LiveKey, func(i int) bool { return down[i].Load() })
	all := []string{"node1", "node2", "node3"}
	for i, s := range c.Nodes {
		time.Sleep(300 * time.Millisecond)
		down[i].Store(true)
		l.drain(i)
		s.Restart()
		down[i].Store(false)
		Within(t, 20*time.Second, fmt.Sprintf("node %d has its shards back", i+1), func() bool { return v.settled(all) })
	}
	time.Sleep(300 * time.Millisecond)
	acks := l.end()
	ack := int64(len(acks))
	t.Logf("%d acknowledged, %d refused, %d unanswered: %v", ack, l.refused.Load(), l.inflight.Load(), l.statuses)
	exactUnderLoad(t, c, c.Nodes, l, a.LiveKey, base, baseHour, ack, 300)
}

// exactUnderLoad fails the test unless every request of the load was
// answered 200, and month_used and used_this_hour, read through each of
// nodes, grew from base and baseHour by exactly the ack acknowledged
// calls, and at least least were.
func exactUnderLoad(t *testing.T, c *Cluster, nodes []*Server, l *ackLoad, key string, base, baseHour, ack, least int64) {
	t.Helper()
	if l.refused.Load() != 0 || l.inflight.Load() != 0 {
		logErrors(t, c)
		t.Fatalf("requests failed: %v", l.statuses)
	}
	for i, s := range nodes {
		if used := monthUsed(t, s, key) - base; used != ack {
			t.Fatalf("node %d: month_used grew by %d; %d were acknowledged", i+1, used, ack)
		}
		if used := hourUsed(t, s, key) - baseHour; used != ack {
			t.Fatalf("node %d: used_this_hour grew by %d; %d were acknowledged", i+1, used, ack)
		}
	}
	if ack < least {
		t.Fatalf("only %d evaluations acknowledged: no steady load", ack)
	}
}

// logErrors logs every node's ERROR lines (a failed request's cause).
func logErrors(t *testing.T, c *Cluster) {
	t.Helper()
	for i, s := range c.Nodes {
		for _, ln := range strings.Split(s.Logs(), "\n") {
			if strings.Contains(ln, "level=ERROR") {
				t.Logf("node %d: %s", i+1, ln)
			}
		}
	}
}
