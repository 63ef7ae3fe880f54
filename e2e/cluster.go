package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fraudd/fraudd/cluster/embedetcd"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Cluster is N fraudd nodes in cluster mode sharing one etcd member that
// the test process runs (cluster/embedetcd). Each node is a Server with its
// own data dir, loopback ports and --test-clock; Nodes[i] is node i+1.
type Cluster struct {
	Name      string
	Endpoints []string
	Nodes     []*Server
	// LeaseTTL is every node's --cluster-lease-ttl.
	LeaseTTL time.Duration

	t    testing.TB
	bin  string
	etcd *embedetcd.Server
}

// ClusterOptions shape StartCluster; the zero value is 3 nodes, 2 s leases.
type ClusterOptions struct {
	Nodes    int
	LeaseTTL time.Duration
	// Args are extra flags for every node.
	Args []string
	// Env is added to every node's environment.
	Env []string
}

var clusterSeq atomic.Int64

// StartCluster starts the etcd member and the nodes, one after the other
// (each has joined the cluster once it reports its address). Cleanup stops
// the nodes, then etcd.
// Etcd is a client of the cluster's etcd, closed when the test ends: for
// tests that read or write the shared state as an operator (or a newer
// build) would.
func (c *Cluster) Etcd(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func StartCluster(t testing.TB, bin string, o ClusterOptions) *Cluster {
	t.Helper()
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	if o.LeaseTTL == 0 {
		o.LeaseTTL = 2 * time.Second
	}
	dir := t.TempDir()
	// A 10 ms tick lets etcd keep 1-2 s leases as given (it raises any lease
	// below 1.5 election timeouts), for the failure tests built on this.
	srv, err := embedetcd.Start(context.Background(), embedetcd.Config{Dir: dir, Tick: 10 * time.Millisecond, Election: 100 * time.Millisecond, NoFsync: true})
	if err != nil {
		t.Fatalf("embedded etcd: %v", err)
	}
	c := &Cluster{Name: fmt.Sprintf("e2e-%d-%d", os.Getpid(), clusterSeq.Add(1)), Endpoints: srv.Endpoints(),
		LeaseTTL: o.LeaseTTL, t: t, bin: bin, etcd: srv}
	t.Cleanup(srv.Close) // runs last: the nodes' cleanups were registered after it
	for i := 1; i <= o.Nodes; i++ {
		c.Nodes = append(c.Nodes, c.StartNode(t, i, o.Args, o.Env))
	}
	return c
}

// StartNode starts node i (1-based) of the cluster with a new data dir and
// gRPC port; the caller appends it to Nodes if it is a new member.
func (c *Cluster) StartNode(t testing.TB, i int, args, env []string) *Server {
	t.Helper()
	grpcAddr := freePort(t)
	a := []string{"--cluster-etcd", strings.Join(c.Endpoints, ","), "--cluster-name", c.Name,
		"--cluster-node-id", "node" + strconv.Itoa(i), "--cluster-listen", grpcAddr, "--cluster-advertise", grpcAddr,
		"--cluster-lease-ttl", c.LeaseTTL.String()}
	return StartServer(t, &Server{Bin: c.bin, Args: append(a, args...), Env: env})
}

// freePort reserves a loopback port by listening and closing: another
// process could take it in between, so it is only for ports that are not
// served yet or are retried.
func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// Within polls cond every 10 ms until it holds, and fails the test when d
// passes first. It returns how long it took.
func Within(t testing.TB, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// Signal sends sig to the running fraudd process (SIGSTOP and SIGCONT for
// the pause tests).
func (s *Server) Signal(t testing.TB, sig os.Signal) {
	t.Helper()
	if s.cmd == nil || s.cmd.Process == nil {
		t.Fatal("signal: the server is not running")
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v: %v", sig, err)
	}
}
