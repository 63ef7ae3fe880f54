package rpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/fraudd/fraudd/actors/checks"
	"github.com/fraudd/fraudd/actors/devicehist"
	"github.com/fraudd/fraudd/actors/events"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/cluster"
	"github.com/fraudd/fraudd/intel/device"
)

// fakeHistory is a device history that keeps what it observed and answers
// the number of end-user accounts seen with each device.
type fakeHistory struct {
	mu   sync.Mutex
	seen []devicehist.Observation
	fail error
}

func (h *fakeHistory) Observe(o devicehist.Observation) (devicehist.Facts, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fail != nil {
		return devicehist.Facts{}, h.fail
	}
	h.seen = append(h.seen, o)
	accts := map[string]bool{}
	for _, s := range h.seen {
		if s.DeviceID == o.DeviceID {
			accts[s.AccountID] = true
		}
	}
	return devicehist.Facts{Device: o.DeviceID != "", Account: o.AccountID != "", LinkedAccounts: len(accts), History: devicehist.History{Visits: len(h.seen)}}, nil
}

// Devices lists one line per device observed, with its visits.
func (h *fakeHistory) Devices(customer string, limit int, _ time.Time) ([]devicehist.DeviceView, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	visits := map[string]int{}
	var out []devicehist.DeviceView
	for _, o := range h.seen {
		if o.Customer != customer || o.DeviceID == "" {
			continue
		}
		if visits[o.DeviceID] == 0 {
			out = append(out, devicehist.DeviceView{VisitorID: o.DeviceID})
		}
		visits[o.DeviceID]++
	}
	for i := range out {
		out[i].Visits = visits[out[i].VisitorID]
	}
	return out[:min(len(out), limit)], nil
}

func (h *fakeHistory) observed() []devicehist.Observation {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]devicehist.Observation(nil), h.seen...)
}

// ownerStep is a chained charge with owner work whose answer lands on a
// channel (as checks' chain does).
type ownerStep struct {
	c       quota.Charge
	w       checks.OwnerWork
	out     chan checks.OwnerResult
	charged bool // answered by Charged: the rest runs here
}

func (s *ownerStep) ChargeReq() *quota.Charge       { return &s.c }
func (s *ownerStep) OwnerWork() checks.OwnerWork    { return s.w }
func (s *ownerStep) OwnerDone(r checks.OwnerResult) { s.out <- r }
func (s *ownerStep) Charged(r quota.ChargeResult, err error) {
	s.charged = true
	s.out <- checks.OwnerResult{Charge: r, ChargeErr: err}
}
func (s *ownerStep) Fail(err error) { s.Charged(quota.ChargeResult{}, err) }

