package rpc

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/fraudd/fraudd/actors/checks"
	"github.com/fraudd/fraudd/actors/devicehist"
	"github.com/fraudd/fraudd/actors/events"
	"github.com/fraudd/fraudd/actors/iplimit"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/cluster"
	"github.com/fraudd/fraudd/cluster/embedetcd"
	"github.com/fraudd/fraudd/internal/secrets"
	"github.com/fraudd/fraudd/storage"
)

// The etcd member the tests share, started by the first test that needs
// one; each test works under a cluster root of its own.
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

var roots atomic.Int64

func testRoot(tb testing.TB) string {
	r, err := cluster.Root(fmt.Sprintf("%s-%d", strings.NewReplacer("/", "-").Replace(tb.Name()), roots.Add(1)))
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// node is one cluster member in the test process: its membership, owner
// view and balancer, real quota actors on a Pebble store of its own, the
// Node service on a loopback port, and the routing client.
type node struct {
	id      string
	addr    string
	m       *cluster.Member
	view    *cluster.OwnerView
	bal     *cluster.Balancer
	db      *storage.DB
	local   *quota.Client
	warns   *warnRecorder // the usage warnings this node's quota actors sent
	events  *events.Client
	ev      *Events
	srv     *grpc.Server
	q       *Quota
	owners  Ownership
	windows *HandedWindows
	shared  *SharedStore
	server  *Server
	feed    *fakeFeed
	limits  *iplimit.Client
	addrs   *AddrTotals
	rep     *AddrReporter
	hist    *fakeHistory
	dh      *devicehist.Client // a real device history, moved by mover
	mover   *HistoryMover
	stop    context.CancelFunc
	done    chan struct{}
}

var quietLog = slog.New(slog.DiscardHandler)

// startNode starts a member; wrap, when set, replaces the ownership the
// routing client sees (a lagging view).
func startNode(tb testing.TB, root, id string, wrap func(Ownership) Ownership) *node {
	tb.Helper()
	return startNodeWith(tb, root, id, wrap, nil)
}

// startNodeWith is startNode with the routing client's configuration
// changed by conf (allowance leases).
func startNodeWith(tb testing.TB, root, id string, wrap func(Ownership) Ownership, conf func(*QuotaConfig)) *node {
	tb.Helper()
	return startNodeHist(tb, root, id, wrap, conf, false)
}

// startNodeHist is startNodeWith; with realHist the owner parts observe
// the node's real device history (dh), which holders mirror (mirror.go),
// instead of the fake.
func startNodeHist(tb testing.TB, root, id string, wrap func(Ownership) Ownership, conf func(*QuotaConfig), realHist bool) *node {
	tb.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: sharedEtcd(tb), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cli.Close() })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	n := &node{id: id, addr: l.Addr().String(), done: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n.m, err = cluster.Join(ctx, cluster.MemberConfig{Client: cli, Root: root, ID: id, Addr: l.Addr().String(), TTL: time.Second, Logger: quietLog})
	if err != nil {
		tb.Fatal(err)
	}
	run, stop := context.WithCancel(context.Background())
	n.stop = stop
	if n.view, err = cluster.NewOwnerView(cli, root); err != nil {
		tb.Fatal(err)
	}
	if err := n.view.Start(run); err != nil {
		tb.Fatal(err)
	}
	if n.db, err = storage.Open(tb.TempDir(), storage.Options{Logger: quietLog}); err != nil {
		tb.Fatal(err)
	}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quietLog }))
	n.windows = NewHandedWindows()
	shared := NewSharedStore(n.db, id, n.windows)
	n.shared = shared
	n.warns = &warnRecorder{}
	n.local = quota.New(sys.Root, quota.Config{Shards: 2, Store: shared, Logger: quietLog, Notifier: n.warns})
	n.events = events.New(sys.Root, events.Config{Shards: 2, Node: NodeRoute(id), Logger: quietLog, KeepRecent: 1 << 10})
	// As a fraudd node does (clusterserve): a shard leaving drops its
	// accounts once stored and keeps their hourly windows for the next
	// owner; a shard arriving forgets what a non-owner held.
	inShard := func(shard int) func(string) bool {
		return func(acc string) bool { return cluster.ShardOf(cluster.KindAccount, acc) == shard }
	}
	n.bal, err = cluster.NewBalancer(cluster.BalancerConfig{Member: n.m, View: n.view, Kinds: []cluster.Kind{cluster.KindAccount, cluster.KindAddr}, Every: 100 * time.Millisecond,
		Releasing: func(_ context.Context, c cluster.Claim) error {
			if c.Kind != cluster.KindAccount {
				return nil
			}
			handed, err := n.local.Drop(inShard(c.Shard), 5*time.Second)
			n.windows.Put(handed, testNow)
			return err
		},
		Acquired: func(_ context.Context, c cluster.Claim) {
			if c.Kind == cluster.KindAccount {
				n.local.Forget(inShard(c.Shard), 5*time.Second)
			}
		},
	})
	if err != nil {
		tb.Fatal(err)
	}
	go func() { defer close(n.done); n.bal.Run(run) }()
	n.owners = Cluster{Member: n.m, Balancer: n.bal, View: n.view}
	n.feed = &fakeFeed{}
	routed := n.owners
	if wrap != nil {
		routed = wrap(routed)
	}
	qc := QuotaConfig{Local: n.local, Owners: routed, Timeout: 2 * time.Second, Logger: quietLog, Now: func() time.Time { return testNow }}
	if conf != nil {
		conf(&qc)
	}
	if n.q, err = NewQuota(qc); err != nil {
		tb.Fatal(err)
	}
	n.ev = n.q.Events(n.events)
	n.hist = &fakeHistory{}
	if n.dh, err = devicehist.New(sys.Root, devicehist.Config{Shards: 2, Secret: secrets.FromBytes([]byte("rpc test")), Logger: quietLog}); err != nil {
		tb.Fatal(err)
	}
	owner := &checks.OwnerParts{Quota: n.local, Events: n.ev, History: n.hist}
	var mirror MirrorHistory
	if realHist {
		owner.History, mirror = n.dh, n.dh
		n.q.SetMirror(n.dh)
	}
	n.q.SetOwner(owner)
	n.limits = iplimit.New(sys.Root, iplimit.Config{Shards: 2, Shared: true})
	n.addrs = NewAddrTotals(0)
	n.rep = &AddrReporter{Limits: n.limits, Totals: n.addrs, Owners: n.owners.(Cluster), Peers: n.q, Now: func() time.Time { return testNow }, Log: quietLog, Idle: -1}
	n.mover = NewHistoryMover(HistoryConfig{Local: n.dh, Owners: n.owners, Peers: n.q, Now: func() time.Time { return testNow }, Log: quietLog})
	s, err := NewServer(ServerConfig{History: n.mover, Quota: n.local, Owners: n.owners, Shares: n.db, Adopted: shared.Returned, Windows: n.windows, Traffic: n.feed, Now: func() time.Time { return testNow }, Leases: n.q, Discounts: n.q, Events: n.events,
		Addrs: n.addrs, AddrOwners: n.owners.(Cluster), Owner: owner, Devices: n.hist, Store: n.events, Mirror: mirror, Recent: n.events})
	if err != nil {
		tb.Fatal(err)
	}
	// As clusterserve.StartRPC: attached before serving.
	shared.Attach(n.q)
	n.srv = grpc.NewServer()
	s.Register(n.srv)
	n.server = s
	go n.srv.Serve(l)
	tb.Cleanup(n.close)
	return n
}

