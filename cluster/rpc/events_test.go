package rpc

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/fraudd/fraudd/actors/events"
	"github.com/fraudd/fraudd/intel/device"
	"github.com/fraudd/fraudd/storage"
)

// resolveStep is a chained resolve whose answer lands on a channel.
type resolveStep struct {
	m   events.Resolve
	out chan error
	res events.Resolved
}

func (s *resolveStep) ResolveReq() *events.Resolve { return &s.m }
func (s *resolveStep) Resolved(r events.Resolved, err error) {
	s.res = r
	s.out <- err
}
func (s *resolveStep) Fail(err error) { s.out <- err }

// TestEventResolvesWhereItWasStored: a device event collected on one node
// resolves through another (one round trip to the node its id names),
// which counts the use where the event lives; a peek counts none; another
// account's evaluation does not find it; and once the storing node is gone
// the evidence is unavailable (an error: the pipeline fails open).
func TestEventResolvesWhereItWasStored(t *testing.T) {
	ids := []string{"a", "b"}
	nodes := settledNodes(t, nil, ids...)
	a, b := nodes[0], nodes[1]
	id, err := a.ev.Collect(events.Collected{Account: "acct_1", Now: testNow, Signals: []byte("{}"), Verdict: &device.Verdict{VisitorID: "visitor-1", Complete: true}})
	if err != nil {
		t.Fatal(err)
	}
	if events.NodeOf(&id) != NodeRoute("a") {
		t.Fatalf("event id %x does not name node a (%04x)", id, NodeRoute("a"))
	}
	m := events.Resolve{ID: id, Account: "acct_1", Now: testNow}
	if r, err := b.ev.Peek(m); err != nil || !r.Found || r.Replayed || r.Event.VisitorID != "visitor-1" {
		t.Fatalf("peek through b: %+v %v", r, err)
	}
	if r, err := b.ev.Resolve(m); err != nil || !r.Found || r.Replayed || r.Event.Flags&1 == 0 && !r.Verdict().Complete {
		t.Fatalf("first resolve through b: %+v %v", r, err)
	}
	// The use was counted at a: resolving again there, or chained through
	// b, is a replay.
	st := &resolveStep{m: m, out: make(chan error, 1)}
	b.ev.ResolveThen(st)
	if err := <-st.out; err != nil || !st.res.Found || !st.res.Replayed {
		t.Fatalf("chained resolve through b: %+v %v", st.res, err)
	}
	if r, err := a.ev.Resolve(m); err != nil || !r.Found || !r.Replayed {
		t.Fatalf("resolve at a after b's: %+v %v", r, err)
	}
	if hops := b.q.RemoteCalls(); hops != 3 {
		t.Fatalf("b made %d round trips for three resolves; want 3", hops)
	}
	if r, err := b.ev.Resolve(events.Resolve{ID: id, Account: "acct_2", Now: testNow}); err != nil || r.Found {
		t.Fatalf("another account's resolve: %+v %v", r, err)
	}
	a.srv.Stop()
	a.halt()
	eventually(t, "b sees a gone", func() bool { return len(b.owners.Members()) == 1 })
	if _, err := b.ev.Resolve(m); !errors.Is(err, ErrStorerDown) {
		t.Fatalf("resolve of a's event with a gone: %v", err)
	}
}

// TestNodeRoutesDiffer: ids that differ in one character get different
// routes (an early version took FNV's top bits, equal for "a" and "b").
func TestNodeRoutesDiffer(t *testing.T) {
	seen := map[uint16]string{}
	for _, id := range []string{"a", "b", "c", "node1", "node2", "node3", "node10", "fraudd-0", "fraudd-1", "fraudd-2"} {
		r := NodeRoute(id)
		if r == 0 || seen[r] != "" {
			t.Fatalf("%q routes to %04x, as %q", id, r, seen[r])
		}
		seen[r] = id
	}
}

// TestEventFromBeforeClusterMode: an event a node collected before it ran
// in cluster mode (random bytes where a node's route goes) still resolves
// on that node; another node, which cannot know where it lives, answers it
// unavailable.
func TestEventFromBeforeClusterMode(t *testing.T) {
	nodes := settledNodes(t, nil, "a", "b")
	a, b := nodes[0], nodes[1]
	id := events.NewEventID("visitor-old", testNow)
	binary.BigEndian.PutUint16(id[6:8], NodeRoute("a")^NodeRoute("b")^0x5a5a) // neither member's
	a.events.Record(&storage.DeviceEvent{ID: id, Account: "acct_1", Created: testNow, Signals: []byte("{}"), VisitorID: "visitor-old"})
	m := events.Resolve{ID: id, Account: "acct_1", Now: testNow}
	if r, err := a.ev.Resolve(m); err != nil || !r.Found || r.Replayed || r.Event.VisitorID != "visitor-old" {
		t.Fatalf("resolve on the node that collected it: %+v %v", r, err)
	}
	st := &resolveStep{m: m, out: make(chan error, 1)}
	a.ev.ResolveThen(st)
	if err := <-st.out; err != nil || !st.res.Found || !st.res.Replayed {
		t.Fatalf("chained resolve there, the second use: %+v %v", st.res, err)
	}
	if _, err := b.ev.Resolve(m); !errors.Is(err, ErrStorerDown) {
		t.Fatalf("resolve on another node: %v", err)
	}
}

// TestChainedResolveAfterClose: a chained resolve of another node's event
// that comes once the client closed is answered at once (ErrClosed), not
// left on a queue no worker reads any more.
func TestChainedResolveAfterClose(t *testing.T) {
	nodes := settledNodes(t, nil, "a", "b")
	a, b := nodes[0], nodes[1]
	id, err := a.ev.Collect(events.Collected{Account: "acct_1", Now: testNow, Signals: []byte("{}"), Verdict: &device.Verdict{VisitorID: "visitor-1"}})
	if err != nil {
		t.Fatal(err)
	}
	b.q.Close()
	st := &resolveStep{m: events.Resolve{ID: id, Account: "acct_1", Now: testNow}, out: make(chan error, 1)}
	b.ev.ResolveThen(st)
	select {
	case err := <-st.out:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("chained resolve after close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a chained resolve sent after close was never answered")
	}
}
