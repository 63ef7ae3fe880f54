package cluster

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestMemberJoinWatchLeave(t *testing.T) {
	cli, root := newClient(t), testRoot(t)
	a := join(t, cli, root, "a", time.Second)
	defer a.Close()
	b := join(t, newClient(t), root, "b", time.Second)
	eventually(t, "a sees a and b", func() bool { return slices.Equal(a.MemberIDs(), []string{"a", "b"}) })
	if got := b.Members(); len(got) != 2 || got[0].ID != "a" || got[0].Addr != "127.0.0.1:1" || got[0].Proto != ProtocolVersion || got[0].Epoch != 1 {
		t.Fatalf("b sees %+v", got)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := Join(ctx, MemberConfig{Client: cli, Root: root, ID: "b", TTL: time.Second}); !errors.Is(err, ErrDuplicateID) {
		t.Fatalf("second process as b: %v, want ErrDuplicateID", err)
	}

	changed := a.Changed()
	if err := b.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("a was not told that b left")
	}
	eventually(t, "a sees only a", func() bool { return slices.Equal(a.MemberIDs(), []string{"a"}) })
}

func TestMemberConfigRefused(t *testing.T) {
	cli, root := newClient(t), testRoot(t)
	ctx := context.Background()
	for _, c := range []MemberConfig{
		{Root: root, ID: "a"},
		{Client: cli, ID: "a"},
		{Client: cli, Root: root},
		{Client: cli, Root: root, ID: "a", TTL: 500 * time.Millisecond},
		{Client: cli, Root: root, ID: "a", TTL: 1500 * time.Millisecond},
	} {
		if m, err := Join(ctx, c); err == nil {
			m.Close()
			t.Errorf("Join(%+v) accepted", c)
		}
	}
}

// TestMemberKeepsLeaseAlive: a member outlives its TTL several times over, and
// Held follows the renewals.
func TestMemberKeepsLeaseAlive(t *testing.T) {
	cli, root := newClient(t), testRoot(t)
	a := join(t, cli, root, "a", time.Second)
	defer a.Close()
	time.Sleep(3 * time.Second)
	if !a.Held(time.Now()) || a.Losses() != 0 || a.Epoch() != 1 {
		t.Fatalf("after 3 TTLs: held %v, losses %d, epoch %d", a.Held(time.Now()), a.Losses(), a.Epoch())
	}
	if a.Held(time.Now().Add(2 * time.Second)) {
		t.Fatal("Held 2 s ahead with a 1 s TTL")
	}
}

// TestFenceRefusesStaleOwner is the pause scenario of issue 15: a member
// stops renewing (as under SIGSTOP) until its lease expires, another member
// takes its shard, and the stale owner's fenced write is refused — by its
// own check, by etcd, and by a receiver holding a newer view. When it
// resumes, it registers again and can own shards again.
func TestFenceRefusesStaleOwner(t *testing.T) {
	cli, root := newClient(t), testRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := join(t, cli, root, "a", time.Second)
	defer a.Close()
	b := join(t, newClient(t), root, "b", time.Second)
	defer b.Close()
	view, err := NewOwnerView(newClient(t), root)
	if err != nil {
		t.Fatal(err)
	}
	if err := view.Start(ctx); err != nil {
		t.Fatal(err)
	}

	const shard = 7
	ca, err := a.Claim(ctx, KindAccount, shard)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := a.Claim(ctx, KindAccount, shard); err != nil || again != ca {
		t.Fatalf("claiming an owned shard again: %+v, %v; want %+v", again, err, ca)
	}
	if _, err := b.Claim(ctx, KindAccount, shard); !errors.Is(err, ErrOwned) {
		t.Fatalf("b claims a's shard: %v, want ErrOwned", err)
	}
	fenced := root + "fenced-test"
	if _, err := a.Fence(ctx, ca, clientv3.OpPut(fenced, "a-1")); err != nil {
		t.Fatalf("owner's fenced write: %v", err)
	}
	if err := view.Current(ctx, KindAccount, shard, ca.Token); err != nil {
		t.Fatalf("receiver refuses the owner's token: %v", err)
	}

	a.pause(true)
	eventually(t, "a's owner key expires", func() bool { _, _, ok := view.Owner(KindAccount, shard); return !ok })
	cb, err := b.Claim(ctx, KindAccount, shard)
	if err != nil {
		t.Fatal(err)
	}
	if cb.Token <= ca.Token {
		t.Fatalf("new token %d not above the stale %d", cb.Token, ca.Token)
	}

	if _, err := a.Fence(ctx, ca, clientv3.OpPut(fenced, "a-stale")); !errors.Is(err, ErrFenced) {
		t.Fatalf("stale owner's fenced write: %v, want ErrFenced", err)
	}
	// etcd's half alone: the token comparison refuses even a writer whose
	// local check would pass.
	resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(ownerKey(root, KindAccount, shard)), "=", ca.Token)).
		Then(clientv3.OpPut(fenced, "a-stale")).Commit()
	if err != nil || resp.Succeeded {
		t.Fatalf("etcd took a write under the stale token: %v, %v", resp, err)
	}
	if err := view.Current(ctx, KindAccount, shard, ca.Token); !errors.Is(err, ErrFenced) {
		t.Fatalf("receiver accepts the stale token: %v", err)
	}
	if err := view.Current(ctx, KindAccount, shard, cb.Token); err != nil {
		t.Fatalf("receiver refuses the new owner's token: %v", err)
	}
	if _, err := b.Fence(ctx, cb, clientv3.OpPut(fenced, "b-1")); err != nil {
		t.Fatalf("new owner's fenced write: %v", err)
	}
	got, err := cli.Get(ctx, fenced)
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "b-1" {
		t.Fatalf("fenced key holds %v (%v), want b-1", got.Kvs, err)
	}

	a.pause(false)
	eventually(t, "a registers again", func() bool { return a.Epoch() == 2 && a.Held(time.Now()) })
	if a.Losses() != 1 {
		t.Fatalf("losses %d, want 1", a.Losses())
	}
	if _, err := a.Claim(ctx, KindAccount, shard); !errors.Is(err, ErrOwned) {
		t.Fatalf("rejoined a claims b's shard: %v, want ErrOwned", err)
	}
	if _, err := a.Claim(ctx, KindAccount, shard+1); err != nil {
		t.Fatalf("rejoined a cannot own shards: %v", err)
	}
	eventually(t, "b sees a again", func() bool { return slices.Equal(b.MemberIDs(), []string{"a", "b"}) })
}

