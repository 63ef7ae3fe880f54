package rpc

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/fraudd/fraudd/actors/iplimit"
	"github.com/fraudd/fraudd/cluster"
)

func sampleKey(lo uint64) iplimit.Key {
	return iplimit.Key{Lo: 0xffff<<32 | lo, Kind: iplimit.Sample}
}

func authKey(lo uint64) iplimit.Key {
	return iplimit.Key{Lo: 0xffff<<32 | lo, Kind: iplimit.AuthFail}
}

// TestAddrTotalsSum: the owner answers each node the others' part of the
// window, and a node that stopped counting learns the others' changes in
// its next answer.
func TestAddrTotalsSum(t *testing.T) {
	a := NewAddrTotals(0)
	now := testNow.UnixNano()
	k := sampleKey(9)
	if got := a.Add("n1", now, []iplimit.Count{{Key: k, Start: now, N: 10}}); len(got) != 1 || got[0].Others != 0 || got[0].Start != now {
		t.Fatalf("first count answered %+v", got)
	}
	if got := a.Add("n2", now+1, []iplimit.Count{{Key: k, Start: now + 1, N: 7}}); len(got) != 1 || got[0].Others != 10 || got[0].Start != now {
		t.Fatalf("second node answered %+v, want 10 others in the first node's window", got)
	}
	// n1 counted nothing since: its answer still carries n2's 7, once.
	if got := a.Add("n1", now+2, nil); len(got) != 1 || got[0].Key != k || got[0].Others != 7 {
		t.Fatalf("the idle node's answer: %+v", got)
	}
	if got := a.Add("n1", now+3, nil); len(got) != 0 {
		t.Fatalf("an unchanged window answered again: %+v", got)
	}
	// Both counts in one report answer once, with the sum.
	if got := a.Add("n3", now+4, []iplimit.Count{{Key: k, Start: now, N: 1}, {Key: k, Start: now, N: 2}}); len(got) != 1 || got[0].Others != 17 {
		t.Fatalf("two counts of one key: %+v", got)
	}
	// The window ends: the next count starts a new one.
	later := now + int64(time.Minute) + 1
	if got := a.Add("n2", later, []iplimit.Count{{Key: k, Start: later, N: 1}}); len(got) != 1 || got[0].Others != 0 || got[0].Start != later {
		t.Fatalf("after the window: %+v", got)
	}
	a.Sweep(later + int64(time.Minute))
	if c, l := a.Len(); c != 0 || l != 0 {
		t.Fatalf("after the sweep: %d counts, %d locks", c, l)
	}
}

// TestAddrTotalsLock: invalid credentials counted on several nodes lock the
// address at the owner once they reach the figure together.
func TestAddrTotalsLock(t *testing.T) {
	a := NewAddrTotals(0)
	now := testNow.UnixNano()
	k := authKey(9)
	a.Add("n1", now, []iplimit.Count{{Key: k, Start: now, N: 7}})
	a.Add("n2", now, []iplimit.Count{{Key: k, Start: now, N: 7}})
	if l := a.Locks(now); len(l) != 0 {
		t.Fatalf("locked at 14: %+v", l)
	}
	a.Add("n3", now, []iplimit.Count{{Key: k, Start: now, N: 6}})
	l := a.Locks(now)
	if len(l) != 1 || l[0].Lo != k.Lo || l[0].Until != now+int64(15*time.Minute) {
		t.Fatalf("locks at 20: %+v", l)
	}
	if l := a.Locks(now + int64(15*time.Minute)); len(l) != 0 {
		t.Fatalf("a lock outlived its end: %+v", l)
	}
}

// TestAddrTotalsEndedWindowCounts: counts a node reports after their
// window ended (its last ones before a round) belong to no window of the
// owner's: another node's fresh window does not carry them.
func TestAddrTotalsEndedWindowCounts(t *testing.T) {
	a := NewAddrTotals(0)
	now := testNow.UnixNano()
	k := sampleKey(9)
	a.Add("n1", now, []iplimit.Count{{Key: k, Start: now, N: 1}})
	// n1's other 29 came in the window's last 100 ms; its report arrives
	// just after the window.
	later := now + int64(time.Minute) + int64(10*time.Millisecond)
	a.Add("n1", later, []iplimit.Count{{Key: k, Start: now, N: 29}})
	if got := a.Add("n2", later, []iplimit.Count{{Key: k, Start: later, N: 1}}); len(got) != 1 || got[0].Others != 0 {
		t.Fatalf("a fresh window at n2 answered %+v, want no others: n1's 29 were of the ended window", got)
	}
	// The same for the lockout: invalid credentials of an ended window lock nothing.
	ak := authKey(9)
	a.Add("n1", now, []iplimit.Count{{Key: ak, Start: now, N: 1}})
	late := now + int64(15*time.Minute) + int64(10*time.Millisecond)
	a.Add("n1", late, []iplimit.Count{{Key: ak, Start: now, N: 19}})
	a.Add("n2", late, []iplimit.Count{{Key: ak, Start: late, N: 1}})
	if l := a.Locks(late); len(l) != 0 {
		t.Fatalf("locked by 19 invalid credentials of an ended window and 1 of the next: %+v", l)
	}
}

