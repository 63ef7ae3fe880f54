package rpc

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fraudd/fraudd/internal/secrets"
	"github.com/fraudd/fraudd/storage"

	"github.com/fraudd/fraudd/actors/checks"
	"github.com/fraudd/fraudd/actors/devicehist"
	"github.com/fraudd/fraudd/actors/events"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/intel/device"
)

// mirroredNodes starts a member for each id whose owner parts observe a
// real device history, mirrored by lease holders, and waits until they
// settle.
func mirroredNodes(tb testing.TB, conf func(*QuotaConfig), ids ...string) []*node {
	tb.Helper()
	root := testRoot(tb)
	nodes := make([]*node, len(ids))
	for i, id := range ids {
		nodes[i] = startNodeHist(tb, root, id, nil, conf, true)
	}
	settle(tb, nodes, ids)
	return nodes
}

// hotCharge is an evaluation's charge for a hot account with room to
// spare.
func hotCharge(acct string) quota.Charge {
	return quota.Charge{Account: acct, Kind: quota.Evaluate, Hourly: true, Monthly: true, Total: true, Now: testNow,
		Limits: quota.LimitsFor(quota.PlanCustom, limit(1e6), limit(1e7), testNow, testNow)}
}

// holdSlices charges c on each node until it has charged one from a slice
// of the account's allowance.
func holdSlices(t *testing.T, c quota.Charge, nodes ...*node) {
	t.Helper()
	for _, nd := range nodes {
		for i := 0; nd.q.LeasedCharges() == 0; i++ {
			if i == 1000 {
				t.Fatalf("%s: no charge served from a slice after %d", nd.id, i)
			}
			if _, err := nd.q.Charge(c); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// warmMirror runs eval(0), eval(1), … on nd, at least least times and
// until one evaluation was answered from nd's mirror.
func warmMirror(t *testing.T, nd *node, least int, eval func(i int)) {
	t.Helper()
	for i := 0; i < least || nd.q.MirrorHits() == 0; i++ {
		if i == 2000 {
			t.Fatalf("%s: no evaluation answered from the mirror after %d (misses %d)", nd.id, i, nd.q.MirrorMisses())
		}
		eval(i)
		time.Sleep(time.Millisecond)
	}
}

type mirrorEval struct {
	r               checks.OwnerResult
	hops, leased    int64
	hits, misses    int64
	answeredLocally bool
}

// evalOn evaluates one device event with an end-user account on nd.
func evalOn(t *testing.T, nd *node, c quota.Charge, id events.EventID, user string) mirrorEval {
	t.Helper()
	st := &ownerStep{c: c, out: make(chan checks.OwnerResult, 1), w: checks.OwnerWork{
		Resolve: &events.Resolve{ID: id, Account: c.Account, Now: testNow},
		Observe: &devicehist.Observation{Customer: c.Account, EventID: fmt.Sprintf("%x", id[:]), AccountID: user, Now: testNow},
	}}
	return runOn(t, nd, st)
}

// runOn runs st's charge and owner work on nd and reports what it took.
func runOn(t *testing.T, nd *node, st *ownerStep) mirrorEval {
	t.Helper()
	hops, leased, hits, misses := nd.q.RemoteCalls(), nd.q.LeasedCharges(), nd.q.MirrorHits(), nd.q.MirrorMisses()
	nd.q.ChargeThen(st)
	var r checks.OwnerResult
	select {
	case r = <-st.out:
	case <-time.After(10 * time.Second):
		t.Fatal("no answer in 10 s")
	}
	return mirrorEval{r: r, hops: nd.q.RemoteCalls() - hops, leased: nd.q.LeasedCharges() - leased,
		hits: nd.q.MirrorHits() - hits, misses: nd.q.MirrorMisses() - misses, answeredLocally: st.charged}
}

// mirroredPair is two mirrored nodes, a hot account owned by a and its
// evaluations' charge: b is the lease holder.
func mirroredPair(t *testing.T) (a, b *node, acct string, c quota.Charge) {
	t.Helper()
	ids := []string{"a", "b"}
	nodes := mirroredNodes(t, leasing(20), ids...)
	acct = accountOwnedBy("a", ids)
	return nodes[0], nodes[1], acct, hotCharge(acct)
}

// collectAt stores a device event of visitor for acct through nd's
// routing events (at the account's owner).
func collectAt(t *testing.T, nd *node, acct, visitor string) events.EventID {
	t.Helper()
	id, err := nd.ev.Collect(events.Collected{Account: acct, Now: testNow, Signals: []byte("{}"), Verdict: &device.Verdict{VisitorID: visitor, Complete: true}})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestLeasedEvaluationFromMirror: lease holders of a hot account answer its
// evaluations with an event stored at the owner from their mirror of the
// owner's history, with no round trip, once one evaluation of each record
// went to the owner; every observation is recorded once, at the owner, and
// the answers on every node count the others' observations.
func TestLeasedEvaluationFromMirror(t *testing.T) {
	ids := []string{"a", "b", "c"}
	nodes := mirroredNodes(t, leasing(20), ids...)
	a := nodes[0]
	acct := accountOwnedBy("a", ids)
	c := hotCharge(acct)
	holdSlices(t, c, nodes[1:]...)
	var evs []events.EventID
	for i := range 2 {
		evs = append(evs, collectAt(t, a, acct, fmt.Sprintf("visitor-%d", i)))
	}
	users := []string{"alice", "bob", "carol"}
	// Warm-up: each holder evaluates every (event, user) until one of
	// them is answered from its mirror.
	for _, nd := range nodes[1:] {
		warmMirror(t, nd, 6, func(i int) {
			e := evalOn(t, nd, c, evs[i%2], users[(i/2)%3])
			if !e.r.Charge.Allowed || e.r.EventErr != nil || e.r.HistErr != nil {
				t.Fatalf("%s warm-up %d: %+v", nd.id, i, e.r)
			}
		})
	}
	// Let the owner's records settle at the holders.
	time.Sleep(100 * time.Millisecond)
	mirrored := 0
	for i := 0; i < 60; i++ {
		nd := nodes[1+i%2]
		e := evalOn(t, nd, c, evs[i%2], users[i%3])
		r := e.r
		if !r.Charge.Allowed || e.r.EventErr != nil || r.HistErr != nil || !r.Resolved.Found || !r.Resolved.Replayed {
			t.Fatalf("%s evaluation %d: %+v", nd.id, i, r)
		}
		// Every node's answers count every node's observations: both
		// devices carry the three users, each user both devices.
		if !r.Facts.Device || r.Facts.LinkedAccounts != 3 || r.Facts.History.Visits != 1 || !r.Facts.Repeated || r.Facts.AccountDevices24h != 2 {
			t.Fatalf("%s evaluation %d (hops %d, from the mirror %d): facts %+v", nd.id, i, e.hops, e.hits, r.Facts)
		}
		if e.leased == 1 && e.hits == 1 {
			mirrored++
			if e.hops != 0 {
				t.Fatalf("%s evaluation %d: answered from the mirror with %d round trips", nd.id, i, e.hops)
			}
		}
		if e.answeredLocally {
			t.Fatalf("%s evaluation %d: the chain went on here", nd.id, i)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if mirrored == 0 {
		t.Fatal("no evaluation was answered from a mirror: the test proves nothing")
	}
	t.Logf("%d of 60 evaluations answered from a mirror with no round trip", mirrored)
	// A new end-user account on one holder: the owner's existence filter
	// says the owner has no record of it, so the holder answers from its
	// copy too, as a new account; the other holder's answers count it
	// once the owner's change reached it.
	b, c2 := nodes[1], nodes[2]
	if e := evalOn(t, b, c, evs[0], "dave"); e.r.Facts.LinkedAccounts != 4 || (e.leased == 1 && (e.hits != 1 || e.hops != 0)) {
		t.Fatalf("a new user on b: %+v", e)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		e := evalOn(t, c2, c, evs[0], "alice")
		if got := e.r.Facts.LinkedAccounts; got == 4 {
			break
		} else if got != 3 || time.Now().After(deadline) {
			t.Fatalf("c's answer after b saw a new user: %+v", e)
		}
		time.Sleep(time.Millisecond)
	}
	if e := evalOn(t, c2, c, evs[0], "alice"); e.r.Facts.LinkedAccounts != 4 || (e.leased == 1 && (e.hits != 1 || e.hops != 0)) {
		t.Fatalf("c's next answer: %+v", e)
	}
	// Everything was recorded at the owner, once: two devices, each with
	// one visit (the same event resubmitted counts once), with three users
	// and dave on the first.
	eventually(t, "the owner records every observation", func() bool {
		list, err := a.dh.Devices(acct, 10, testNow)
		if err != nil || len(list) != 2 {
			return false
		}
		for _, d := range list {
			want := 3
			if d.VisitorID == "visitor-0" {
				want = 4
			}
			if d.Visits != 1 || d.LinkedAccounts != want {
				return false
			}
		}
		return true
	})
	for _, nd := range nodes[1:] {
		if list, err := nd.dh.Devices(acct, 10, testNow); err != nil || len(list) != 0 {
			t.Fatalf("%s recorded the account's history itself: %+v %v", nd.id, list, err)
		}
	}
}

// TestMirrorDroppedWhenOwnerStops: a holder whose owner's stream ends
// drops its mirrors and goes to the owner again; nothing is answered from
// a copy nobody keeps current.
func TestMirrorDroppedWhenOwnerStops(t *testing.T) {
	a, b, acct, c := mirroredPair(t)
	holdSlices(t, c, b)
	id := collectAt(t, a, acct, "visitor")
	warmMirror(t, b, 0, func(int) { evalOn(t, b, c, id, "alice") })
	a.server.Drain() // the owner's streams end
	eventually(t, "the holder drops its mirror", func() bool {
		m := b.q.mirror.Load()
		m.mu.Lock()
		defer m.mu.Unlock()
		return len(m.subs) == 0
	})
	if e := evalOn(t, b, c, id, "alice"); e.hits != 0 {
		t.Fatalf("answered from a mirror after its stream ended: %+v", e)
	}
}

// TestLeasedEvaluationWithoutEventFromMirror: a leased evaluation with no
// device event (an accountId and an address) reads the holder's copy of
// the owner's records too, and its observation is recorded at the owner:
// the holders' answers count each other's accounts from one address, and
// neither keeps records of the account itself.
func TestLeasedEvaluationWithoutEventFromMirror(t *testing.T) {
	ids := []string{"a", "b", "c"}
	nodes := mirroredNodes(t, leasing(20), ids...)
	a := nodes[0]
	acct := accountOwnedBy("a", ids)
	c := hotCharge(acct)
	addr := netip.MustParseAddr("203.0.113.7")
	eval := func(nd *node, user string) mirrorEval {
		t.Helper()
		return runOn(t, nd, &ownerStep{c: c, out: make(chan checks.OwnerResult, 1), w: checks.OwnerWork{
			Observe: &devicehist.Observation{Customer: acct, AccountID: user, IP: addr, Now: testNow},
		}})
	}
	users := []string{"alice", "bob", "carol"}
	for _, nd := range nodes[1:] {
		warmMirror(t, nd, 3, func(i int) { eval(nd, users[i%3]) })
	}
	time.Sleep(100 * time.Millisecond)
	mirrored := 0
	for i := 0; i < 30; i++ {
		nd := nodes[1+i%2]
		e := eval(nd, users[i%3])
		if e.answeredLocally {
			continue // no slice in hand: charged at the owner, the chain goes on here
		}
		if !e.r.Charge.Allowed || e.r.HistErr != nil || !e.r.Facts.Account || !e.r.Facts.IPCounted || e.r.Facts.IPAccounts24h != 3 {
			t.Fatalf("%s evaluation %d: %+v", nd.id, i, e)
		}
		if e.leased == 1 && e.hits == 1 {
			mirrored++
		}
	}
	if mirrored == 0 {
		t.Fatal("no evaluation was answered from a mirror: the test proves nothing")
	}
	eventually(t, "the owner records the holders' observations", func() bool {
		f, err := a.dh.Observe(devicehist.Observation{Customer: acct, AccountID: "probe", IP: addr, Test: true, Now: testNow})
		return err == nil && f.IPAccounts24h == 4
	})
	for _, nd := range nodes[1:] {
		recs, err := nd.dh.Take(func(cust string) bool { return cust == acct }, testNow)
		if err != nil || len(recs) != 0 {
			t.Fatalf("%s kept records of the account itself: %d %v", nd.id, len(recs), err)
		}
	}
}

// noMirrorNode is an owner of a build before Mirror.
type noMirrorNode struct{ *Server }

func (noMirrorNode) Mirror(Node_MirrorServer) error {
	return status.Error(codes.Unimplemented, "unknown method Mirror for service fraudd.cluster.v1.Node")
}

// TestMirrorOldOwner: during a rolling deploy an owner that predates the
// Mirror answers Unimplemented: the holder keeps no mirror of its
// accounts (their leased evaluations go to it, as before) and does not
// ask it again until pipeRetryPlain has passed.
func TestMirrorOldOwner(t *testing.T) {
	_, q, _ := behindOwner(t, func(s *Server) NodeServer { return noMirrorNode{s} })
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quietLog }))
	dh, err := devicehist.New(sys.Root, devicehist.Config{Shards: 2, Secret: secrets.FromBytes([]byte("rpc test")), Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dh.Stop() })
	q.SetMirror(dh)
	m := q.mirror.Load()
	w := checks.OwnerWork{Resolve: &events.Resolve{Account: capped.Account, Now: testNow},
		Observe: &devicehist.Observation{Customer: capped.Account, AccountID: "alice", Now: testNow}}
	res := checks.OwnerResult{Charge: quota.ChargeResult{Allowed: true}, Resolved: events.Resolved{Found: true, Event: storage.DeviceEvent{VisitorID: "visitor"}}}
	q.seedMirror(capped.Account, w, &res)
	eventually(t, "the holder notes the owner has no Mirror", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.plain["a"].After(time.Now()) && len(m.subs) == 0 && len(m.streams) == 0
	})
	q.seedMirror(capped.Account, w, &res)
	m.mu.Lock()
	subs, streams := len(m.subs), len(m.streams)
	m.mu.Unlock()
	if subs != 0 || streams != 0 {
		t.Fatalf("asked the old owner again at once: %d mirrors, %d streams", subs, streams)
	}
	// Its leased evaluations go to the owner: the event is kept, but the
	// account is not mirrored.
	if sub := m.active(capped.Account); sub != nil {
		t.Fatalf("a mirror of an old owner's account: %+v", sub)
	}
}

// TestMirrorFrameKeepsLastOfWatchAndUnwatch: an account's watch and
// unwatch queued for one frame leave the one queued last, so the owner
// ends watching it or not as the holder last decided, whatever order it
// reads them in.
func TestMirrorFrameKeepsLastOfWatchAndUnwatch(t *testing.T) {
	m := &mirrors{q: &Quota{cfg: QuotaConfig{Owners: &fakeOwners{self: "b"}}}}
	st := &mirrorStream{m: m, wake: make(chan struct{}, 1), cancel: func() {}}
	st.unwatch("acc_1")
	st.watch(&MirrorWatch{Customer: "acc_1"})
	st.watch(&MirrorWatch{Customer: "acc_2"})
	st.unwatch("acc_2")
	st.unwatch("acc_2")
	u := st.take()
	// acc_1: unwatched, then watched: both, so that the owner (which
	// ends unwatches first) begins a new registration. acc_2: watched,
	// then unwatched: the unwatch alone, once.
	if len(u.Watches) != 1 || u.Watches[0].Customer != "acc_1" || !slices.Equal(u.Unwatch, []string{"acc_1", "acc_2"}) {
		t.Fatalf("frame: watches %v, unwatches %v", u.Watches, u.Unwatch)
	}
}

// TestLeasedFreshEventFromMirror: an event collected for a mirrored account
// (stored at the owner, whichever node collected it) is pushed to the
// holders with its device's record, so its first evaluation on a holder
// makes no round trip and is answered as the first use; the owner counts
// that use, and another holder's evaluation of it, once the first one's
// observation came back through the owner, is a replay.
func TestLeasedFreshEventFromMirror(t *testing.T) {
	ids := []string{"a", "b", "c"}
	nodes := mirroredNodes(t, leasing(20), ids...)
	a, b, c2 := nodes[0], nodes[1], nodes[2]
	acct := accountOwnedBy("a", ids)
	c := hotCharge(acct)
	holdSlices(t, c, nodes[1:]...)
	ev0, err := a.ev.Collect(events.Collected{Account: acct, Now: testNow, Signals: []byte("{}"), Verdict: &device.Verdict{VisitorID: "visitor-0", Complete: true}})
	if err != nil {
		t.Fatal(err)
	}
	for _, nd := range nodes[1:] {
		warmMirror(t, nd, 0, func(int) { evalOn(t, nd, c, ev0, "alice") })
	}
	// Collected on b and on a: both stored at a, both pushed.
	m := quota.Collect{Account: acct, Budget: quota.CollectBudget{Events: 100, Bytes: 1 << 20}, Bytes: 10, Now: testNow}
	var fresh []events.EventID
	for i, nd := range []*node{b, a} {
		res, id, err := nd.q.CollectEvent(m, events.Collected{Account: acct, Now: testNow, Signals: []byte("{}"), Verdict: &device.Verdict{VisitorID: fmt.Sprintf("visitor-new-%d", i), Complete: true}})
		if err != nil || !res.Allowed || events.NodeOf(&id) != NodeRoute("a") {
			t.Fatalf("collect on %s: %+v %v", nd.id, res, err)
		}
		fresh = append(fresh, id)
	}
	pushed := func(nd *node, id events.EventID) bool {
		mr := nd.q.mirror.Load()
		mr.mu.Lock()
		defer mr.mu.Unlock()
		e, ok := mr.events[mirrorEventKey{acct, id}]
		return ok && e.fresh
	}
	for _, id := range fresh {
		for _, nd := range nodes[1:] {
			eventually(t, nd.id+" holds the pushed event", func() bool { return pushed(nd, id) })
		}
		// Its first evaluation, on b with a slice in hand: from the
		// mirror, the first use.
		for i := 0; ; i++ {
			if i == 1000 {
				t.Fatal("b holds no slice")
			}
			before := b.q.LeasedCharges()
			if _, err := b.q.Charge(c); err != nil {
				t.Fatal(err)
			}
			if b.q.LeasedCharges() > before {
				break
			}
		}
		e := evalOn(t, b, c, id, "alice")
		if e.leased != 1 || e.hops != 0 || e.hits != 1 || !e.r.Resolved.Found || e.r.Resolved.Replayed || e.r.Facts.History.Visits != 1 || e.r.Facts.Repeated {
			t.Fatalf("the fresh event's first evaluation on b: %+v", e)
		}
		// The owner counted the use (before anything else uses the event
		// there: an evaluation charged at the owner that reached it before
		// b's use, on another stream, would make that use a late one, the
		// window docs/cluster.md names).
		eventually(t, "the owner counts the holder's use", func() bool {
			r, err := a.events.Peek(events.Resolve{ID: id, Account: acct, Now: testNow})
			return err == nil && r.Found && r.Replayed
		})
		// Again on b, with a slice in hand: a replay, from the mirror.
		for i := 0; ; i++ {
			e := evalOn(t, b, c, id, "alice")
			if e.leased != 1 {
				if i == 100 {
					t.Fatal("no evaluation on b served from a slice")
				}
				continue
			}
			if !e.r.Resolved.Replayed || e.hops != 0 || e.hits != 1 {
				t.Fatalf("the fresh event again on b: %+v", e)
			}
			break
		}
		// On c, once b's observation came back through the owner: a
		// replay, from c's mirror.
		eventually(t, "c's mirror holds b's observation of the event", func() bool {
			f, err := c2.dh.MirrorObserve(devicehist.Observation{Customer: acct, DeviceID: e.r.Resolved.Event.VisitorID, EventID: fmt.Sprintf("%x", id[:]), Test: true, Now: testNow})
			return err == nil && f.Repeated
		})
		if e := evalOn(t, c2, c, id, "alice"); !e.r.Resolved.Replayed || (e.leased == 1 && (e.hops != 0 || e.hits != 1)) {
			t.Fatalf("the fresh event on c after b used it: %+v", e)
		}
		time.Sleep(50 * time.Millisecond) // the slices renew
	}
	if n := a.server.MirrorLateUses(); n != 0 {
		t.Fatalf("%d first uses answered after another", n)
	}
}

// TestMirrorQueueFullEndsTheStream: a holder that does not read its
// stream fills its queue at the owner; the next push ends that stream
// (the holder drops its mirrors and asks again) instead of waiting, so a
// slow holder never holds up the owner's history shards; other streams
// go on.
func TestMirrorQueueFullEndsTheStream(t *testing.T) {
	var mc mirrorConns
	slow, c := mc.add()
	other, o := mc.add()
	for range mirrorQueue {
		mc.deliver(devicehist.MirrorPush{Watcher: slow, Customer: "acct_1"})
	}
	select {
	case <-c.full:
		t.Fatal("ended with its queue just full")
	default:
	}
	mc.deliver(devicehist.MirrorPush{Watcher: slow, Customer: "acct_1"})
	mc.deliver(devicehist.MirrorPush{Watcher: other, Customer: "acct_1"})
	select {
	case <-c.full:
	default:
		t.Fatal("a push past the full queue did not end the stream")
	}
	select {
	case <-o.full:
		t.Fatal("the other stream ended too")
	default:
	}
	if len(o.out) != 1 {
		t.Fatalf("the other stream holds %d pushes, want 1", len(o.out))
	}
	mc.remove(slow)
	mc.deliver(devicehist.MirrorPush{Watcher: slow, Customer: "acct_1"}) // a removed watcher: dropped, no panic
}

// TestMirrorOpsNumberedAndCarried: a holder numbers its observations per
// owner, keeps those sent until the owner acknowledges them, and hands
// what an ended stream had not seen acknowledged (sent or not) to the next
// stream to that owner, under the same numbers; one that comes after the
// end waits with them.
func TestMirrorOpsNumberedAndCarried(t *testing.T) {
	q := &Quota{cfg: QuotaConfig{Owners: &fakeOwners{self: "b"}}, log: quietLog, done: make(chan struct{})}
	m := &mirrors{q: q, hist: &stubMirrorHistory{}, subs: map[string]*mirrorSub{}, streams: map[string]*mirrorStream{}, events: map[mirrorEventKey]mirrorEvent{},
		outWake: make(chan struct{}, 1), run: 42, nextOp: map[string]uint64{}, carry: map[string]*mirrorCarry{}}
	st := &mirrorStream{m: m, node: "a", wake: make(chan struct{}, 1), cancel: func() {}, next: 1}
	m.streams["a"] = st
	op := func(s *mirrorStream, user string) {
		s.op(&MirrorOp{Customer: "acct_1", Observation: &Observation{AccountId: user}})
	}
	for _, u := range []string{"u1", "u2", "u3", "u4", "u5"} {
		op(st, u)
	}
	u := st.take()
	if u.GetRun() != 42 || u.GetFirstOp() != 1 || len(u.GetOps()) != 5 {
		t.Fatalf("first frame: run %d, first op %d, %d ops", u.GetRun(), u.GetFirstOp(), len(u.GetOps()))
	}
	st.acked(3)
	op(st, "u6") // queued, not sent
	st.end()
	op(st, "u7") // after the end: waits with the rest
	c := m.carry["a"]
	if c == nil || c.first != 4 || len(c.ops) != 4 || c.ops[0].GetObservation().GetAccountId() != "u4" || c.ops[3].GetObservation().GetAccountId() != "u7" {
		t.Fatalf("carried: %+v", c)
	}
	m.mu.Lock()
	next := m.openLockedFor("a")
	m.mu.Unlock()
	u = next.take()
	if u.GetFirstOp() != 4 || len(u.GetOps()) != 4 || u.GetOps()[0].GetObservation().GetAccountId() != "u4" {
		t.Fatalf("the next stream's first frame: first op %d, %d ops", u.GetFirstOp(), len(u.GetOps()))
	}
	op(next, "u8")
	if u = next.take(); u.GetFirstOp() != 8 || len(u.GetOps()) != 1 {
		t.Fatalf("a new observation on the next stream: first op %d, %d ops", u.GetFirstOp(), len(u.GetOps()))
	}
}

// TestMirrorOwnerRecordsEachOpOnce: observations sent again (their
// acknowledgement was lost with a stream) are recorded once; the frames
// acknowledge the highest recorded.
func TestMirrorOwnerRecordsEachOpOnce(t *testing.T) {
	h := &stubMirrorHistory{}
	s := &Server{cfg: ServerConfig{Mirror: h, Owners: &fakeOwners{self: "a"}, Now: func() time.Time { return testNow }}, log: quietLog}
	id, c := s.mirrors.add()
	frame := func(first uint64, users ...string) *MirrorUp {
		u := &MirrorUp{Version: version, Node: "b", Run: 42, FirstOp: first}
		for _, x := range users {
			u.Ops = append(u.Ops, &MirrorOp{Customer: "acct_1", Observation: &Observation{AccountId: x}})
		}
		return u
	}
	s.mirrorUp(id, c, frame(1, "u1", "u2", "u3"))
	if c.applied.Load() != 3 {
		t.Fatalf("acknowledged %d after 3", c.applied.Load())
	}
	// A later stream of the same run sends 2..5 again.
	id2, c2 := s.mirrors.add()
	s.mirrorUp(id2, c2, frame(2, "u2", "u3", "u4", "u5"))
	var got []string
	for _, o := range h.observed {
		got = append(got, o.AccountID)
	}
	if fmt.Sprint(got) != "[u1 u2 u3 u4 u5]" || c2.applied.Load() != 5 {
		t.Fatalf("recorded %v, acknowledged %d", got, c2.applied.Load())
	}
	// Another run of the holder (it restarted) starts again at 1.
	u := frame(1, "u9")
	u.Run = 43
	s.mirrorUp(id2, c2, u)
	if len(h.observed) != 6 {
		t.Fatalf("a new run's first observation was not recorded: %d", len(h.observed))
	}
}

// TestMirrorCarryLapses: observations no stream to their owner took
// within mirrorCarryFor are recorded in the holder's own history (they
// reach the owner as leftovers) rather than lost.
func TestMirrorCarryLapses(t *testing.T) {
	h := &stubMirrorHistory{}
	q := &Quota{cfg: QuotaConfig{Owners: &fakeOwners{self: "b"}, Now: func() time.Time { return testNow }}, log: quietLog}
	m := &mirrors{q: q, hist: h, subs: map[string]*mirrorSub{}, streams: map[string]*mirrorStream{}, events: map[mirrorEventKey]mirrorEvent{},
		outWake: make(chan struct{}, 1), nextOp: map[string]uint64{}, carry: map[string]*mirrorCarry{}}
	now := time.Now()
	m.carry["a"] = &mirrorCarry{first: 4, until: now.Add(time.Second), ops: []*MirrorOp{
		{Customer: "acct_1", Observation: &Observation{AccountId: "u4"}}, {Customer: "acct_1", UseEvent: make([]byte, storage.EventIDLen)}}}
	m.sweep(now)
	if len(h.observed) != 0 || m.carry["a"] == nil {
		t.Fatal("recorded before the carry lapsed")
	}
	m.sweep(now.Add(2 * time.Second))
	if len(h.observed) != 1 || h.observed[0].AccountID != "u4" || h.observed[0].Customer != "acct_1" || m.carry["a"] != nil {
		t.Fatalf("after the carry lapsed: %+v, carry %v", h.observed, m.carry["a"])
	}
}

// TestMirrorCloseFlushes: a holder that closes (a graceful stop, after
// its HTTP server drained) first lets the owner acknowledge the
// observations its stream still carries, so the last evaluations answered
// from its mirror are recorded at the owner, not lost with the stream.
func TestMirrorCloseFlushes(t *testing.T) {
	a, b, acct, c := mirroredPair(t)
	holdSlices(t, c, b)
	id := collectAt(t, a, acct, "visitor")
	warmMirror(t, b, 0, func(int) { evalOn(t, b, c, id, "alice") })
	// A burst from the mirror, then the close at once.
	users := 0
	for i := 0; i < 200; i++ {
		if e := evalOn(t, b, c, id, fmt.Sprintf("user-%d", i)); e.hits == 1 {
			users++
		}
	}
	if users == 0 {
		t.Fatal("no evaluation of the burst was answered from the mirror: the test proves nothing")
	}
	b.q.Close()
	// Every user of the burst, and alice: each evaluation recorded at the
	// owner, whether it went there or was answered from the mirror.
	var last []devicehist.DeviceView
	deadline := time.Now().Add(5 * time.Second)
	for {
		list, err := a.dh.Devices(acct, 10, testNow)
		if err == nil && len(list) == 1 && list[0].LinkedAccounts == 201 {
			break
		}
		last = list
		if time.Now().After(deadline) {
			t.Fatalf("the owner's device after 200 evaluations (%d from the mirror) and the close: %+v", users, last)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMirrorOpOutlivesRequestBuffer: the observation a holder answers
// from its mirror goes to the owner after the answer, when the request's
// buffer (which an observation's strings may view) is reused: what the
// owner records is the request's account, not what the buffer holds by
// then.
func TestMirrorOpOutlivesRequestBuffer(t *testing.T) {
	a, b, acct, c := mirroredPair(t)
	holdSlices(t, c, b)
	id := collectAt(t, a, acct, "visitor")
	warmMirror(t, b, 0, func(int) { evalOn(t, b, c, id, "alice") })
	m := b.q.mirror.Load()
	for i := 0; ; i++ {
		if i == 100 {
			t.Fatal("no evaluation answered from the mirror")
		}
		m.mu.Lock()
		sub := m.subs[acct]
		m.mu.Unlock()
		if sub == nil {
			evalOn(t, b, c, id, "alice")
			continue
		}
		buf := []byte(fmt.Sprintf("user-%04d", i))
		user := unsafe.String(unsafe.SliceData(buf), len(buf))
		// The stream holds what the answer queues until the buffer was
		// reused (an evaluation that needs the stream before its answer,
		// a miss, is let go and tried again).
		sub.st.mu.Lock()
		done := make(chan mirrorEval, 1)
		go func() { done <- evalOn(t, b, c, id, user) }()
		var e mirrorEval
		select {
		case e = <-done:
		case <-time.After(time.Second):
			sub.st.mu.Unlock()
			<-done
			continue
		}
		copy(buf, "XXXXXXXXX") // the request's buffer, reused
		sub.st.mu.Unlock()
		if e.hits == 1 {
			eventually(t, "the owner records the mirrored observation's account", func() bool {
				// The account seen on "visitor": on another device it is a new device for it.
				f, err := a.dh.Observe(devicehist.Observation{Customer: acct, DeviceID: "other", AccountID: fmt.Sprintf("user-%04d", i), Test: true, Now: testNow})
				return err == nil && f.NewDevice
			})
			return
		}
	}
}

// countingHistory counts the observations recorded, safely across
// goroutines.
type countingHistory struct {
	stubMirrorHistory
	n atomic.Int64
}

func (h *countingHistory) Observe(devicehist.Observation) (devicehist.Facts, error) {
	h.n.Add(1)
	return devicehist.Facts{}, nil
}

// fakeMirrorStream is a holder's end of a Mirror stream: the test feeds
// its frames; the owner's frames are kept, the first held until gate
// opens.
type fakeMirrorStream struct {
	grpc.ServerStream
	ctx  context.Context
	ups  chan *MirrorUp
	gate chan struct{}
	mu   sync.Mutex
	sent []*MirrorDown
}

func (f *fakeMirrorStream) Context() context.Context { return f.ctx }

func (f *fakeMirrorStream) Recv() (*MirrorUp, error) {
	select {
	case u := <-f.ups:
		return u, nil
	case <-f.ctx.Done():
		return nil, io.EOF
	}
}

func (f *fakeMirrorStream) Send(d *MirrorDown) error {
	f.mu.Lock()
	first := len(f.sent) == 0
	f.sent = append(f.sent, d)
	f.mu.Unlock()
	if first {
		<-f.gate
	}
	return nil
}

// TestMirrorDrainAcknowledges: an owner that stops gracefully sends, as
// its streams end, the acknowledgement of every observation it recorded,
// which its stop then stores: a holder carries to the next stream (the
// owner after a restart, or the next owner, which the history moved to)
// only what was not recorded, so nothing is recorded twice. Before, the
// last acknowledgement could be dropped with the stream, half the time
// when the sender was busy as it ended.
func TestMirrorDrainAcknowledges(t *testing.T) {
	frame := func(first uint64, n int) *MirrorUp {
		u := &MirrorUp{Version: version, Node: "b", Run: 42, FirstOp: first}
		for i := range n {
			u.Ops = append(u.Ops, &MirrorOp{Customer: "acct_1", Observation: &Observation{AccountId: fmt.Sprintf("u%d", int(first)+i)}})
		}
		return u
	}
	for round := range 20 {
		h := &countingHistory{}
		s := &Server{cfg: ServerConfig{Mirror: h, Owners: &fakeOwners{self: "a"}, Now: func() time.Time { return testNow }}, log: quietLog, stopping: make(chan struct{})}
		ctx, cancel := context.WithCancel(context.Background())
		f := &fakeMirrorStream{ctx: ctx, ups: make(chan *MirrorUp), gate: make(chan struct{})}
		done := make(chan error, 1)
		go func() { done <- s.Mirror(f) }()
		// The first frame's acknowledgement leaves, and is held on the
		// way; the second frame is recorded meanwhile.
		f.ups <- frame(1, 3)
		eventually(t, "the first acknowledgement leaves", func() bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			return len(f.sent) == 1
		})
		f.ups <- frame(4, 3)
		eventually(t, "six observations recorded", func() bool { return h.n.Load() == 6 })
		s.Drain()
		close(f.gate)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("the stream did not end on the drain")
		}
		cancel()
		f.mu.Lock()
		last := f.sent[len(f.sent)-1].GetApplied()
		f.mu.Unlock()
		if last != 6 {
			t.Fatalf("round %d: the holder's last acknowledgement is %d of 6 recorded: it would send the rest again", round, last)
		}
	}
}

// TestLeasedEventStoredBeforeTheWatch: a holder that begins to mirror an
// account is sent the events its owner stored before: its first
// evaluation of one nobody used is answered from its mirror as a first
// use (and counted at the owner), and of one the owner evaluated already,
// as a replay, with no round trip either way.
func TestLeasedEventStoredBeforeTheWatch(t *testing.T) {
	a, b, acct, c := mirroredPair(t)
	warm, fresh, used := collectAt(t, a, acct, "visitor-warm"), collectAt(t, a, acct, "visitor-fresh"), collectAt(t, a, acct, "visitor-used")
	// The owner evaluates one of them itself.
	if r, err := a.events.Resolve(events.Resolve{ID: used, Account: acct, Now: testNow}); err != nil || !r.Found || r.Replayed {
		t.Fatalf("the owner's own first use of an event: %+v %v", r, err)
	}
	holdSlices(t, c, b)
	// b's first leased evaluation with an event goes to the owner, and
	// begins b's mirror of the account.
	warmMirror(t, b, 0, func(int) { evalOn(t, b, c, warm, "alice") })
	eventually(t, "b holds the events stored before it watched", func() bool {
		m := b.q.mirror.Load()
		m.mu.Lock()
		defer m.mu.Unlock()
		_, f := m.events[mirrorEventKey{acct, fresh}]
		_, u := m.events[mirrorEventKey{acct, used}]
		return f && u
	})
	if e := evalOn(t, b, c, fresh, "bob"); e.leased != 1 || e.hits != 1 || e.hops != 0 || !e.r.Resolved.Found || e.r.Resolved.Replayed {
		t.Fatalf("b's first evaluation of an unused event stored before its watch: %+v", e)
	}
	if e := evalOn(t, b, c, used, "dave"); e.leased != 1 || e.hits != 1 || e.hops != 0 || !e.r.Resolved.Found || !e.r.Resolved.Replayed {
		t.Fatalf("b's first evaluation of an event the owner used before b watched: %+v", e)
	}
	eventually(t, "the owner counts b's use of the unused event", func() bool {
		r, err := a.events.Peek(events.Resolve{ID: fresh, Account: acct, Now: testNow})
		return err == nil && r.Found && r.Replayed
	})
}

// TestLeasedMirrorBeginsWithTheSlice: a holder begins its mirror of an
// account when it asks for a slice of the account's evaluations that read
// its device history, and the
// owner sends the records it holds in memory, with its recent events, on
// that watch: the holder's first leased evaluation of an end user and a
// device the owner saw before makes no round trip. Before, that first
// evaluation went to the owner and began the mirror, and each such record
// sent one more there once per holder.
func TestLeasedMirrorBeginsWithTheSlice(t *testing.T) {
	a, b, acct, c := mirroredPair(t)
	id := collectAt(t, a, acct, "visitor-known")
	// The owner evaluates it itself: the event's first use, and alice and
	// the device recorded in its history.
	if r, err := a.events.Resolve(events.Resolve{ID: id, Account: acct, Now: testNow}); err != nil || !r.Found || r.Replayed {
		t.Fatalf("the owner's own first use of the event: %+v %v", r, err)
	}
	if _, err := a.dh.Observe(devicehist.Observation{Customer: acct, EventID: fmt.Sprintf("%x", id[:]), DeviceID: "visitor-known", AccountID: "alice", Now: testNow}); err != nil {
		t.Fatal(err)
	}
	// b evaluates the account before it holds a slice (at the owner), so
	// its slice is asked for evaluations that read the history.
	if e := evalOn(t, b, c, collectAt(t, a, acct, "visitor-other"), "bob"); e.leased != 0 || e.hops != 1 {
		t.Fatalf("b's evaluation before a slice: %+v", e)
	}
	holdSlices(t, c, b)
	eventually(t, "b's mirror holds alice and her device", func() bool {
		_, err := b.dh.MirrorObserve(devicehist.Observation{Customer: acct, DeviceID: "visitor-known", AccountID: "alice", Now: testNow})
		return err == nil
	})
	eventually(t, "b holds the event", func() bool {
		m := b.q.mirror.Load()
		m.mu.Lock()
		defer m.mu.Unlock()
		_, ok := m.events[mirrorEventKey{acct, id}]
		return ok
	})
	if e := evalOn(t, b, c, id, "alice"); e.leased != 1 || e.hits != 1 || e.hops != 0 || !e.r.Resolved.Found || !e.r.Resolved.Replayed || e.r.Facts.LinkedAccounts != 1 {
		t.Fatalf("b's first leased evaluation of records the owner held: %+v", e)
	}
}

// TestLeaseWithoutHistoryWatchesNothing: a slice asked for charges that
// read no device history (lookups, evaluations without device evidence)
// begins no mirror: a watch costs the owner a walk of the account's
// history shard, and an unused mirror is dropped and would be begun again
// at every renewal.
func TestLeaseWithoutHistoryWatchesNothing(t *testing.T) {
	a, b, acct, c := mirroredPair(t)
	holdSlices(t, c, b)
	// The watch would have been asked before the call that lent the
	// slice returned.
	if sub := b.q.mirror.Load().active(acct); sub != nil {
		t.Fatalf("b mirrors the account after charges alone: %+v", sub)
	}
	if a.dh.IsWatched(acct) {
		t.Fatal("the owner watches the account for b")
	}
}

// pushingHistory's first Observe waits for proceed, then pushes a change
// to watcher, as the history's shard does while it records an observation
// of a watched account.
type pushingHistory struct {
	stubMirrorHistory
	s         *Server
	watcher   uint64
	calls     atomic.Int32
	inObserve chan struct{}
	proceed   chan struct{}
}

func (h *pushingHistory) Observe(devicehist.Observation) (devicehist.Facts, error) {
	if h.calls.Add(1) == 1 {
		close(h.inObserve)
		<-h.proceed
		h.s.mirrors.deliver(devicehist.MirrorPush{Watcher: h.watcher, Customer: "acct_1"})
	}
	return devicehist.Facts{}, nil
}

// TestMirrorNewRunWhileRecording: a holder's first observations (a new
// run to remember) arriving while another holder's are being recorded,
// and the history pushing a change as it records them, do not deadlock.
// Before, making the new run held the runs' lock while it waited for the
// other run's, which its recording held while the history's push waited
// for the runs' lock.
func TestMirrorNewRunWhileRecording(t *testing.T) {
	h := &pushingHistory{inObserve: make(chan struct{}), proceed: make(chan struct{})}
	s := &Server{cfg: ServerConfig{Mirror: h, Owners: &fakeOwners{self: "a"}, Now: func() time.Time { return testNow }}, log: quietLog}
	h.s = s
	id1, c1 := s.mirrors.add()
	id2, c2 := s.mirrors.add()
	h.watcher = id1
	frame := func(node string, run uint64) *MirrorUp {
		return &MirrorUp{Version: version, Node: node, Run: run, FirstOp: 1, Ops: []*MirrorOp{{Customer: "acct_1", Observation: &Observation{AccountId: "u1"}}}}
	}
	done := make(chan struct{}, 2)
	go func() { s.mirrorUp(id1, c1, frame("b", 42)); done <- struct{}{} }()
	<-h.inObserve
	go func() { s.mirrorUp(id2, c2, frame("c", 7)); done <- struct{}{} }()
	time.Sleep(50 * time.Millisecond) // the second holder's frame reaches the runs
	close(h.proceed)
	for range 2 {
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("deadlock: the holders' frames were not recorded in 5 s")
		}
	}
}

// countingRecent counts the Recent calls per account and names no event.
type countingRecent struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *countingRecent) Recent(account string, _ time.Time, _ int) []events.EventID {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[account]++
	return nil
}

func (c *countingRecent) count(account string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[account]
}

// noEvents resolves nothing.
type noEvents struct{}

func (noEvents) Resolve(events.Resolve) (events.Resolved, error) { return events.Resolved{}, nil }
func (noEvents) Unuse(events.EventID, string, time.Time)         {}

// TestMirrorBackfillAfterRewatch: a registration's start is sent the
// account's recent events; a second watch of the same registration is not;
// a watch after the holder unwatched the account, and one after the owner
// reset its watchers (the account's history was taken out of this node),
// begin new registrations and are sent them again: the holder's mirror
// begins anew, its copies of the events expire. Before, the stream
// remembered every account it had backfilled and cleared the mark on an
// unwatch alone, so a watch after a reset got no events.
func TestMirrorBackfillAfterRewatch(t *testing.T) {
	rec := &countingRecent{n: map[string]int{}}
	dh := memHistory(t)
	s := &Server{cfg: ServerConfig{Mirror: dh, Owners: &fakeOwners{self: "a", owner: "a", token: 1}, Recent: rec, Events: noEvents{},
		Now: func() time.Time { return testNow }}, log: quietLog}
	dh.SetMirrorSink(s.historyPush)
	id, c := s.mirrors.add()
	watch := &MirrorUp{Version: version, Watches: []*MirrorWatch{{Customer: "acct_1", DeviceId: "d1"}}}
	backfills := func(want int, what string) {
		t.Helper()
		eventually(t, what, func() bool { return rec.count("acct_1") >= want })
		time.Sleep(50 * time.Millisecond) // a further backfill would have run by now
		if n := rec.count("acct_1"); n != want {
			t.Fatalf("%s: %d backfills, want %d", what, n, want)
		}
	}
	s.mirrorUp(id, c, watch)
	backfills(1, "the first watch")
	s.mirrorUp(id, c, watch)
	backfills(1, "a second watch of the same registration")
	s.mirrorUp(id, c, &MirrorUp{Version: version, Unwatch: []string{"acct_1"}})
	s.mirrorUp(id, c, watch)
	backfills(2, "a watch after an unwatch")
	if _, err := dh.Take(func(a string) bool { return a == "acct_1" }, testNow); err != nil {
		t.Fatal(err)
	}
	s.mirrorUp(id, c, watch)
	backfills(3, "a watch after the owner reset its watchers")
	// An unwatch and a watch in one frame: a new registration too.
	s.mirrorUp(id, c, &MirrorUp{Version: version, Unwatch: []string{"acct_1"}, Watches: watch.Watches})
	backfills(4, "an unwatch and a watch in one frame")
}

// TestMirrorOptionalPushesBounded: the records in memory a first watch is
// sent (optional pushes) are dropped, and counted, once a holder's stream
// has mirrorOptionalBytes queued; every other push is queued whatever its
// size, and the bytes a sender takes off the queue make room again.
func TestMirrorOptionalPushesBounded(t *testing.T) {
	var mc mirrorConns
	id, c := mc.add()
	big := devicehist.MirrorPush{Watcher: id, Customer: "acct_1", Optional: true,
		Records: []devicehist.MirrorRecord{{Parcel: make([]byte, 1<<20)}}}
	for i := 0; i < 2*mirrorOptionalBytes>>20; i++ {
		mc.deliver(big)
	}
	n := len(c.out)
	if n == 0 || n > mirrorOptionalBytes>>20 || mc.dropped.Load() == 0 || c.queued.Load() > mirrorOptionalBytes {
		t.Fatalf("%d queued (%d bytes), %d dropped", n, c.queued.Load(), mc.dropped.Load())
	}
	dropped := mc.dropped.Load()
	change := big
	change.Optional = false
	mc.deliver(change)
	if len(c.out) != n+1 || mc.dropped.Load() != dropped {
		t.Fatalf("a change was not queued: %d queued, %d dropped", len(c.out), mc.dropped.Load())
	}
	for len(c.out) > 0 {
		p := <-c.out
		c.take(&p)
	}
	if q := c.queued.Load(); q != 0 {
		t.Fatalf("%d bytes counted queued after the queue emptied", q)
	}
	mc.deliver(big)
	if len(c.out) != 1 {
		t.Fatal("an optional push was dropped with room in the queue")
	}
}

// testKeyEvalOn evaluates one device event with the personal test key on
// nd, as planFacts asks for it: a resolve that counts no use (Peek) and a
// test observation.
func testKeyEvalOn(t *testing.T, nd *node, c quota.Charge, id events.EventID, user string) mirrorEval {
	t.Helper()
	st := &ownerStep{c: c, out: make(chan checks.OwnerResult, 1), w: checks.OwnerWork{
		Resolve: &events.Resolve{ID: id, Account: c.Account, Now: testNow, Peek: true},
		Observe: &devicehist.Observation{Customer: c.Account, EventID: fmt.Sprintf("%x", id[:]), AccountID: user, Test: true, Now: testNow},
	}}
	return runOn(t, nd, st)
}

// TestLeasedTestKeyEventIsNotALiveReplay: on a lease holder answering from
// its mirror, a test-key evaluation of an event nobody used peeks at it
// (SPEC 2.2 device.customer_history "excludes test-key traffic; …
// repeated submissions count once"; SPEC 5.2 test traffic is "excluded
// from stats"): it takes no first use here and tells the owner of none, so
// the live evaluation of the event after it is its first use, not a
// replay. Before, the mirror took the pushed event's first use for the
// test key (and told the owner), and the live evaluation read
// device_replayed with no visit. The same holds for a test-key evaluation
// that missed the mirror and went to the owner: the copy it seeds is not
// a used one.
func TestLeasedTestKeyEventIsNotALiveReplay(t *testing.T) {
	a, b, acct, c := mirroredPair(t)
	warm, pushed, seeded := collectAt(t, a, acct, "visitor-warm"), collectAt(t, a, acct, "visitor-pushed"), collectAt(t, a, acct, "visitor-seeded")
	holdSlices(t, c, b)
	warmMirror(t, b, 0, func(int) { evalOn(t, b, c, warm, "alice") })
	m := b.q.mirror.Load()
	eventually(t, "b holds the events stored before it watched, unused", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		p, s := m.events[mirrorEventKey{acct, pushed}], m.events[mirrorEventKey{acct, seeded}]
		return p.fresh && s.fresh
	})
	// b's mirror lacks one of them (as before its push arrives): its
	// test-key evaluation goes to the owner.
	m.mu.Lock()
	delete(m.events, mirrorEventKey{acct, seeded})
	m.mu.Unlock()
	ownerUnused := func(id events.EventID) bool {
		r, err := a.events.Peek(events.Resolve{ID: id, Account: acct, Now: testNow})
		return err == nil && r.Found && !r.Replayed
	}
	for _, tc := range []struct {
		name    string
		id      events.EventID
		hits    int64
		visitor string
	}{{"from the mirror", pushed, 1, "visitor-pushed"}, {"from the owner", seeded, 0, "visitor-seeded"}} {
		e := testKeyEvalOn(t, b, c, tc.id, "bob")
		if e.leased != 1 || e.hits != tc.hits || !e.r.Resolved.Found || e.r.Resolved.Replayed || e.r.Resolved.Event.VisitorID != tc.visitor {
			t.Fatalf("%s: the test-key evaluation of an unused event: %+v", tc.name, e)
		}
		eventually(t, "b's stream settled", func() bool {
			m.mu.Lock()
			defer m.mu.Unlock()
			for _, st := range m.streams {
				if !st.settled() {
					return false
				}
			}
			return true
		})
		if !ownerUnused(tc.id) {
			t.Fatalf("%s: the owner counted a use of the event for the test key", tc.name)
		}
		e = evalOn(t, b, c, tc.id, "bob")
		if e.leased != 1 || e.hits != 1 || e.hops != 0 || !e.r.Resolved.Found || e.r.Resolved.Replayed || e.r.Facts.History.Visits != 1 || e.r.Facts.Repeated {
			t.Fatalf("%s: the live evaluation after the test key's: %+v", tc.name, e)
		}
		eventually(t, "the owner counts the live use", func() bool { return !ownerUnused(tc.id) })
	}
	if n := a.server.MirrorLateUses(); n != 0 {
		t.Fatalf("%d first uses answered after another", n)
	}
}
