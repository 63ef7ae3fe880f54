package rpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/cluster"
)

// fakeOwners is an Ownership without etcd: every shard owned by owner under
// token, and this node holding a valid claim of what it owns.
type fakeOwners struct {
	mu    sync.Mutex
	self  string
	owner string
	token int64
	addrs map[string]string
}

func (f *fakeOwners) Self() string { return f.self }
func (f *fakeOwners) Held(shard int) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.owner != f.self {
		return 0, fmt.Errorf("fake %04d: %w", shard, cluster.ErrFenced)
	}
	return f.token, nil
}
func (f *fakeOwners) Owner(int) (string, int64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.owner, f.token, f.owner != ""
}
func (f *fakeOwners) Members() []string { return []string{f.self, f.owner} }
func (f *fakeOwners) Known() []string   { return f.Members() }
func (f *fakeOwners) Addr(node string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a, ok := f.addrs[node]
	return a, ok
}
func (f *fakeOwners) Revision() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.token
}
func (f *fakeOwners) Wait(ctx context.Context, rev int64) error {
	if rev <= f.Revision() {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

// serve starts a Server for an owner on memory-only quota actors and
// returns its address and actors.
func serve(tb testing.TB, owners Ownership) (string, *quota.Client) {
	tb.Helper()
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quietLog }))
	local := quota.New(sys.Root, quota.Config{Shards: 2, Logger: quietLog})
	s, err := NewServer(ServerConfig{Quota: local, Owners: owners, Now: func() time.Time { return testNow }})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { local.Stop() })
	return listen(tb, s), local
}

// listen serves s on a loopback port until the test ends (the server
// stops before the cleanups registered earlier run).
func listen(tb testing.TB, s *Server, opts ...grpc.ServerOption) string {
	tb.Helper()
	return listenNode(tb, s, opts...)
}

// listenNode serves n (a Server, or a wrapper of one) like listen.
func listenNode(tb testing.TB, n NodeServer, opts ...grpc.ServerOption) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	g := grpc.NewServer(append(ServerOptions(quietLog), opts...)...)
	RegisterNodeServer(g, n)
	go g.Serve(l)
	tb.Cleanup(g.Stop)
	return l.Addr().String()
}

func dial(tb testing.TB, addr string) *grpc.ClientConn {
	tb.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	return conn
}

var capped = quota.Charge{Account: "acct_1", Kind: quota.Evaluate, Hourly: true, Now: testNow,
	Limits: quota.LimitsFor(quota.PlanCustom, limit(10), nil, testNow, testNow)}

// TestServiceVersioning: a method this build does not know answers
// Unimplemented (a newer peer's call), a request with fields this build
// does not know is served (they are ignored), and a malformed request is
// refused with InvalidArgument and charges nothing.
func TestServiceVersioning(t *testing.T) {
	addr, local := serve(t, &fakeOwners{self: "a", owner: "a", token: 7})
	conn := dial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	err := conn.Invoke(ctx, "/fraudd.cluster.v1.Node/Handoff", &SharesRequest{Version: version}, &SharesReply{})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("unknown method: %v, want Unimplemented", err)
	}

	req := chargeMsg(&capped, 7)
	req.Version = version + 1
	req.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 42))
	rep, err := NewNodeClient(conn).Charge(ctx, req)
	if err != nil || !rep.Allowed || rep.Remaining != 9 || rep.Token != 7 || rep.Version != version {
		t.Fatalf("request from a newer peer: %+v, %v", rep, err)
	}

	for name, bad := range map[string]func(*ChargeRequest){
		"no version":   func(r *ChargeRequest) { r.Version = 0 },
		"no account":   func(r *ChargeRequest) { r.Account = "" },
		"bucket 7":     func(r *ChargeRequest) { r.Bucket = 7 },
		"kind 9":       func(r *ChargeRequest) { r.Kind = 9 },
		"no limits":    func(r *ChargeRequest) { r.Limits = nil },
		"no timestamp": func(r *ChargeRequest) { r.NowUnixNano = 0 },
	} {
		r := chargeMsg(&capped, 7)
		bad(r)
		if _, err := NewNodeClient(conn).Charge(ctx, r); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
	if v, err := local.Usage(quota.Usage{Account: capped.Account, Limits: capped.Limits, Now: testNow}); err != nil || v.UsedThisHour != 1 {
		t.Fatalf("after one good and six malformed charges: %+v, %v", v, err)
	}
	if _, err := NewNodeClient(conn).Shares(ctx, &SharesRequest{Version: version, Account: "acct_1", Month: 202613}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("shares for month 13: %v", err)
	}
}

