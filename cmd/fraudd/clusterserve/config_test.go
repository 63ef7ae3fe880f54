package clusterserve

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cockroachdb/pebble/v2/vfs"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/cluster"
	"github.com/fraudd/fraudd/cluster/embedetcd"
	"github.com/fraudd/fraudd/internal/clock"
	"github.com/fraudd/fraudd/internal/secrets"
	"github.com/fraudd/fraudd/storage"
)

// The etcd member the tests share; each test works under a cluster name of
// its own.
var (
	sharedEtcd = embedetcd.Shared{Config: embedetcd.Config{NoFsync: true}}
	names      atomic.Int64
)

func TestMain(m *testing.M) {
	code := m.Run()
	sharedEtcd.Stop()
	os.Exit(code)
}

func etcd(t *testing.T) []string {
	t.Helper()
	return sharedEtcd.Endpoints(t)
}

// testNode is one node: its membership, its accounts service over its own
// Pebble, and the configuration sync between them.
type testNode struct {
	node  *Node
	sync  *ConfigSync
	accts *accounts.Service
	db    *storage.DB
}

func clusterName(t *testing.T) string {
	return fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), names.Add(1))
}

// startNode starts a node; fs holds its Pebble (a restart passes the same).
func startNode(t *testing.T, name, id string, fs vfs.FS) (*testNode, error) {
	t.Helper()
	n, err := Start(context.Background(), Config{Name: name, Endpoints: etcd(t), NodeID: id, Advertise: "127.0.0.1:1", LeaseTTL: 3 * time.Second})
	if err != nil {
		return nil, err
	}
	db, err := storage.Open("d", storage.Options{FS: fs})
	if err != nil {
		n.Close()
		return nil, err
	}
	cs, err := n.NewConfigSync()
	if err != nil {
		t.Fatal(err)
	}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}))
	accts, err := accounts.Start(sys.Root, accounts.Config{DB: db, Master: secrets.FromBytes([]byte("unit")), Clock: clock.Real{}, Shared: cs})
	if err != nil {
		t.Fatal(err)
	}
	tn := &testNode{node: n, sync: cs, accts: accts, db: db}
	if err := cs.Start(context.Background(), accts); err != nil {
		tn.stop()
		return nil, err
	}
	return tn, nil
}

func (tn *testNode) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = tn.node.Leave(ctx)
	tn.accts.Stop()
	tn.db.Close()
}

func mustStart(t *testing.T, name, id string, fs vfs.FS) *testNode {
	t.Helper()
	tn, err := startNode(t, name, id, fs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tn.stop)
	return tn
}

