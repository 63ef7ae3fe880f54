package iplimit

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/actors"
)

// ownerSum is a two-node owner written out: the others' part of each
// count is the other node's total in the window (cluster/rpc does this for
// N nodes).
func ownerSum(other []Count) []Sum {
	var out []Sum
	for _, c := range other {
		out = append(out, Sum{Key: c.Key, Start: c.Start, Others: c.N})
	}
	return out
}

// TestSharedLimitSumsNodes: two nodes share Sample's 30 a minute for one
// address once they have exchanged their counts.
func TestSharedLimitSumsNodes(t *testing.T) {
	a, b := newLimiter(0, true), newLimiter(0, true)
	now := t0
	for range 20 {
		if !a.take(Of(Sample), v4, now).Allowed {
			t.Fatal("node a refused within the limit")
		}
	}
	fromA := a.export(nil)
	if len(fromA) != 1 || fromA[0].N != 20 || fromA[0].Key.Kind != Sample || fromA[0].Start != now.UnixNano() {
		t.Fatalf("node a exported %+v, want 20 under sample", fromA)
	}
	if again := a.export(nil); len(again) != 0 {
		t.Fatalf("a second export repeats %+v", again)
	}
	b.absorb(ownerSum(fromA), nil, now.UnixNano())
	for i := range 10 {
		if !b.take(Of(Sample), v4, now).Allowed {
			t.Fatalf("node b refused its request %d of the 10 left", i+1)
		}
	}
	if v := b.take(Of(Sample), v4, now); v.Allowed || v.Kind != Sample || v.RetryAfter != 60 {
		t.Fatalf("node b past the shared limit: %+v", v)
	}
	a.absorb(ownerSum(b.export(nil)), nil, now.UnixNano())
	if a.take(Of(Sample), v4, now).Allowed {
		t.Fatal("node a admits past the shared limit once it knows b's 10")
	}
	// The window ends on both: the others' counts go with it.
	later := now.Add(time.Minute + time.Second)
	if !a.take(Of(Sample), v4, later).Allowed || !b.take(Of(Sample), v4, later).Allowed {
		t.Fatal("a new window still carries the old one's counts")
	}
}

// TestSharedOthersStartAWindow: a node that has counted nothing for an
// address takes the owner's sum as a window of its own, at the owner's start.
func TestSharedOthersStartAWindow(t *testing.T) {
	l := newLimiter(0, true)
	k, _, _ := addrKeys(v4)
	k.kind = Sample
	start := t0.UnixNano()
	l.absorb([]Sum{{Key: keyOf(k), Start: start, Others: 30}}, nil, t0.Add(10*time.Second).UnixNano())
	if v := l.take(Of(Sample), v4, t0.Add(10*time.Second)); v.Allowed || v.RetryAfter != 50 {
		t.Fatalf("the others' full window: %+v, want refused for 50 s", v)
	}
	// A sum for an ended window, or an unknown limiter, changes nothing.
	l2 := newLimiter(0, true)
	l2.absorb([]Sum{{Key: keyOf(k), Start: start, Others: 30}, {Key: Key{Kind: NumKinds}, Start: start, Others: 9}}, nil, t0.Add(2*time.Minute).UnixNano())
	if l2.t.Len() != 0 {
		t.Fatalf("an ended or unknown window was kept: %d counters", l2.t.Len())
	}
}