// TestServerRefusesNewerToken: an owner whose lease still looks held but
// who is asked under a later token than its claim's refuses: the caller has
// seen a newer claim.
func TestServerRefusesNewerToken(t *testing.T) {
	addr, _ := serve(t, &fakeOwners{self: "a", owner: "a", token: 7})
	_, err := NewNodeClient(dial(t, addr)).Charge(context.Background(), chargeMsg(&capped, 8))
	st := status.Convert(err)
	if st.Code() != codes.FailedPrecondition || len(st.Details()) != 1 {
		t.Fatalf("charge under a newer token: %v", err)
	}
	if no, ok := st.Details()[0].(*NotOwner); !ok || no.Owner != "a" || no.Token != 7 || int(no.Shard) != cluster.ShardOf(cluster.KindAccount, capped.Account) {
		t.Fatalf("refusal detail %+v", st.Details()[0])
	}
}

// TestServerRefusesLateCall: a call that reaches the owner with less of
// its deadline left than an answer needs to get back is refused and
// charges nothing, so the caller's 503 is true.
func TestServerRefusesLateCall(t *testing.T) {
	addr, local := serve(t, &fakeOwners{self: "a", owner: "a", token: 7})
	cli := NewNodeClient(dial(t, addr))
	ctx, cancel := context.WithTimeout(context.Background(), answerMargin*4/5)
	defer cancel()
	_, err := cli.Charge(ctx, chargeMsg(&capped, 7))
	if c := status.Code(err); c != codes.Aborted && c != codes.DeadlineExceeded {
		t.Fatalf("a late charge: %v", err)
	}
	if u, err := local.Usage(quota.Usage{Account: capped.Account, Limits: capped.Limits, Now: testNow}); err != nil || u.UsedThisHour != 0 {
		t.Fatalf("a late charge was counted: %+v %v", u, err)
	}
	if _, err := cli.Charge(context.Background(), chargeMsg(&capped, 7)); err != nil {
		t.Fatalf("a charge in time: %v", err)
	}
}

