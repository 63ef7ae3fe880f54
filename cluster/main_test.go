package cluster

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fraudd/fraudd/cluster/embedetcd"
)

// The etcd member the tests share, started by the first test that needs
// one (benchmarks start their own, so its ticks do not count against them).
// Each test works under a cluster root of its own.
// A 10 ms tick lets etcd grant 1 s leases (it raises any lease below
// 1.5 election timeouts), so expiry tests take about a second.
var etcd = embedetcd.Shared{Config: embedetcd.Config{Tick: 10 * time.Millisecond, Election: 100 * time.Millisecond, NoFsync: true}}

func TestMain(m *testing.M) {
	code := m.Run()
	etcd.Stop()
	os.Exit(code)
}

func sharedEtcd(tb testing.TB) []string {
	tb.Helper()
	return etcd.Endpoints(tb)
}

func newClient(tb testing.TB) *clientv3.Client {
	tb.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: sharedEtcd(tb), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cli.Close() })
	return cli
}

// roots counts test roots, so that -count=N runs start on empty prefixes.
var roots atomic.Int64

func testRoot(tb testing.TB) string {
	r, err := Root(fmt.Sprintf("%s-%d", strings.NewReplacer("/", "-").Replace(tb.Name()), roots.Add(1)))
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

func join(t *testing.T, cli *clientv3.Client, root, id string, ttl time.Duration) *Member {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := Join(ctx, MemberConfig{Client: cli, Root: root, ID: id, Addr: "127.0.0.1:1", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// eventually polls cond every 10 ms until it holds or 10 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