// settledNodes starts a member for each id under a root of the test's own
// (conf, when set, changes each routing client's configuration) and waits
// until they settle on the assignment.
func settledNodes(tb testing.TB, conf func(*QuotaConfig), ids ...string) []*node {
	tb.Helper()
	root := testRoot(tb)
	nodes := make([]*node, len(ids))
	for i, id := range ids {
		nodes[i] = startNodeWith(tb, root, id, nil, conf)
	}
	settle(tb, nodes, ids)
	return nodes
}

// halt stops the balancer and the membership's renewals without revoking
// the lease: what a SIGSTOP looks like to the others. The gRPC server and
// the quota actors keep running, as in a process that resumes.
func (n *node) halt() {
	n.stop()
	<-n.done
	n.m.Close()
}

func (n *node) close() {
	n.q.Close()
	n.srv.Stop()
	select {
	case <-n.done:
	default:
		n.halt()
	}
	n.local.Stop()
	n.events.Stop()
	n.limits.Stop()
	n.dh.Stop()
	n.db.Close()
}

// settle waits until every node's view matches the rendezvous assignment
// of the account shards over ids and every node holds its own claims.
func settle(tb testing.TB, nodes []*node, ids []string) {
	tb.Helper()
	settleKind(tb, nodes, ids, cluster.KindAccount)
}

// settleKind is settle for the shards of kind k.
func settleKind(tb testing.TB, nodes []*node, ids []string, k cluster.Kind) {
	tb.Helper()
	want := cluster.Assign(k, ids)
	eventually(tb, "the nodes settle on the "+string(k)+" assignment", func() bool {
		for _, n := range nodes {
			got := n.view.Owners(k)
			if len(got) != len(want) {
				return false
			}
			for s, o := range want {
				if got[s] != o {
					return false
				}
			}
		}
		for _, n := range nodes {
			mine := 0
			for _, o := range want {
				if o == n.id {
					mine++
				}
			}
			if n.bal.Owned(k) != mine {
				return false
			}
		}
		return true
	})
}

// eventually polls cond every 10 ms until it holds or 15 s pass.
func eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("after 15s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// accountOwnedBy finds an account whose shard the assignment over ids
// gives to owner, and (optionally) over a second member set to a second
// owner: pairs of owner, ids.
func accountOwnedBy(rules ...any) string {
	for i := 0; ; i++ {
		a := fmt.Sprintf("acct_%d", i)
		s := cluster.ShardOf(cluster.KindAccount, a)
		ok := true
		for r := 0; r+1 < len(rules); r += 2 {
			ok = ok && cluster.Owner(cluster.KindAccount, s, rules[r+1].([]string)) == rules[r].(string)
		}
		if ok {
			return a
		}
	}
}