// TestEvaluateAtOwner: an evaluation on a node that does not own the
// account sends its charge, its device event and its history observation
// in one call; the owner charges, resolves the event where it was stored
// and observes its own history, so the customer's history is one across
// the nodes. On the owner the chain goes on locally (Charged).
func TestEvaluateAtOwner(t *testing.T) {
	ids := []string{"a", "b", "c"}
	nodes := settledNodes(t, nil, ids...)
	acct := accountOwnedBy("a", ids)
	a, b, c := nodes[0], nodes[1], nodes[2]
	id, err := c.ev.Collect(events.Collected{Account: acct, Now: testNow, Signals: []byte("{}"), Verdict: &device.Verdict{VisitorID: "visitor-9", Complete: true}})
	if err != nil {
		t.Fatal(err)
	}
	charge := uncapped
	charge.Account = acct
	// The owner resolves b's event at c (a hop the owner makes); c's own
	// event is read on c, so the owner makes none for it.
	for i, n := range []*node{b, c} {
		before, ownerBefore := n.q.RemoteCalls(), a.q.RemoteCalls()
		st := &ownerStep{c: charge, out: make(chan checks.OwnerResult, 1), w: checks.OwnerWork{
			Resolve: &events.Resolve{ID: id, Account: acct, Now: testNow},
			Observe: &devicehist.Observation{Customer: acct, AccountID: []string{"alice", "bob"}[i], IP: netip.MustParseAddr("198.51.100.4"), Now: testNow},
		}}
		n.q.ChargeThen(st)
		r := <-st.out
		if st.charged || r.ChargeErr != nil || !r.Charge.Allowed || r.EventErr != nil || !r.Resolved.Found || r.HistErr != nil {
			t.Fatalf("node %s: %+v (answered by Charged: %v)", n.id, r, st.charged)
		}
		if r.Resolved.Replayed != (i == 1) {
			t.Fatalf("node %s: replayed %v on use %d", n.id, r.Resolved.Replayed, i+1)
		}
		if r.Facts.LinkedAccounts != i+1 || !r.Facts.Device || r.Facts.History.Visits != i+1 {
			t.Fatalf("node %s: facts %+v, want %d linked accounts from the owner's history", n.id, r.Facts, i+1)
		}
		if hops := n.q.RemoteCalls() - before; hops != 1 {
			t.Fatalf("node %s: %d round trips", n.id, hops)
		}
		if hops := a.q.RemoteCalls() - ownerBefore; hops != 1-int64(i) {
			t.Fatalf("node %s's evaluation: the owner made %d round trips", n.id, hops)
		}
	}
	if got := a.hist.observed(); len(got) != 2 || got[0].DeviceID != "visitor-9" || got[1].AccountID != "bob" || got[1].Customer != acct {
		t.Fatalf("the owner's history observed %+v", got)
	}
	if len(b.hist.observed())+len(c.hist.observed()) != 0 {
		t.Fatal("a non-owner observed its own history")
	}

	// The admin device list reads the owner's history from any node.
	for _, n := range nodes {
		list, err := n.q.DeviceList(n.hist).Devices(acct, 0, testNow)
		if err != nil || len(list) != 1 || list[0].VisitorID != "visitor-9" || list[0].Visits != 2 {
			t.Fatalf("device list through %s: %+v %v", n.id, list, err)
		}
	}

	// On the owner the chain goes on locally.
	st := &ownerStep{c: charge, out: make(chan checks.OwnerResult, 1), w: checks.OwnerWork{Observe: &devicehist.Observation{Customer: acct, AccountID: "carol", Now: testNow}}}
	a.q.ChargeThen(st)
	if r := <-st.out; !st.charged || !r.Charge.Allowed {
		t.Fatalf("on the owner: %+v (answered by Charged: %v)", r, st.charged)
	}

	// A refused charge resolves and observes nothing at the owner.
	limited := charge
	limited.Limits.Hourly = 1
	for i := 0; ; i++ {
		limited.Account = fmt.Sprintf("capped_%d", i)
		if cluster.Owner(cluster.KindAccount, cluster.ShardOf(cluster.KindAccount, limited.Account), ids) == "a" {
			break
		}
	}
	for i := range 2 {
		st := &ownerStep{c: limited, out: make(chan checks.OwnerResult, 1), w: checks.OwnerWork{Observe: &devicehist.Observation{Customer: limited.Account, AccountID: "dave", Now: testNow}}}
		b.q.ChargeThen(st)
		r := <-st.out
		if r.Charge.Allowed != (i == 0) {
			t.Fatalf("capped call %d: %+v", i+1, r)
		}
	}
	if got := a.hist.observed(); len(got) != 3 {
		t.Fatalf("the owner observed %d, want 3 (the refused call observes nothing)", len(got))
	}

	// The owner's history failing fails that fact alone.
	a.hist.mu.Lock()
	a.hist.fail = errors.New("history shard down")
	a.hist.mu.Unlock()
	st = &ownerStep{c: charge, out: make(chan checks.OwnerResult, 1), w: checks.OwnerWork{Observe: &devicehist.Observation{Customer: acct, AccountID: "erin", Now: testNow}}}
	b.q.ChargeThen(st)
	if r := <-st.out; r.ChargeErr != nil || !r.Charge.Allowed || r.HistErr == nil || !errors.Is(r.HistErr, errOwnerFacts) {
		t.Fatalf("the owner's history down: %+v", r)
	}
}

