package rpc

import (
	"net/netip"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/actors/iplimit"
)

// TestAdminFailStaysEachMembersOwn: wrong operator tokens count toward
// the operator's own lockout (AdminFail), "not shared among cluster
// members", and never lock the address out of /v1/* and /oauth/token
// (AuthFail). In cluster mode the node's report and the owner's answer
// must keep it so.
// TestAdminFailStaysEachMembersOwn: the operator lockout is each member's
// own (iplimit.Rules: AdminFail is Local). Reported to the address's owner,
// twenty wrong operator tokens came back as a lock with no kind, read as
// the customer API's lockout: the address was refused on /v1/* and
// /oauth/token on every node. An owner also leaves out such counts from a
// member of an older build that still reports them.
func TestAdminFailStaysEachMembersOwn(t *testing.T) {
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	node := iplimit.New(sys.Root, iplimit.Config{Shards: 2, Shared: true})
	defer node.Stop()
	owner := NewAddrTotals(0)
	addr := netip.MustParseAddr("198.51.100.77")
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	for i := 0; i < 20; i++ {
		node.Fail(iplimit.AdminFail, addr, now)
	}
	if v, _ := node.Take(iplimit.Of(iplimit.AuthFail), addr, now); !v.Allowed {
		t.Fatalf("single node: AuthFail locked by admin failures: %+v", v)
	}
	counts, err := node.Export()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range counts {
		if c.Key.Kind == iplimit.AdminFail {
			t.Errorf("AdminFail count exported to the owner (said not to be shared): %+v", c)
		}
	}
	// An older member's report, which still carries them.
	counts = append(counts, iplimit.Count{Key: iplimit.Key{Lo: 0xffff_c633_644d, Kind: iplimit.AdminFail}, Start: now.UnixNano(), N: 20})
	sums := owner.Add("n1", now.UnixNano(), counts)
	locks := owner.Locks(now.UnixNano())
	node.Absorb(sums, locks, now)
	v, err := node.Take(iplimit.Of(iplimit.AuthFail), addr, now.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if !v.Allowed {
		t.Errorf("20 wrong operator tokens locked the address out of /v1/* and /oauth/token (AuthFail) after one cluster report: %+v, owner locks %+v", v, locks)
	}
}