// TestAddrTotalsBound: past its bound the owner keeps no new counter (the
// address stays each node's own) until windows end.
func TestAddrTotalsBound(t *testing.T) {
	a := NewAddrTotals(2)
	now := testNow.UnixNano()
	got := a.Add("n1", now, []iplimit.Count{{Key: sampleKey(1), Start: now, N: 1}, {Key: sampleKey(2), Start: now, N: 1}, {Key: sampleKey(3), Start: now, N: 1}})
	if len(got) != 2 {
		t.Fatalf("answered %d counts past a bound of 2", len(got))
	}
	later := now + int64(2*time.Minute)
	if got := a.Add("n1", later, []iplimit.Count{{Key: sampleKey(3), Start: later, N: 1}}); len(got) != 1 {
		t.Fatal("no room once the old windows ended")
	}
}

// TestAddrReportChecks: a malformed report or answer is refused whole.
func TestAddrReportChecks(t *testing.T) {
	good := reportMsg("n1", []iplimit.Count{{Key: sampleKey(1), Start: 5, N: 3}})
	if c, err := countsOf(good); err != nil || len(c) != 1 || c[0].N != 3 {
		t.Fatalf("a good report: %+v %v", c, err)
	}
	for name, bad := range map[string]*AddrReport{
		"no version":  {Node: "n1"},
		"no node":     {Version: version},
		"no key":      {Version: version, Node: "n1", Counts: []*AddrCount{{StartUnixNano: 1, N: 1}}},
		"bad kind":    {Version: version, Node: "n1", Counts: []*AddrCount{{Key: &AddrKey{Kind: 99}, StartUnixNano: 1, N: 1}}},
		"kind > 255":  {Version: version, Node: "n1", Counts: []*AddrCount{{Key: &AddrKey{Kind: 256 + uint32(iplimit.Sample)}, StartUnixNano: 1, N: 1}}},
		"zero count":  {Version: version, Node: "n1", Counts: []*AddrCount{{Key: keyMsg(sampleKey(1)), StartUnixNano: 1}}},
		"no start":    {Version: version, Node: "n1", Counts: []*AddrCount{{Key: keyMsg(sampleKey(1)), N: 1}}},
		"huge count":  {Version: version, Node: "n1", Counts: []*AddrCount{{Key: keyMsg(sampleKey(1)), StartUnixNano: 1, N: maxAddrN + 1}}},
		"/64 of ipv4": {Version: version, Node: "n1", Counts: []*AddrCount{{Key: &AddrKey{Lo: 0xffff<<32 | 1, Kind: uint32(iplimit.Collect), P64: true}, StartUnixNano: 1, N: 1}}},
	} {
		if _, err := countsOf(bad); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	now := testNow.UnixNano()
	ok := addrReply("n2", []iplimit.Sum{{Key: sampleKey(1), Start: now, Others: 4}}, []iplimit.Lock{{Lo: 1, Until: now + int64(15*time.Minute)}})
	if s, l, err := answerOf(ok, "n2", now); err != nil || len(s) != 1 || len(l) != 1 {
		t.Fatalf("a good answer: %+v %+v %v", s, l, err)
	}
	for name, bad := range map[string]*AddrReply{
		"another node":    addrReply("n3", nil, nil),
		"negative others": addrReply("n2", []iplimit.Sum{{Key: sampleKey(1), Others: -1}}, nil),
		"lock for good":   addrReply("n2", nil, []iplimit.Lock{{Lo: 1, Until: now + int64(time.Hour)}}),
	} {
		if _, _, err := answerOf(bad, "n2", now); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// FuzzAddrReport: whatever bytes a peer sends, checking a report never
// panics, and a report that passes converts back to the same message.
func FuzzAddrReport(f *testing.F) {
	for _, r := range []*AddrReport{
		reportMsg("n1", []iplimit.Count{{Key: sampleKey(1), Start: 5, N: 3}}),
		reportMsg("n2", []iplimit.Count{{Key: iplimit.Key{Hi: 7, Kind: iplimit.Collect, P64: true}, Start: 5, N: 3}, {Key: authKey(2), Start: 9, N: 1}}),
	} {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var r AddrReport
		if proto.Unmarshal(b, &r) != nil {
			return
		}
		c, err := countsOf(&r)
		if err != nil {
			return
		}
		back := reportMsg(r.Node, c)
		back.Version = r.Version
		r.ProtoReflect().SetUnknown(nil)
		for _, x := range r.Counts {
			x.ProtoReflect().SetUnknown(nil)
			x.Key.ProtoReflect().SetUnknown(nil)
		}
		if !proto.Equal(back, &r) {
			t.Fatalf("%v converts back to %v", &r, back)
		}
		a := NewAddrTotals(0)
		for _, s := range a.Add(r.Node, testNow.UnixNano(), c) {
			if s.Others != 0 {
				t.Fatalf("one node's report answered others: %+v", s)
			}
		}
	})
}

func roundAll(nodes []*node) {
	for _, n := range nodes {
		n.rep.Round(context.Background())
	}
}

// TestAddressLimitAcrossNodes: three nodes share an address's limits and
// its invalid-credential lockout through the address shard's owner.
func TestAddressLimitAcrossNodes(t *testing.T) {
	ids := []string{"a", "b", "c"}
	nodes := settledNodes(t, nil, ids...)
	settleKind(t, nodes, ids, cluster.KindAddr)
	addr := netip.MustParseAddr("203.0.113.9")
	for _, n := range nodes {
		// A third of Sample's 30 a minute on each node, each reporting
		// after its share: the last one knows the others' 20 at once.
		for i := range 10 {
			if v, err := n.limits.Take(iplimit.Of(iplimit.Sample), addr, testNow); err != nil || !v.Allowed {
				t.Fatalf("node %s request %d: %+v %v", n.id, i+1, v, err)
			}
		}
		n.rep.Round(context.Background())
	}
	// One more round: the first two learn the counts that came after theirs.
	roundAll(nodes)
	for _, n := range nodes {
		if v, err := n.limits.Take(iplimit.Of(iplimit.Sample), addr, testNow); err != nil || v.Allowed || v.Kind != iplimit.Sample {
			t.Fatalf("node %s past the address's 30 over the cluster: %+v %v", n.id, v, err)
		}
	}
	other := netip.MustParseAddr("203.0.113.10")
	if v, _ := nodes[0].limits.Take(iplimit.Of(iplimit.Sample), other, testNow); !v.Allowed {
		t.Fatal("another address was refused")
	}

	// Invalid credentials: 7 on each node lock the address everywhere.
	for _, n := range nodes {
		for range 7 {
			n.limits.Fail(iplimit.AuthFail, addr, testNow)
		}
	}
	roundAll(nodes)
	roundAll(nodes)
	for _, n := range nodes {
		if v, err := n.limits.Check(addr, testNow); err != nil || v.Allowed || v.Kind != iplimit.AuthFail {
			t.Fatalf("node %s after 21 invalid credentials over the cluster: %+v %v", n.id, v, err)
		}
	}
}

// TestAddrReporterIdle: a member this node has nothing to report to is
// asked once per Idle, one it has counts for every round.
func TestAddrReporterIdle(t *testing.T) {
	ids := []string{"a", "b", "c"}
	nodes := settledNodes(t, nil, ids...)
	settleKind(t, nodes, ids, cluster.KindAddr)
	a := nodes[0]
	a.rep.Idle = time.Hour
	a.rep.Round(context.Background())
	if got := a.rep.Asks(); got != 2 {
		t.Fatalf("the first round asked %d members, want the 2 others", got)
	}
	a.rep.Round(context.Background())
	if got := a.rep.Asks(); got != 2 {
		t.Fatalf("an idle round asked %d more", got-2)
	}
	// Counts for an address another member owns: that member is asked.
	var addr netip.Addr
	for i := 1; ; i++ {
		addr = netip.AddrFrom4([4]byte{198, 51, 100, byte(i)})
		k := iplimit.Key{Lo: 0xffff<<32 | uint64(198)<<24 | 51<<16 | 100<<8 | uint64(i)}
		if o, _ := a.owners.(Cluster).AddrOwner(AddrShard(k.Route())); o != "a" {
			break
		}
	}
	if _, err := a.limits.Take(iplimit.Of(iplimit.Sample), addr, testNow); err != nil {
		t.Fatal(err)
	}
	a.rep.Round(context.Background())
	if got := a.rep.Asks(); got != 3 {
		t.Fatalf("a round with counts for one member asked %d more, want 1", got-2)
	}
}