// TestSharedLockout: invalid credentials are reported as counted; a lock the
// owner set refuses here (for IPv6, for every address of the /64).
func TestSharedLockout(t *testing.T) {
	l := newLimiter(0, true)
	for range 5 {
		l.fail(AuthFail, v4, t0)
	}
	got := l.export(nil)
	if len(got) != 1 || got[0].Key.Kind != AuthFail || got[0].N != 5 {
		t.Fatalf("exported %+v, want 5 invalid credentials", got)
	}
	// The others' 14 and this node's 6th reach 20: locked here.
	l.absorb([]Sum{{Key: got[0].Key, Start: got[0].Start, Others: 14}}, nil, t0.UnixNano())
	if !l.fail(AuthFail, v4, t0) {
		t.Fatal("the 20th invalid credential over both nodes did not lock")
	}

	v6 := newLimiter(0, true)
	hi := be64(v6a.AsSlice()[:8])
	until := t0.Add(10 * time.Minute).UnixNano()
	v6.absorb(nil, []Lock{{Hi: hi, P64: true, Until: until}, {Hi: 1, Lo: 2, Until: t0.UnixNano()}}, t0.UnixNano())
	if v := v6.take(Of(AuthFail, Protect), v6n(77), t0); v.Allowed || v.Kind != AuthFail || v.RetryAfter != 600 {
		t.Fatalf("an address of the locked /64: %+v", v)
	}
	if v6.held() != 1 {
		t.Fatalf("a lock that has already ended was kept: %d entries", v6.held())
	}
	// An earlier end does not shorten a lock.
	v6.absorb(nil, []Lock{{Hi: hi, P64: true, Until: t0.Add(time.Minute).UnixNano()}}, t0.UnixNano())
	if v := v6.take(Of(AuthFail), v6a, t0); v.RetryAfter != 600 {
		t.Fatalf("a shorter lock replaced the longer: %+v", v)
	}
}

// TestSingleNodeExportsNothing: a limiter that is not shared keeps no
// pending counts.
func TestSingleNodeExportsNothing(t *testing.T) {
	l := newLimiter(0, false)
	l.take(Of(Sample, Protect), v4, t0)
	l.fail(AuthFail, v4, t0)
	if got := l.export(nil); len(got) != 0 {
		t.Fatalf("exported %+v", got)
	}
}

func TestKeyLimitAndRoute(t *testing.T) {
	for _, tc := range []struct {
		k   Key
		ok  bool
		lim int64
	}{
		{Key{Kind: Sample}, true, 30},
		{Key{Kind: LookupFree, Win: 1, Hi: 5, P64: true}, true, 480},
		{Key{Kind: LookupFree, Win: 2}, false, 0},
		{Key{Kind: Sample, Hi: 5, P64: true}, false, 0},               // no /64 figure
		{Key{Kind: Collect, Hi: 5, Lo: 1, P64: true}, false, 0},       // a /64 carries no host part
		{Key{Kind: Collect, Lo: 0xffff<<32 | 1, P64: true}, false, 0}, // an IPv4 address has no /64
		{Key{Kind: NumKinds}, false, 0},
	} {
		_, lim, _, err := tc.k.Limit()
		if (err == nil) != tc.ok || lim != tc.lim || (err != nil && !errors.Is(err, ErrBadKey)) {
			t.Errorf("%+v: limit %d, %v", tc.k, lim, err)
		}
	}
	for _, a := range []netip.Addr{v4, v6a, v6n(9), netip.MustParseAddr("::ffff:198.51.100.7")} {
		k, k64, v6 := addrKeys(a)
		if got := Mix64Of(keyOf(k)); got != shardHash(a) {
			t.Errorf("%v routes apart from its shard", a)
		}
		if v6 && Mix64Of(keyOf(k64)) != shardHash(a) {
			t.Errorf("%v's /64 routes apart from its shard", a)
		}
	}
}

// TestClientExportAbsorb: the same through the shard actors.
func TestClientExportAbsorb(t *testing.T) {
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	c := New(sys.Root, Config{Shards: 4, Shared: true})
	defer c.Stop()
	for range 25 {
		if v, err := c.Take(Of(Sample), v4, t0); err != nil || !v.Allowed {
			t.Fatalf("take: %+v %v", v, err)
		}
	}
	got, err := c.Export()
	if err != nil || len(got) != 1 || got[0].N != 25 {
		t.Fatalf("export: %+v %v", got, err)
	}
	c.Absorb([]Sum{{Key: got[0].Key, Start: got[0].Start, Others: 5}}, nil, t0)
	if v, err := c.Take(Of(Sample), v4, t0); err != nil || v.Allowed {
		t.Fatalf("after the others' 5: %+v %v", v, err)
	}
	c.Absorb(nil, []Lock{{Hi: got[0].Key.Hi, Lo: got[0].Key.Lo, Until: t0.Add(time.Minute).UnixNano()}}, t0)
	if v, err := c.Check(v4, t0); err != nil || v.Allowed || v.Kind != AuthFail {
		t.Fatalf("after the owner's lock: %+v %v", v, err)
	}
}

// Mix64Of is the shard hash a key routes by.
func Mix64Of(k Key) uint64 { return actors.Mix64(k.Route()) }
