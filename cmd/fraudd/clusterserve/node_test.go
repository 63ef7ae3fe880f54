package clusterserve

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cockroachdb/pebble/v2/vfs"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/cluster"
	"github.com/fraudd/fraudd/storage"
)

// TestLeaveClaimsNothingBack: a node leaving gracefully hands its shards
// over and claims none of them again on the way out. While it is still a
// member the assignment names it for those shards, so a balancer pass
// running alongside the hand-over would take each back as soon as it was
// released, charge it until the lease went, and leave a share the next
// owner can no longer read.
func TestLeaveClaimsNothingBack(t *testing.T) {
	name := clusterName(t)
	a := mustStart(t, name, "a", vfs.NewMem())
	b := mustStart(t, name, "b", vfs.NewMem())
	within(t, 20*time.Second, "both nodes own their shards", func() bool {
		na, nb := a.node.Balancer().Owned(cluster.KindAccount), b.node.Balancer().Owned(cluster.KindAccount)
		return na > 0 && nb > 0 && na+nb == cluster.Shards(cluster.KindAccount)
	})
	cli := b.node.Client()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rev, err := cli.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	w := cli.Watch(ctx, b.node.Root()+"owners/"+string(cluster.KindAccount)+"/", clientv3.WithPrefix(), clientv3.WithRev(rev.Header.Revision+1))
	lctx, lcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer lcancel()
	if err := a.node.Leave(lctx); err != nil {
		t.Fatal(err)
	}
	end, err := cli.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	// The last owner event may come before end's revision (b claims each
	// shard while a is still leaving): a progress notification tells the
	// watch it has seen everything up to end.
	if err := cli.RequestProgress(ctx); err != nil {
		t.Fatal(err)
	}
	claimed := 0
	for wr := range w {
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypePut && string(ev.Kv.Value) == "a" {
				claimed++
			}
		}
		if wr.Header.Revision >= end.Header.Revision || wr.Err() != nil {
			break
		}
	}
	if claimed != 0 {
		t.Fatalf("the leaving node claimed %d shards again while it handed its shards over", claimed)
	}
	// a handed its shares over: the others no longer wait for them from
	// a (a load notes a node that may hold a share and is away as missing).
	if ids := b.node.Member().KnownIDs(); len(ids) != 1 || ids[0] != "b" {
		within(t, 5*time.Second, "only b may hold a share", func() bool {
			ids := b.node.Member().KnownIDs()
			return len(ids) == 1 && ids[0] == "b"
		})
	}
	within(t, 20*time.Second, "b owns every shard", func() bool {
		return b.node.Balancer().Owned(cluster.KindAccount) == cluster.Shards(cluster.KindAccount)
	})
}

// TestSecretCheck: the first node's master-secret check is recorded in
// etcd; a node with the same secret passes, one with another secret is
// refused with ErrSecretMismatch and changes nothing.
func TestSecretCheck(t *testing.T) {
	n := mustStart(t, clusterName(t), "a", vfs.NewMem())
	cli := n.node.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	root := n.node.Root() + "secret-test/"
	if err := SecretCheck(ctx, cli, root, "c", []byte("one")); err != nil {
		t.Fatalf("first node: %v", err)
	}
	if err := SecretCheck(ctx, cli, root, "c", []byte("one")); err != nil {
		t.Fatalf("same secret: %v", err)
	}
	if err := SecretCheck(ctx, cli, root, "c", []byte("two")); !errors.Is(err, ErrSecretMismatch) || !strings.Contains(err.Error(), "--secret/FRAUDD_SECRET") {
		t.Fatalf("another secret: %v", err)
	}
	if err := SecretCheck(ctx, cli, root, "c", []byte("one")); err != nil {
		t.Fatalf("the first secret after a refusal: %v", err)
	}
}

// stuckStore is a quota store whose writes hang until release closes: a
// disk that stopped answering.
type stuckStore struct{ release chan struct{} }

func (s stuckStore) LoadUsage(string, storage.Month) (storage.MonthCounts, storage.Totals, error) {
	return storage.MonthCounts{}, storage.Totals{}, nil
}

func (s stuckStore) ApplyUsage([]storage.UsageDelta) error {
	<-s.release
	return nil
}

// TestLeaveKeepsItsDeadline: a graceful leave whose steps cannot finish
// (the quota store hangs, so no account shard can be released) ends by
// its context's deadline, not after a wait per shard: the shards it did
// not hand over go with its lease.
func TestLeaveKeepsItsDeadline(t *testing.T) {
	name := clusterName(t)
	a := mustStart(t, name, "a", vfs.NewMem())
	b := mustStart(t, name, "b", vfs.NewMem())
	within(t, 20*time.Second, "both nodes own their shards", func() bool {
		na, nb := a.node.Balancer().Owned(cluster.KindAccount), b.node.Balancer().Owned(cluster.KindAccount)
		return na > 0 && nb > 0 && na+nb == cluster.Shards(cluster.KindAccount)
	})
	st := stuckStore{release: make(chan struct{})}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	q := quota.New(sys.Root, quota.Config{Shards: 1, Store: st, Timeout: 20 * time.Second})
	defer func() { close(st.release); q.Stop() }()
	now := time.Now()
	go q.Charge(quota.Charge{Account: "acct", Kind: quota.Evaluate, Monthly: true, Now: now,
		Limits: quota.LimitsFor(quota.PlanCustom, nil, nil, now, now)})
	time.Sleep(100 * time.Millisecond) // the charge's increment is queued
	a.node.quota.Store(q)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	left := make(chan error, 1)
	start := time.Now()
	go func() { left <- a.node.Leave(ctx) }()
	select {
	case err := <-left:
		if err == nil {
			t.Fatal("a leave that handed no account shard over reported no error")
		}
		if took := time.Since(start); took > 4*time.Second {
			t.Fatalf("the leave took %v with a 2s deadline", took)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the leave still runs 10s into a 2s deadline")
	}
	within(t, 20*time.Second, "b owns every shard", func() bool {
		return b.node.Balancer().Owned(cluster.KindAccount) == cluster.Shards(cluster.KindAccount)
	})
}
