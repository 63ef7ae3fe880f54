package embedetcd

import (
	"context"
	"net/url"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// TestJoinRunningCluster: a member started alone; a second joins it (added
// as a learner, started, promoted) and serves what the first wrote; it
// restarts on its data directory without joining again.
func TestJoinRunningCluster(t *testing.T) {
	ctx := context.Background()
	fast := Config{Tick: 10 * time.Millisecond, Election: 100 * time.Millisecond, NoFsync: true}
	ca := fast
	ca.Dir, ca.Name = t.TempDir(), "one"
	a, err := Start(ctx, ca)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	cli := client(t, a.Endpoints())
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	cb := fast
	cb.Dir, cb.Name, cb.Join = t.TempDir(), "two", a.Endpoints()
	b, err := Start(ctx, cb)
	if err != nil {
		t.Fatal(err)
	}
	list, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	voters := 0
	for _, m := range list.Members {
		if !m.IsLearner {
			voters++
		}
	}
	if len(list.Members) != 2 || voters != 2 {
		t.Fatalf("members after the join: %+v", list.Members)
	}
	got, err := client(t, b.Endpoints()).Get(ctx, "k")
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "v" {
		t.Fatalf("read through the new member: %+v %v", got, err)
	}
	// A restart on the data directory does not add it again.
	b.Close()
	b, err = Start(ctx, cb)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if list, err := cli.MemberList(ctx); err != nil || len(list.Members) != 2 {
		t.Fatalf("members after the restart: %+v %v", list, err)
	}
	// Joining with a peer URL another member has is refused.
	cc := fast
	cc.Dir, cc.Name, cc.Join, cc.PeerURL = t.TempDir(), "three", a.Endpoints(), "http://"+b.e.Config().ListenPeerUrls[0].Host
	if _, err := Start(ctx, cc); err == nil {
		t.Fatal("joined with a member's peer URL")
	}
}

func client(t *testing.T, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// TestJoinRestartPromotesLearner: a member that joined as a learner but
// stopped before its promotion (a kill, a SIGTERM or a failed promote
// during the join) restarts on its data directory as a learner. It must be
// promoted then: a learner refuses clients, so its node could never start.
func TestJoinRestartPromotesLearner(t *testing.T) {
	ctx := context.Background()
	fast := Config{Tick: 10 * time.Millisecond, Election: 100 * time.Millisecond, NoFsync: true}
	ca := fast
	ca.Dir, ca.Name = t.TempDir(), "one"
	a, err := Start(ctx, ca)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	cli := client(t, a.Endpoints())
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	// The first half of a join: added as a learner and started on a fresh
	// directory, then stopped before anything promoted it.
	cb := fast
	cb.Dir, cb.Name, cb.Join = t.TempDir(), "two", a.Endpoints()
	peer, err := urlOrLoopback("")
	if err != nil {
		t.Fatal(err)
	}
	client_, err := urlOrLoopback("")
	if err != nil {
		t.Fatal(err)
	}
	cb.PeerURL, cb.ClientURL = peer.String(), client_.String()
	initial, _, err := addLearner(ctx, cb.Join, cb.Name, cb.PeerURL)
	if err != nil {
		t.Fatal(err)
	}
	ec := embed.NewConfig()
	ec.Dir, ec.Name, ec.TickMs, ec.ElectionMs, ec.UnsafeNoFsync = cb.Dir, cb.Name, 10, 100, true
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{client_}, []url.URL{client_}
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	ec.InitialCluster, ec.ClusterState = initial, embed.ClusterStateFlagExisting
	e, err := embed.StartEtcd(ec)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !e.Server.IsLearner() || e.Server.AppliedIndex() < e.Server.CommittedIndex() || e.Server.AppliedIndex() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("learner did not catch up")
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.Close()

	b, err := Start(ctx, cb)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	list, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range list.Members {
		if m.IsLearner {
			t.Fatalf("member %q still a learner after its restart: %+v", m.Name, list.Members)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if got, err := client(t, b.Endpoints()).Get(rctx, "k"); err != nil || len(got.Kvs) != 1 {
		t.Fatalf("read through the restarted member: %+v %v", got, err)
	}
}