// TestReleaseHandsOver: a graceful release deletes the owner key under the
// fence, so the next owner claims at once with a larger token, and the old
// claim is fenced from then on.
func TestReleaseHandsOver(t *testing.T) {
	cli, root := newClient(t), testRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a := join(t, cli, root, "a", time.Second)
	defer a.Close()
	b := join(t, cli, root, "b", time.Second)
	defer b.Close()
	ca, err := a.Claim(ctx, KindAddr, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, ca); err != nil {
		t.Fatal(err)
	}
	cb, err := b.Claim(ctx, KindAddr, 3)
	if err != nil || cb.Token <= ca.Token {
		t.Fatalf("claim after release: %+v, %v", cb, err)
	}
	if err := a.Release(ctx, ca); !errors.Is(err, ErrFenced) {
		t.Fatalf("second release of a stale claim: %v, want ErrFenced", err)
	}
	if _, err := a.Claim(ctx, KindAddr, AddrShards); err == nil {
		t.Fatal("claimed a shard out of range")
	}
}

// TestMemberTakesOverItsPreviousRegistration: a node that stopped without
// revoking its lease (killed, or every node stopped at once and etcd lost
// its quorum before the leaves) starts again on its data dir and takes its
// own registration over at once instead of being refused until the old
// lease expires; the old lease goes, with the shards claimed under it. A
// process with the same id but another lease file is still refused.
func TestMemberTakesOverItsPreviousRegistration(t *testing.T) {
	cli, root := newClient(t), testRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	file := filepath.Join(t.TempDir(), "cluster-lease")
	cfg := MemberConfig{Client: cli, Root: root, ID: "a", Addr: "127.0.0.1:1", TTL: 30 * time.Second, LeaseFile: file}
	old, err := Join(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	oldLease := old.Lease()
	owner := ownerKey(root, KindAccount, 7)
	if _, err := cli.Put(ctx, owner, "a", clientv3.WithLease(oldLease)); err != nil {
		t.Fatal(err)
	}
	old.Close() // the process died: the lease runs on for its 30 s

	other := cfg
	other.LeaseFile = filepath.Join(t.TempDir(), "cluster-lease")
	if _, err := Join(ctx, other); !errors.Is(err, ErrDuplicateID) {
		t.Fatalf("another process as a: %v, want ErrDuplicateID", err)
	}

	start := time.Now()
	again, err := Join(ctx, cfg)
	if err != nil {
		t.Fatalf("restart on the same lease file: %v", err)
	}
	defer again.Close()
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("restart took %v", took)
	}
	if again.Lease() == oldLease {
		t.Fatal("restart kept the old lease")
	}
	ttl, err := cli.TimeToLive(ctx, oldLease)
	if err != nil {
		t.Fatal(err)
	}
	if ttl.TTL != -1 {
		t.Fatalf("old lease still alive: TTL %d", ttl.TTL)
	}
	if r, err := cli.Get(ctx, owner); err != nil || len(r.Kvs) != 0 {
		t.Fatalf("the shard claimed under the old lease: %v %v", r, err)
	}
	if r, err := cli.Get(ctx, membersPrefix(root)+"a"); err != nil || len(r.Kvs) != 1 || clientv3.LeaseID(r.Kvs[0].Lease) != again.Lease() {
		t.Fatalf("registration: %v %v", r, err)
	}
	// The new lease is what the file names now: a second restart takes
	// over this one.
	again.Close()
	third, err := Join(ctx, cfg)
	if err != nil {
		t.Fatalf("second restart: %v", err)
	}
	third.Close()
}