// FuzzEvaluateRequest: whatever bytes a peer sends, checking an Evaluate
// request never panics, and a request that passes converts back to the
// same owner work.
func FuzzEvaluateRequest(f *testing.F) {
	var id events.EventID
	id[3] = 7
	for _, w := range []checks.OwnerWork{
		{Resolve: &events.Resolve{ID: id, Account: "acct_1"}},
		{Observe: &devicehist.Observation{Customer: "acct_1", AccountID: "alice", EventID: "ev", IP: netip.MustParseAddr("2001:db8::1"), SharedExit: true}},
	} {
		b, err := proto.Marshal(evaluateMsg(&capped, w, 3))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var r EvaluateRequest
		if proto.Unmarshal(b, &r) != nil {
			return
		}
		c, err := chargeOf(r.GetCharge())
		if err != nil {
			return
		}
		w, err := ownerWorkOf(&r, c.Account)
		if err != nil {
			return
		}
		back := evaluateMsg(&c, w, r.Charge.Token)
		if (r.EventId != nil) != (back.EventId != nil) || string(r.EventId) != string(back.EventId) {
			t.Fatalf("event id %x converts back to %x", r.EventId, back.EventId)
		}
		if o := r.Observation; o != nil {
			bo := back.Observation
			if bo == nil || bo.AccountId != o.AccountId || bo.EventId != o.EventId || bo.DeviceId != o.DeviceId || bo.Test != o.Test || bo.SharedExit != o.SharedExit || w.Observe.Customer != c.Account {
				t.Fatalf("observation %v converts back to %v", o, bo)
			}
		}
	})
}

// oldNode is a peer of a build before Evaluate.
type oldNode struct{ *Server }

func (oldNode) Evaluate(context.Context, *EvaluateRequest) (*EvaluateReply, error) {
	return nil, status.Error(codes.Unimplemented, "unknown method Evaluate for service fraudd.cluster.v1.Node")
}

func (oldNode) EvaluateLeased(context.Context, *EvaluateRequest) (*EvaluateReply, error) {
	return nil, status.Error(codes.Unimplemented, "unknown method EvaluateLeased for service fraudd.cluster.v1.Node")
}

// Pipe: a build before Evaluate predates the Pipe too.
func (oldNode) Pipe(Node_PipeServer) error {
	return status.Error(codes.Unimplemented, "unknown method Pipe for service fraudd.cluster.v1.Node")
}

func (oldNode) Devices(context.Context, *DevicesRequest) (*DevicesReply, error) {
	return nil, status.Error(codes.Unimplemented, "unknown method Devices for service fraudd.cluster.v1.Node")
}