// deadOwnerQuota is node b's routing client with its own quota actors,
// whose view names a as the owner at an address nobody listens on.
func deadOwnerQuota(t *testing.T, handoff time.Duration) (*Quota, *quota.Client, *fakeOwners) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quietLog }))
	local := quota.New(sys.Root, quota.Config{Shards: 2, Logger: quietLog})
	t.Cleanup(func() { local.Stop() })
	owners := &fakeOwners{self: "b", owner: "a", token: 7, addrs: map[string]string{"a": dead}}
	q, err := NewQuota(QuotaConfig{Local: local, Owners: owners, Timeout: 200 * time.Millisecond, HandoffWait: handoff, Workers: 2, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(q.Close)
	return q, local, owners
}

// TestUnreachableOwner: with the owner's address dead, or no owner at all,
// a charge answers ErrNoOwner (503, nothing charged) within the deadline,
// blocking or chained.
func TestUnreachableOwner(t *testing.T) {
	q, local, owners := deadOwnerQuota(t, 0)
	for name, charge := range map[string]func(quota.Charge) (quota.ChargeResult, error){
		"blocking": q.Charge,
		"chained":  func(c quota.Charge) (quota.ChargeResult, error) { return chargeThen(q, c) },
	} {
		start := time.Now()
		if _, err := charge(capped); !errors.Is(err, ErrNoOwner) || !errors.Is(err, quota.ErrUnavailable) {
			t.Errorf("%s, owner unreachable: %v", name, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: answered after %v with a 200 ms deadline", name, d)
		}
	}
	owners.mu.Lock()
	owners.owner = ""
	owners.mu.Unlock()
	if _, err := q.Charge(capped); !errors.Is(err, ErrNoOwner) {
		t.Errorf("no owner: %v", err)
	}
	if v, err := local.Usage(quota.Usage{Account: capped.Account, Limits: capped.Limits, Now: testNow}); err != nil || v.UsedThisHour != 0 {
		t.Fatalf("the non-owner charged locally: %+v, %v", v, err)
	}
	q.Close()
	if _, err := chargeThen(q, capped); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// TestPeerMovesAddress: a member that comes back on another address (a
// restart) is reached there; the connection to the old one is dropped.
func TestPeerMovesAddress(t *testing.T) {
	owner := &fakeOwners{self: "a", owner: "a", token: 7}
	first, firstQuota := serve(t, owner)
	second, secondQuota := serve(t, owner)
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quietLog }))
	local := quota.New(sys.Root, quota.Config{Shards: 2, Logger: quietLog})
	defer local.Stop()
	caller := &fakeOwners{self: "b", owner: "a", token: 7, addrs: map[string]string{"a": first}}
	q, err := NewQuota(QuotaConfig{Local: local, Owners: caller, Workers: 2, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	used := func(c *quota.Client) int64 {
		v, err := c.Usage(quota.Usage{Account: capped.Account, Limits: capped.Limits, Now: testNow})
		if err != nil {
			t.Fatal(err)
		}
		return v.UsedThisHour
	}
	if _, err := chargeThen(q, capped); err != nil {
		t.Fatal(err)
	}
	caller.mu.Lock()
	caller.addrs["a"] = second
	caller.mu.Unlock()
	for range 2 {
		if _, err := chargeThen(q, capped); err != nil {
			t.Fatal(err)
		}
	}
	if a, b := used(firstQuota), used(secondQuota); a != 1 || b != 2 {
		t.Fatalf("charges at the old address %d, at the new %d; want 1 and 2", a, b)
	}
	if n := q.RemoteCalls(); n != 3 {
		t.Fatalf("%d remote calls for 3 charges", n)
	}
}

// movingOwners is a server's Ownership whose Held runs a hook: the moment
// a charge is fenced there is the moment the test moves the caller's view.
type movingOwners struct {
	*fakeOwners
	onHeld func()
}

func (m movingOwners) Held(shard int) (int64, error) {
	if m.onHeld != nil {
		m.onHeld()
	}
	return m.fakeOwners.Held(shard)
}

// TestAnswerUnderOldTokenRefused is the receiver's half of the fence: the
// shard moves to b while a, whose claim still looked valid to itself,
// charges; a's answer carries a's older token, so the caller does not take
// it: it settles the call with a, which gives its charge back, and
// charges at b instead. The call counts once.
func TestAnswerUnderOldTokenRefused(t *testing.T) {
	caller := &fakeOwners{self: "c", owner: "a", token: 5, addrs: map[string]string{}}
	move := func() {
		caller.mu.Lock()
		defer caller.mu.Unlock()
		caller.owner, caller.token = "b", 7
	}
	addrA, quotaA := serve(t, movingOwners{fakeOwners: &fakeOwners{self: "a", owner: "a", token: 5}, onHeld: move})
	addrB, quotaB := serve(t, &fakeOwners{self: "b", owner: "b", token: 7})
	caller.addrs["a"], caller.addrs["b"] = addrA, addrB
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quietLog }))
	local := quota.New(sys.Root, quota.Config{Shards: 2, Logger: quietLog})
	defer local.Stop()
	q, err := NewQuota(QuotaConfig{Local: local, Owners: caller, Workers: 2, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	res, err := q.Charge(capped)
	if err != nil || !res.Allowed || res.Remaining != 9 {
		t.Fatalf("charge while the shard moved: %+v, %v", res, err)
	}
	if n := q.RemoteCalls(); n != 2 {
		t.Fatalf("%d round trips, want 2 (a's answer refused, then b)", n)
	}
	if n := q.Settles(); n != 1 {
		t.Fatalf("%d calls settled, want 1 (a's)", n)
	}
	// The settle is made in the background.
	waitUsed(t, quotaA, 0, "at a, whose answer was discarded")
	if n := usedThisHour(t, quotaB); n != 1 {
		t.Fatalf("b counted %d; want 1", n)
	}
}

// TestOwnerClockDecides: callers whose clocks disagree (skew between nodes)
// charge one hourly window at the owner. A caller whose clock is behind the
// window's start must not start the window again (the quota actors read a
// clock going back as a new window), or each node's skew would admit more
// than the cap.
func TestOwnerClockDecides(t *testing.T) {
	addr, owner := serve(t, &fakeOwners{self: "a", owner: "a", token: 7})
	cli := NewNodeClient(dial(t, addr))
	one := capped
	one.Limits.Hourly = 1
	for i, skew := range []time.Duration{0, -time.Second, -time.Minute} {
		c := one
		c.Now = testNow.Add(skew)
		rep, err := cli.Charge(context.Background(), chargeMsg(&c, 7))
		if err != nil || rep.Allowed != (i == 0) {
			t.Fatalf("charge %d with the caller's clock %v off: %+v, %v", i, skew, rep, err)
		}
	}
	if v, err := owner.Usage(quota.Usage{Account: one.Account, Limits: one.Limits, Now: testNow}); err != nil || v.UsedThisHour != 1 || v.LimitHits != 2 {
		t.Fatalf("owner's count: %+v, %v", v, err)
	}
}

// acquiring is a node whose view already names it the owner while its
// Balancer still runs the claim's Acquired hook: Held fails until ready.
type acquiring struct {
	*fakeOwners
	ready atomic.Bool
	// waits counts waits for the view to move, which here never does.
	waits atomic.Int64
}

func (a *acquiring) Wait(ctx context.Context, rev int64) error {
	a.waits.Add(1)
	return a.fakeOwners.Wait(ctx, rev)
}

func (a *acquiring) Held(shard int) (int64, error) {
	if !a.ready.Load() {
		return 0, fmt.Errorf("fake %04d: %w", shard, ErrNoClaim)
	}
	return a.fakeOwners.Held(shard)
}

// unclaimed is a shard between owners that this node is about to claim:
// the view shows no owner until shown is set, then this node.
type unclaimed struct {
	*acquiring
	shown atomic.Bool
}

func (u *unclaimed) Owner(shard int) (string, int64, bool) {
	if !u.shown.Load() {
		return "", 0, false
	}
	return u.acquiring.Owner(shard)
}

func (u *unclaimed) Revision() int64 {
	if !u.shown.Load() {
		return 1
	}
	return u.acquiring.Revision()
}

func (u *unclaimed) Wait(ctx context.Context, rev int64) error {
	for u.Revision() < rev {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

// TestChargeWaitsForOwnClaim: a charge on a node the view names as the
// owner, whose claim is not recorded yet, waits for the claim within the
// deadline and is charged locally, instead of waiting for a view that
// will not move and answering 503. So does a charge that first found no
// owner and then saw the view name this node.
func TestChargeWaitsForOwnClaim(t *testing.T) {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quietLog }))
	local := quota.New(sys.Root, quota.Config{Shards: 2, Logger: quietLog})
	defer local.Stop()
	own := &acquiring{fakeOwners: &fakeOwners{self: "a", owner: "a", token: 3}}
	q, err := NewQuota(QuotaConfig{Local: local, Owners: own, Timeout: 5 * time.Second, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	go func() {
		time.Sleep(50 * time.Millisecond)
		own.ready.Store(true)
	}()
	res, err := q.Charge(capped)
	if err != nil || !res.Allowed {
		t.Fatalf("charge while the claim is being recorded: %+v, %v", res, err)
	}
	if q.RemoteCalls() != 0 || own.waits.Load() != 0 {
		t.Fatalf("%d remote calls and %d waits for the view to move, for a shard this node owns", q.RemoteCalls(), own.waits.Load())
	}
	between := &unclaimed{acquiring: &acquiring{fakeOwners: &fakeOwners{self: "a", owner: "a", token: 3}}}
	q3, err := NewQuota(QuotaConfig{Local: local, Owners: between, Timeout: 5 * time.Second, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer q3.Close()
	go func() {
		time.Sleep(20 * time.Millisecond)
		between.shown.Store(true)
		time.Sleep(30 * time.Millisecond)
		between.ready.Store(true)
	}()
	if res, err := q3.Charge(capped); err != nil || !res.Allowed {
		t.Fatalf("charge on a shard between owners, then claimed here: %+v, %v", res, err)
	}
	// A claim that never comes is an error at the deadline, not a hang.
	own.ready.Store(false)
	q2, err := NewQuota(QuotaConfig{Local: local, Owners: own, Timeout: 100 * time.Millisecond, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer q2.Close()
	if _, err := q2.Charge(capped); !errors.Is(err, ErrNoOwner) {
		t.Fatalf("charge with no claim: %v, want ErrNoOwner", err)
	}
}

// TestServerWaitsForItsClaim: an owner whose view shows its claim before
// its Balancer recorded it answers a charge routed to it by that claim
// once the claim is recorded, instead of refusing the caller; a claim
// whose lease may be gone is refused at once.
func TestServerWaitsForItsClaim(t *testing.T) {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quietLog }))
	local := quota.New(sys.Root, quota.Config{Shards: 2, Logger: quietLog})
	defer local.Stop()
	own := &acquiring{fakeOwners: &fakeOwners{self: "a", owner: "a", token: 3}}
	s, err := NewServer(ServerConfig{Quota: local, Owners: own, Now: func() time.Time { return testNow }})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(30 * time.Millisecond)
		own.ready.Store(true)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rep, err := s.Charge(ctx, chargeMsg(&capped, 3))
	if err != nil || !rep.Allowed || rep.Token != 3 {
		t.Fatalf("charge while the claim is being recorded: %+v, %v", rep, err)
	}
	lapsed := &fakeOwners{self: "a", owner: "b", token: 3}
	s2, err := NewServer(ServerConfig{Quota: local, Owners: lapsed, Now: func() time.Time { return testNow }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Charge(context.Background(), chargeMsg(&capped, 3)); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("charge at a node that is not the owner: %v, want FailedPrecondition at once", err)
	}
}

// admitByHeld is a fake's Admit: its Held, with nothing to count.
func admitByHeld(held func(int) (int64, error), shard int) (int64, func(), error) {
	token, err := held(shard)
	if err != nil {
		return 0, nil, err
	}
	return token, func() {}, nil
}

func (f *fakeOwners) Admit(shard int) (int64, func(), error)  { return admitByHeld(f.Held, shard) }
func (m movingOwners) Admit(shard int) (int64, func(), error) { return admitByHeld(m.Held, shard) }
func (a *acquiring) Admit(shard int) (int64, func(), error)   { return admitByHeld(a.Held, shard) }

// TestDeadOwnerWaitsForTheNextClaim: a call for a shard whose owner cannot
// be reached (killed, its lease still running) waits for the next claim
// within the handoff wait (README: "the call waits for the next claim, up
// to 2 s in all"), not only 16 short pauses: here the claim comes 700 ms
// later, to this node, and the call is answered.
func TestDeadOwnerWaitsForTheNextClaim(t *testing.T) {
	q, _, owners := deadOwnerQuota(t, 10*time.Second)
	claimed := time.AfterFunc(700*time.Millisecond, func() {
		owners.mu.Lock()
		owners.owner, owners.token = "b", 8
		owners.mu.Unlock()
	})
	defer claimed.Stop()
	start := time.Now()
	if res, err := q.Charge(capped); err != nil || !res.Allowed {
		t.Fatalf("owner dead, the next claim 700 ms later: %+v %v after %v", res, err, time.Since(start))
	}
	if d := time.Since(start); d < 600*time.Millisecond {
		t.Fatalf("answered after %v, before the next claim", d)
	}
}