// within polls cond every 5 ms until it holds or d passes.
func within(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestConfigPropagatesBetweenNodes(t *testing.T) {
	name := clusterName(t)
	a := mustStart(t, name, "a", vfs.NewMem())
	b := mustStart(t, name, "b", vfs.NewMem())

	c, err := a.accts.Create(accounts.NewAccount{Email: "ops@example.com", Plan: "free"})
	if err != nil {
		t.Fatal(err)
	}
	// Read-your-write: the creating node answers with it installed.
	if c.View == nil || a.accts.Get(c.View.ID) == nil {
		t.Fatal("create answered before this node installed the account")
	}
	id := c.View.ID
	within(t, time.Second, "the account reaches node b", func() bool {
		_, ok := b.accts.Authenticate(c.LiveKey, time.Now())
		return ok
	})
	if got, err := b.db.GetAccount(id); err != nil || got.Live.Hash != c.View.Live.Hash {
		t.Fatalf("node b's Pebble: %+v %v", got, err)
	}
	if _, err := b.accts.Create(accounts.NewAccount{Email: "OPS@example.com", Plan: "free"}); !errors.Is(err, accounts.ErrExists) {
		t.Fatalf("a taken email on another node: %v", err)
	}

	// etcd holds Pebble's records byte for byte, and never a clear key.
	resp, err := a.node.Client().Get(context.Background(), a.node.Root(), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		for _, secret := range []string{c.LiveKey, c.TestKey, c.WebhookSecret} {
			if strings.Contains(string(kv.Value), secret) || strings.Contains(string(kv.Value), secret[8:]) {
				t.Fatalf("etcd key %s holds a secret in clear", kv.Key)
			}
		}
		if strings.HasSuffix(string(kv.Key), "config/account/"+id) {
			if want := storage.MarshalAccount(nil, &a.accts.Get(id).Account); string(kv.Value) != string(want) {
				t.Fatal("etcd's account record differs from the one Pebble holds")
			}
		}
	}

	// A key rotated on b stops working on a within a second; rules set on
	// a reach b.
	rot, err := b.accts.RotateTest(id)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := b.accts.Authenticate(c.TestKey, time.Now()); ok {
		t.Fatal("rotated test key still works on the node that rotated it")
	}
	within(t, time.Second, "the old test key stops on node a", func() bool {
		_, old := a.accts.Authenticate(c.TestKey, time.Now())
		_, cur := a.accts.Authenticate(rot, time.Now())
		return !old && cur
	})
	if _, err := a.accts.SetRules(id, []accounts.Rule{{Signal: "vpn", Action: "block"}}); err != nil {
		t.Fatal(err)
	}
	within(t, time.Second, "rules reach node b", func() bool {
		v := b.accts.Get(id)
		return v != nil && len(v.Rules) == 1 && len(v.Policy.Rules) == 1
	})
	if r, _ := b.db.GetRules(id); len(r) != 1 {
		t.Fatalf("node b's Pebble rules: %v", r)
	}
	plan := "growth"
	if _, err := b.accts.Update(id, accounts.Patch{Plan: &plan, Allowlist: &[]string{"192.0.2.0/24"}}); err != nil {
		t.Fatal(err)
	}
	within(t, time.Second, "the patch reaches node a", func() bool {
		v := a.accts.Get(id)
		return v.Plan == "growth" && len(v.AllowPrefixes) == 1 && len(v.Rules) == 1
	})

	// A node started later (or again) receives everything, also in Pebble.
	fs := vfs.NewMem()
	late := mustStart(t, name, "c", fs)
	if v := late.accts.Get(id); v == nil || v.Plan != "growth" || len(v.Rules) != 1 {
		t.Fatalf("late node: %+v", v)
	}
}

func TestConfigConflictIsRefused(t *testing.T) {
	name := clusterName(t)
	a := mustStart(t, name, "a", vfs.NewMem())
	b := mustStart(t, name, "b", vfs.NewMem())
	c, err := a.accts.Create(accounts.NewAccount{Email: "x@example.com", Plan: "free"})
	if err != nil {
		t.Fatal(err)
	}
	id := c.View.ID
	within(t, time.Second, "the account reaches b", func() bool { return b.accts.Get(id) != nil })
	// b changes the account between a's read and a's write: a's write is
	// refused and nothing of it lands.
	a.sync.beforeWrite = func() {
		a.sync.beforeWrite = nil
		if _, err := b.accts.RotateLive(id); err != nil {
			t.Error(err)
		}
	}
	suspended := true
	if _, err := a.accts.Update(id, accounts.Patch{Suspended: &suspended}); !errors.Is(err, accounts.ErrConflict) {
		t.Fatalf("lost race: %v", err)
	}
	within(t, time.Second, "b's rotation reaches a", func() bool { return a.accts.Get(id).Live.Generation == 2 })
	if a.accts.Get(id).Suspended || b.accts.Get(id).Suspended {
		t.Fatal("the refused write landed")
	}
	// Read again and retried, it goes through.
	if v, err := a.accts.Update(id, accounts.Patch{Suspended: &suspended}); err != nil || !v.Suspended || v.Live.Generation != 2 {
		t.Fatalf("retry: %+v %v", v, err)
	}
}

func TestConfigDeletionsAndRereads(t *testing.T) {
	name := clusterName(t)
	a := mustStart(t, name, "a", vfs.NewMem())
	b := mustStart(t, name, "b", vfs.NewMem())
	keep, err := a.accts.Create(accounts.NewAccount{Email: "keep@example.com", Plan: "free"})
	if err != nil {
		t.Fatal(err)
	}
	drop, err := a.accts.Create(accounts.NewAccount{Email: "drop@example.com", Plan: "free"})
	if err != nil {
		t.Fatal(err)
	}
	within(t, time.Second, "both accounts reach b", func() bool {
		return b.accts.Get(keep.View.ID) != nil && b.accts.Get(drop.View.ID) != nil
	})
	// A deletion the watch delivers removes the account and its keys.
	cli := a.node.Client()
	if _, err := cli.Delete(context.Background(), a.sync.prefix+kindAccount+drop.View.ID); err != nil {
		t.Fatal(err)
	}
	within(t, time.Second, "the deletion reaches b", func() bool {
		_, ok := b.accts.Authenticate(drop.LiveKey, time.Now())
		return b.accts.Get(drop.View.ID) == nil && !ok
	})
	if _, err := b.db.GetAccount(drop.View.ID); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("deleted account still in b's Pebble: %v", err)
	}

	// A full re-read (what the store does after any watch error) drops
	// what the cluster no longer holds, even if no event said so: here an
	// account b holds that etcd never had.
	ghost := *b.accts.Get(keep.View.ID)
	ghost.Account.ID, ghost.Account.Email = "acc_ghost", "ghost@example.com"
	ghost.Account.Live.Hash[0] ^= 1
	ghost.Account.Test.Hash[0] ^= 1
	ghost.Account.PublishableKey = ""
	if err := b.accts.Install([]accounts.Records{{Account: &ghost.Account}}, nil); err != nil {
		t.Fatal(err)
	}
	if b.accts.Get("acc_ghost") == nil {
		t.Fatal("install")
	}
	b.sync.changed(true, nil)
	within(t, time.Second, "the re-read drops the ghost", func() bool { return b.accts.Get("acc_ghost") == nil })
	if b.accts.Get(keep.View.ID) == nil {
		t.Fatal("the re-read dropped an account the cluster holds")
	}
	if _, ok := b.accts.Authenticate(keep.LiveKey, time.Now()); !ok {
		t.Fatal("the re-read unbound a kept account's key")
	}
}