// behindOwner starts an owner "a" whose gRPC service wrap builds from the
// real one (an older build's, a broken one) and a routing client on "b"
// that reaches it: the owner's quota, the client, and b's own history.
func behindOwner(t *testing.T, wrap func(*Server) NodeServer) (*quota.Client, *Quota, *fakeHistory) {
	t.Helper()
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quietLog }))
	ownerQuota := quota.New(sys.Root, quota.Config{Shards: 2, Logger: quietLog})
	t.Cleanup(func() { ownerQuota.Stop() })
	s, err := NewServer(ServerConfig{Quota: ownerQuota, Owners: &fakeOwners{self: "a", owner: "a", token: 7}, Now: func() time.Time { return testNow }})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	RegisterNodeServer(g, wrap(s))
	go g.Serve(l)
	t.Cleanup(g.Stop)
	local := quota.New(sys.Root, quota.Config{Shards: 2, Logger: quietLog})
	t.Cleanup(func() { local.Stop() })
	q, err := NewQuota(QuotaConfig{Local: local, Owners: &fakeOwners{self: "b", owner: "a", token: 7, addrs: map[string]string{"a": l.Addr().String()}}, Timeout: 2 * time.Second, Workers: 2, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(q.Close)
	hist := &fakeHistory{}
	q.SetOwner(&checks.OwnerParts{Quota: local, History: hist})
	return ownerQuota, q, hist
}

// TestEvaluateOldOwner: during a rolling deploy an owner that predates
// Evaluate answers Unimplemented; the evaluation is charged there and the
// chain does the rest on the evaluating node, as before — no request fails.
func TestEvaluateOldOwner(t *testing.T) {
	ownerQuota, q, hist := behindOwner(t, func(s *Server) NodeServer { return oldNode{s} })
	st := &ownerStep{c: capped, out: make(chan checks.OwnerResult, 1), w: checks.OwnerWork{Observe: &devicehist.Observation{Customer: capped.Account, AccountID: "alice", Now: testNow}}}
	q.ChargeThen(st)
	if r := <-st.out; !st.charged || r.ChargeErr != nil || !r.Charge.Allowed {
		t.Fatalf("through an old owner: %+v (answered by Charged: %v)", r, st.charged)
	}
	if v, err := ownerQuota.Usage(quota.Usage{Account: capped.Account, Limits: capped.Limits, Now: testNow}); err != nil || v.UsedThisHour != 1 {
		t.Fatalf("the old owner's count: %+v %v", v, err)
	}
	if len(hist.observed()) != 0 {
		t.Fatal("the owner parts ran on the evaluating node")
	}
	// The rest of a leased evaluation sent to an old owner: the chain goes
	// on here with the leased charge's answer, as before EvaluateLeased.
	leased := quota.ChargeResult{Allowed: true, Limit: 5, Remaining: 3}
	st = &ownerStep{c: capped, out: make(chan checks.OwnerResult, 1), w: checks.OwnerWork{
		Resolve: &events.Resolve{Account: capped.Account, Now: testNow},
		Observe: &devicehist.Observation{Customer: capped.Account, AccountID: "bob", Now: testNow}}}
	if q.restAtOwner(st) == nil {
		t.Fatal("a leased evaluation with another node's event does not go to the owner")
	}
	q.runRest(&restStep{os: st, res: leased, c: capped})
	if r := <-st.out; !st.charged || r.Charge != leased {
		t.Fatalf("leased rest through an old owner: %+v (answered by Charged: %v)", r, st.charged)
	}
	if q.LeasedRests() != 0 {
		t.Fatal("a rest an old owner refused was counted as completed there")
	}
	// The device list falls back to this node's own.
	if list, err := q.DeviceList(hist).Devices(capped.Account, 0, testNow); err != nil || len(list) != 0 {
		t.Fatalf("device list through an old owner: %+v %v", list, err)
	}
}

// brokenNode fails EvaluateLeased after the owner may have acted (a reply
// lost on the way back).
type brokenNode struct{ *Server }

func (brokenNode) EvaluateLeased(context.Context, *EvaluateRequest) (*EvaluateReply, error) {
	return nil, status.Error(codes.Internal, "connection reset after the request was read")
}

func (n brokenNode) Pipe(stream Node_PipeServer) error { return n.servePipe(stream, n) }

// TestLeasedRestLostReply: when EvaluateLeased fails after it was sent, the
// owner may have counted the event's use and the visit; the holder does not
// resolve and observe again (that would count them twice): the facts fail
// open and the leased charge stands.
func TestLeasedRestLostReply(t *testing.T) {
	_, q, hist := behindOwner(t, func(s *Server) NodeServer { return brokenNode{s} })
	leased := quota.ChargeResult{Allowed: true, Limit: 5, Remaining: 3}
	st := &ownerStep{c: capped, out: make(chan checks.OwnerResult, 1), w: checks.OwnerWork{
		Resolve: &events.Resolve{Account: capped.Account, Now: testNow},
		Observe: &devicehist.Observation{Customer: capped.Account, AccountID: "bob", Now: testNow}}}
	q.runRest(&restStep{os: st, res: leased, c: capped})
	r := <-st.out
	if st.charged || r.Charge != leased || r.ChargeErr != nil || r.EventErr == nil || r.HistErr == nil {
		t.Fatalf("a lost reply: %+v (answered by Charged, to resolve and observe here: %v)", r, st.charged)
	}
	if len(hist.observed()) != 0 || q.LeasedRests() != 0 {
		t.Fatal("a rest whose reply was lost was observed here, or counted as completed")
	}
}

// slowNode holds every Resolve until its caller gives up (a third node
// that stores the event and hangs).
type slowNode struct{ UnimplementedNodeServer }

func (slowNode) Resolve(ctx context.Context, _ *ResolveRequest) (*ResolveReply, error) {
	<-ctx.Done()
	return nil, status.Error(codes.DeadlineExceeded, "too late")
}

// TestEvaluateThirdNodeHangs: the owner resolving an event stored on a
// third node that hangs gives up in time for its own answer to reach the
// caller: the charge stands and only the event's fact fails open, instead
// of the whole call timing out into a 503.
func TestEvaluateThirdNodeHangs(t *testing.T) {
	listen := func(ns NodeServer) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		g := grpc.NewServer()
		RegisterNodeServer(g, ns)
		go g.Serve(l)
		t.Cleanup(g.Stop)
		return l.Addr().String()
	}
	slow := listen(slowNode{})
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quietLog }))
	ownerQuota := quota.New(sys.Root, quota.Config{Shards: 2, Logger: quietLog})
	t.Cleanup(func() { ownerQuota.Stop() })
	ownerEvents := events.New(sys.Root, events.Config{Shards: 2, Node: NodeRoute("a"), Logger: quietLog})
	t.Cleanup(func() { ownerEvents.Stop() })
	// The owner's view of the other members, for resolving: c at slow.
	// Every member has the same per-call timeout, the caller's included.
	peers, err := NewQuota(QuotaConfig{Local: ownerQuota, Owners: &fakeOwners{self: "a", owner: "c", addrs: map[string]string{"c": slow}}, Timeout: 2 * time.Second, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(peers.Close)
	hist := &fakeHistory{}
	s, err := NewServer(ServerConfig{Quota: ownerQuota, Owners: &fakeOwners{self: "a", owner: "a", token: 7}, Now: func() time.Time { return testNow },
		Owner: &checks.OwnerParts{Quota: ownerQuota, Events: peers.Events(ownerEvents), History: hist}})
	if err != nil {
		t.Fatal(err)
	}
	owner := listen(s)
	local := quota.New(sys.Root, quota.Config{Shards: 2, Logger: quietLog})
	t.Cleanup(func() { local.Stop() })
	q, err := NewQuota(QuotaConfig{Local: local, Owners: &fakeOwners{self: "b", owner: "a", token: 7, addrs: map[string]string{"a": owner}}, Timeout: 2 * time.Second, Workers: 2, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(q.Close)
	q.SetOwner(&checks.OwnerParts{Quota: local, History: &fakeHistory{}})
	// An event id that names c as the node that stored it.
	atC := events.New(sys.Root, events.Config{Shards: 1, Node: NodeRoute("c"), Logger: quietLog})
	t.Cleanup(func() { atC.Stop() })
	id, err := atC.Collect(events.Collected{Account: capped.Account, Now: testNow, Signals: []byte("{}"), Verdict: &device.Verdict{VisitorID: "visitor-c", Complete: true}})
	if err != nil {
		t.Fatal(err)
	}
	st := &ownerStep{c: capped, out: make(chan checks.OwnerResult, 1), w: checks.OwnerWork{
		Resolve: &events.Resolve{ID: id, Account: capped.Account, Now: testNow},
		Observe: &devicehist.Observation{Customer: capped.Account, AccountID: "alice", Now: testNow}}}
	q.ChargeThen(st)
	r := <-st.out
	if st.charged || r.ChargeErr != nil || !r.Charge.Allowed {
		t.Fatalf("the charge did not stand: %+v (answered by Charged: %v)", r, st.charged)
	}
	if r.EventErr == nil || r.Resolved.Found {
		t.Fatalf("the event's fact did not fail open: %+v", r)
	}
	if got := hist.observed(); len(got) != 1 || got[0].AccountID != "alice" {
		t.Fatalf("the owner observed %+v", got)
	}
}