func TestConfigSeedsAnEmptyClusterAndRefusesForeignData(t *testing.T) {
	// A single node's data directory seeds a new cluster's configuration.
	fs := vfs.NewMem()
	db, err := storage.Open("d", storage.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	sys := actor.NewActorSystem()
	solo, err := accounts.Start(sys.Root, accounts.Config{DB: db, Master: secrets.FromBytes([]byte("unit"))})
	if err != nil {
		t.Fatal(err)
	}
	c, err := solo.Create(accounts.NewAccount{Email: "solo@example.com", Plan: "free"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := solo.SetPins(c.View.ID, []accounts.Pin{{IP: "192.0.2.1/32", Action: "allow"}}); err != nil {
		t.Fatal(err)
	}
	solo.Stop()
	db.Close()

	name := clusterName(t)
	a := mustStart(t, name, "a", fs)
	b := mustStart(t, name, "b", vfs.NewMem())
	if v := b.accts.Get(c.View.ID); v == nil || len(v.Pins) != 1 {
		t.Fatalf("seeded account on another node: %+v", v)
	}
	if _, ok := a.accts.Authenticate(c.LiveKey, time.Now()); !ok {
		t.Logf("view on a: %+v", a.accts.Get(c.View.ID))
		t.Fatal("the seeding node lost the account's key")
	}

	// A data directory with accounts this (non-empty) cluster does not
	// know stops the start.
	fs2 := vfs.NewMem()
	db2, err := storage.Open("d", storage.Options{FS: fs2})
	if err != nil {
		t.Fatal(err)
	}
	other, err := accounts.Start(sys.Root, accounts.Config{DB: db2, Master: secrets.FromBytes([]byte("unit"))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Create(accounts.NewAccount{Email: "other@example.com", Plan: "free"}); err != nil {
		t.Fatal(err)
	}
	other.Stop()
	db2.Close()
	if tn, err := startNode(t, name, "c", fs2); err == nil || !strings.Contains(err.Error(), "accounts the cluster does not know") {
		if tn != nil {
			tn.stop()
		}
		t.Fatalf("foreign data directory: %v", err)
	}
}

func TestStartRefusesUnreachableEtcd(t *testing.T) {
	_, err := Start(context.Background(), Config{Name: "x", Endpoints: []string{"127.0.0.1:1"}, NodeID: "a", Advertise: "127.0.0.1:1",
		LeaseTTL: 3 * time.Second, DialTimeout: 500 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("unreachable etcd: %v", err)
	}
}

// TestDownWhenTheLeaseLapses: a node that cannot renew its membership lease
// says so (serve adds it to /api/status's degraded list) once the lease's
// TTL has passed, not before.
func TestDownWhenTheLeaseLapses(t *testing.T) {
	dir := t.TempDir()
	srv, err := embedetcd.Start(context.Background(), embedetcd.Config{Dir: dir, NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	n, err := Start(context.Background(), Config{Name: clusterName(t), Endpoints: srv.Endpoints(), NodeID: "a", Advertise: "127.0.0.1:1",
		LeaseTTL: 2 * time.Second, DialTimeout: time.Second})
	if err != nil {
		srv.Close()
		t.Fatal(err)
	}
	if d := n.Down(); len(d) != 0 {
		t.Fatalf("a joined node reports %v", d)
	}
	// The last renewal may have been acknowledged just now: the lease is
	// vouched for until then + TTL.
	lost := time.Now()
	srv.Close()
	within(t, 5*time.Second, "the node reports its lost membership", func() bool {
		d := n.Down()
		return len(d) == 1 && d[0] == "cluster membership"
	})
	if time.Since(lost) < time.Second {
		t.Fatalf("membership reported lost %v after etcd went, before the lease could have run out", time.Since(lost))
	}
	closed := make(chan struct{})
	go func() { n.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hangs without etcd")
	}
}

// TestConfigWriteReturnsOnceInstalledHere: an admin write answers only
// once this node installed it, even when an install of an earlier change
// runs while the store has applied the write but not yet reported it
// (OnChange runs after the store's lock is released). Before, that install
// marked the store's revision applied without the write's keys, and a
// rotated key still worked on the node that rotated it.
func TestConfigWriteReturnsOnceInstalledHere(t *testing.T) {
	n, err := Start(context.Background(), Config{Name: clusterName(t), Endpoints: etcd(t), NodeID: "a", Advertise: "127.0.0.1:1", LeaseTTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	db, err := storage.Open("d", storage.Options{FS: vfs.NewMem()})
	if err != nil {
		n.Close()
		t.Fatal(err)
	}
	cs, err := n.NewConfigSync()
	if err != nil {
		t.Fatal(err)
	}
	// The store again, with an OnChange that holds back the report of one
	// key's change and meanwhile lets the install loop run, as the wake of
	// an earlier change would.
	var gate atomic.Pointer[string]
	cs.store, err = cluster.NewStore(cluster.StoreConfig[[]byte]{Client: n.cli, Prefix: cs.prefix, Codec: rawCodec,
		OnChange: func(full bool, keys []string) {
			if k := gate.Load(); k != nil && !full && slices.Contains(keys, *k) {
				gate.Store(nil)
				rev := cs.store.Revision()
				select {
				case cs.wake <- struct{}{}:
				default:
				}
				for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
					cs.amu.Lock()
					applied := cs.applied
					cs.amu.Unlock()
					if applied >= rev {
						break
					}
				}
			}
			cs.changed(full, keys)
		}})
	if err != nil {
		t.Fatal(err)
	}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}))
	accts, err := accounts.Start(sys.Root, accounts.Config{DB: db, Master: secrets.FromBytes([]byte("unit")), Clock: clock.Real{}, Shared: cs})
	if err != nil {
		t.Fatal(err)
	}
	tn := &testNode{node: n, sync: cs, accts: accts, db: db}
	if err := cs.Start(context.Background(), accts); err != nil {
		tn.stop()
		t.Fatal(err)
	}
	t.Cleanup(tn.stop)

	c, err := accts.Create(accounts.NewAccount{Email: "ryw@example.com", Plan: "free"})
	if err != nil {
		t.Fatal(err)
	}
	key := kindAccount + c.View.ID
	gate.Store(&key)
	rot, err := accts.RotateTest(c.View.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := accts.Authenticate(c.TestKey, time.Now()); ok {
		t.Fatal("the rotated test key still works on the node that rotated it, after the rotation answered")
	}
	if _, ok := accts.Authenticate(rot, time.Now()); !ok {
		t.Fatal("the new test key does not work on the node that rotated it")
	}
}

// TestConfigOldFormOriginsAreReadCanonical: an account record in etcd whose
// origins an older version stored as given (a default port, a Unicode host)
// is installed on every node in the form a browser's Origin carries, while
// each node's Pebble keeps etcd's bytes as they are.
func TestConfigOldFormOriginsAreReadCanonical(t *testing.T) {
	name := clusterName(t)
	a := mustStart(t, name, "a", vfs.NewMem())
	b := mustStart(t, name, "b", vfs.NewMem())
	c, err := a.accts.Create(accounts.NewAccount{Email: "old@example.com", Plan: "free"})
	if err != nil {
		t.Fatal(err)
	}
	id := c.View.ID
	old := a.accts.Get(id).Account
	old.Origins = []string{"https://shop.example:443", "https://bücher.example"}
	raw := storage.MarshalAccount(nil, &old)
	if _, err := a.node.Client().Put(context.Background(), a.sync.prefix+kindAccount+id, string(raw)); err != nil {
		t.Fatal(err)
	}
	want := []string{"https://shop.example", "https://xn--bcher-kva.example"}
	for _, n := range []*testNode{a, b, mustStart(t, name, "c", vfs.NewMem())} {
		within(t, time.Second, "the old-form record is installed", func() bool {
			v := n.accts.Get(id)
			return v != nil && slices.Equal(v.Account.Origins, old.Origins)
		})
		if got := n.accts.Get(id).Origins; !slices.Equal(got, want) {
			t.Fatalf("installed origins %q, want %q", got, want)
		}
		got, err := n.db.GetAccount(id)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(storage.MarshalAccount(nil, got), raw) {
			t.Fatalf("Pebble's copy differs from etcd's record: origins %q", got.Origins)
		}
	}
}
