package rpc

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/actors/checks"
	"github.com/fraudd/fraudd/actors/events"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/intel/device"
)

func usedThisHour(t *testing.T, c *quota.Client) int64 {
	t.Helper()
	u, err := c.Usage(quota.Usage{Account: capped.Account, Limits: capped.Limits, Now: testNow})
	if err != nil {
		t.Fatal(err)
	}
	return u.UsedThisHour
}

// TestSettleOwnerPausedAfterCharging: the owner charges a call and stops
// (in the charge, or with its answer on the way) past the caller's
// deadline. The caller answers ErrNoOwner (503) and settles the call with
// the owner in the background, and the owner gives the charge back: the
// call does not count. A call in time still counts.
func TestSettleOwnerPausedAfterCharging(t *testing.T) {
	for _, where := range []string{"charging", "answering"} {
		t.Run(where, func(t *testing.T) {
			var replies atomic.Bool
			addr, owner := serveHooked(t, &replies)
			sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quietLog }))
			local := quota.New(sys.Root, quota.Config{Shards: 2, Logger: quietLog})
			defer local.Stop()
			q, err := NewQuota(QuotaConfig{Local: local, Owners: &fakeOwners{self: "b", owner: "a", token: 7, addrs: map[string]string{"a": addr}},
				Timeout: 200 * time.Millisecond, Workers: 2, Logger: quietLog})
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			if _, err := q.Charge(capped); err != nil {
				t.Fatal(err)
			}
			if where == "charging" {
				owner.stall.Store(true)
			} else {
				replies.Store(true)
			}
			errc := make(chan error, 1)
			go func() {
				_, err := q.Charge(capped)
				errc <- err
			}()
			<-owner.stalled
			// The call is charged at the owner and its caller waits.
			if n := usedThisHour(t, owner.Client); n != 2 {
				t.Fatalf("owner holds %d calls while paused; want 2", n)
			}
			if err := <-errc; !errors.Is(err, ErrNoOwner) {
				t.Fatalf("caller after the deadline: %v", err)
			}
			if q.Settles() != 1 {
				t.Fatalf("settles %d, want 1", q.Settles())
			}
			if where == "charging" {
				// The settle waits for the charge under way; its runner
				// gives it back once it is done.
				time.Sleep(300 * time.Millisecond)
				if n := usedThisHour(t, owner.Client); n != 2 {
					t.Fatalf("owner holds %d calls while the charge is under way; want 2", n)
				}
			}
			// Only the call's answer is held when "answering": the owner's
			// Settle handler runs, and the refund is made meanwhile.
			if where == "answering" {
				waitUsed(t, owner.Client, 1, "after the caller answered 503, with the call's answer still held")
			}
			close(owner.gate)
			waitUsed(t, owner.Client, 1, "after the owner resumed")
			if _, err := q.Charge(capped); err != nil {
				t.Fatal(err)
			}
			if n := usedThisHour(t, owner.Client); n != 2 {
				t.Fatalf("owner holds %d calls after one more in time; want 2", n)
			}
		})
	}
}

// waitUsed waits up to 5 s for c to hold want calls this hour.
func waitUsed(t *testing.T, c *quota.Client, want int64, when string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := usedThisHour(t, c)
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("owner holds %d calls %s; want %d", n, when, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSettleBeforeArrival: a call settled before it reaches its owner (its
// caller gave up while it was on its way) is refused when it comes, and
// charges nothing; a settle for a call sent before the node started is
// answered unknown, not void; a settle for another account's call is
// refused.
func TestSettleBeforeArrival(t *testing.T) {
	addr, local := serve(t, &fakeOwners{self: "a", owner: "a", token: 7})
	cli := NewNodeClient(dial(t, addr))
	ctx := context.Background()
	rep, err := cli.Settle(ctx, &SettleRequest{Version: version, Account: capped.Account, CallId: 42, SentUnixNano: time.Now().Add(2 * vouchMargin).UnixNano()})
	if err != nil || rep.Outcome != settleVoid {
		t.Fatalf("settle of a call not received: %v %v", rep, err)
	}
	m := chargeMsg(&capped, 7)
	m.CallId = 42
	if _, err := cli.Charge(ctx, m); status.Code(err) != codes.Aborted {
		t.Fatalf("a settled call arriving: %v", err)
	}
	if u, _ := local.Usage(quota.Usage{Account: capped.Account, Limits: capped.Limits, Now: testNow}); u.UsedThisHour != 0 {
		t.Fatalf("a settled call was charged: %+v", u)
	}
	rep, err = cli.Settle(ctx, &SettleRequest{Version: version, Account: capped.Account, CallId: 43, SentUnixNano: time.Now().Add(-time.Hour).UnixNano()})
	if err != nil || rep.Outcome != settleUnknown {
		t.Fatalf("settle of a call from before the node started: %v %v", rep, err)
	}
	m.CallId = 44
	if _, err := cli.Charge(ctx, m); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Settle(ctx, &SettleRequest{Version: version, Account: "acct_other", CallId: 44, SentUnixNano: time.Now().UnixNano()}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("settle naming another account: %v", err)
	}
	rep, err = cli.Settle(ctx, &SettleRequest{Version: version, Account: capped.Account, CallId: 44, SentUnixNano: time.Now().UnixNano()})
	if err != nil || rep.Outcome != settleRefunded {
		t.Fatalf("settle of a charged call: %v %v", rep, err)
	}
	if rep, err = cli.Settle(ctx, &SettleRequest{Version: version, Account: capped.Account, CallId: 44, SentUnixNano: time.Now().UnixNano()}); err != nil || rep.Outcome != settleRefunded {
		t.Fatalf("settling twice: %v %v", rep, err)
	}
	if u, _ := local.Usage(quota.Usage{Account: capped.Account, Limits: capped.Limits, Now: testNow}); u.UsedThisHour != 0 {
		t.Fatalf("a settled call (twice) still counts: %+v", u)
	}
	if _, err := cli.Charge(ctx, m); status.Code(err) != codes.Aborted {
		t.Fatalf("a call id used again: %v", err)
	}
}

// TestCallBookRemembersAcrossAPause: the book forgets a call only after
// callKeep of its running time, and a pause counts as at most maxStep of
// it.
func TestCallBookRemembersAcrossAPause(t *testing.T) {
	b := newCallBook()
	b.begin(7, "a")
	b.mu.Lock()
	b.last = b.last.Add(-time.Hour) // an hour-long SIGSTOP
	b.tick()
	kept := b.find(7) != nil
	for range 2 {
		b.running += callKeep
		b.tick()
	}
	gone := b.find(7) == nil
	b.mu.Unlock()
	if !kept || !gone {
		t.Fatalf("kept across a pause %v, forgotten after twice callKeep %v", kept, gone)
	}
}

// hookQuota is the owner's quota with failures to order: a charge made
// but answered actors.ErrTimeout (the shard answered after the wait gave
// up), a stall after a charge, a refund made but answered ErrTimeout, a
// refund that fails and does nothing.
type hookQuota struct {
	*quota.Client
	chargeLate, stall, refundLate, refundFail atomic.Bool
	stalled                                   chan struct{}
	gate                                      chan struct{}
}

func (h *hookQuota) Charge(c quota.Charge) (quota.ChargeResult, error) {
	res, err := h.Client.Charge(c)
	if h.stall.CompareAndSwap(true, false) {
		h.stalled <- struct{}{}
		<-h.gate
	}
	if err == nil && h.chargeLate.CompareAndSwap(true, false) {
		return quota.ChargeResult{}, actors.ErrTimeout
	}
	return res, err
}

func (h *hookQuota) Refund(f quota.Refund) error {
	if h.refundFail.Load() {
		return quota.ErrUnavailable
	}
	err := h.Client.Refund(f)
	if err == nil && h.refundLate.CompareAndSwap(true, false) {
		return actors.ErrTimeout
	}
	return err
}

// serveHooked serves an owner "a" on hookQuota. When replies is set, the
// answer of the next Charge, once its handler returned, waits for the
// gate too (the charge made, its answer not yet sent).
func serveHooked(tb testing.TB, replies *atomic.Bool) (string, *hookQuota) {
	tb.Helper()
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quietLog }))
	h := &hookQuota{Client: quota.New(sys.Root, quota.Config{Shards: 2, Logger: quietLog}), stalled: make(chan struct{}, 1), gate: make(chan struct{})}
	tb.Cleanup(func() { h.Client.Stop() })
	s, err := NewServer(ServerConfig{Quota: h, Owners: &fakeOwners{self: "a", owner: "a", token: 7}, Now: func() time.Time { return testNow }, Logger: quietLog})
	if err != nil {
		tb.Fatal(err)
	}
	if replies == nil {
		return listen(tb, s), h
	}
	return listenNode(tb, &heldReplies{Server: s, replies: replies, h: h}), h
}

// heldReplies holds the answer of a Charge, unary or on the Pipe, once
// replies is set: the call ran at the owner and its caller waits.
type heldReplies struct {
	*Server
	replies *atomic.Bool
	h       *hookQuota
}

func (n *heldReplies) Charge(ctx context.Context, r *ChargeRequest) (*ChargeReply, error) {
	rep, err := n.Server.Charge(ctx, r)
	if n.replies.CompareAndSwap(true, false) {
		n.h.stalled <- struct{}{}
		<-n.h.gate
	}
	return rep, err
}

func (n *heldReplies) Pipe(stream Node_PipeServer) error { return n.servePipe(stream, n) }

func settleReq(id uint64) *SettleRequest {
	return &SettleRequest{Version: version, Account: capped.Account, CallId: id, SentUnixNano: time.Now().UnixNano()}
}

// TestSettleUncertainRefund: a refund the quota did not answer in time
// may still be made, so the node answers unknown, now and on every retry,
// rather than refund again and take back a call answered 200.
func TestSettleUncertainRefund(t *testing.T) {
	addr, owner := serveHooked(t, nil)
	cli := NewNodeClient(dial(t, addr))
	ctx := context.Background()
	if _, err := cli.Charge(ctx, chargeMsg(&capped, 7)); err != nil { // answered: it counts
		t.Fatal(err)
	}
	m := chargeMsg(&capped, 7)
	m.CallId = 99
	if _, err := cli.Charge(ctx, m); err != nil { // its answer is lost
		t.Fatal(err)
	}
	owner.refundLate.Store(true)
	for i := range 2 {
		if rep, err := cli.Settle(ctx, settleReq(99)); err != nil || rep.Outcome != settleUnknown {
			t.Fatalf("settle %d after a refund that timed out: %v %v", i+1, rep, err)
		}
	}
	if n := usedThisHour(t, owner.Client); n != 1 {
		t.Fatalf("owner counts %d calls; want 1 (the refund, late, was made once)", n)
	}
}

// TestSettleRunnerRefundFails: a Settle that comes while its call is
// being charged is told to ask again; the runner's refund fails, and the
// next Settle, once the store is back, gives the call back.
func TestSettleRunnerRefundFails(t *testing.T) {
	addr, owner := serveHooked(t, nil)
	cli := NewNodeClient(dial(t, addr))
	ctx := context.Background()
	owner.stall.Store(true)
	owner.refundFail.Store(true)
	m := chargeMsg(&capped, 7)
	m.CallId = 77
	errc := make(chan error, 1)
	go func() { _, err := cli.Charge(ctx, m); errc <- err }()
	<-owner.stalled
	if _, err := cli.Settle(ctx, settleReq(77)); status.Code(err) != codes.Unavailable {
		t.Fatalf("settle while the call is charged: %v", err)
	}
	close(owner.gate)
	if err := <-errc; status.Code(err) != codes.Aborted {
		t.Fatalf("the settled call's own answer: %v", err)
	}
	if _, err := cli.Settle(ctx, settleReq(77)); status.Code(err) != codes.Unavailable {
		t.Fatalf("settle while the store fails: %v", err)
	}
	if n := usedThisHour(t, owner.Client); n != 1 {
		t.Fatalf("owner counts %d calls before the refund could be stored; want 1", n)
	}
	owner.refundFail.Store(false)
	if rep, err := cli.Settle(ctx, settleReq(77)); err != nil || rep.Outcome != settleRefunded {
		t.Fatalf("settle once the store is back: %v %v", rep, err)
	}
	if n := usedThisHour(t, owner.Client); n != 0 {
		t.Fatalf("owner counts %d calls after the refund; want 0", n)
	}
}

// TestSettleChargeTimedOut: an owner whose quota did not answer a charge
// in time (the shard may still make it) answers Unavailable, not "nothing
// done"; the caller settles the call, and the owner answers unknown.
func TestSettleChargeTimedOut(t *testing.T) {
	addr, owner := serveHooked(t, nil)
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quietLog }))
	local := quota.New(sys.Root, quota.Config{Shards: 2, Logger: quietLog})
	defer local.Stop()
	q, err := NewQuota(QuotaConfig{Local: local, Owners: &fakeOwners{self: "b", owner: "a", token: 7, addrs: map[string]string{"a": addr}},
		Timeout: 500 * time.Millisecond, Workers: 2, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	owner.chargeLate.Store(true)
	_, err = q.Charge(capped)
	if !errors.Is(err, ErrNoOwner) || status.Code(err) != codes.Unavailable {
		t.Fatalf("caller: %v", err)
	}
	if n := q.Settles(); n != 1 {
		t.Fatalf("settles %d, want 1", n)
	}
}

// givenUpStep is a chained charge whose caller gave up before it began.
type givenUpStep struct{ step }

func (*givenUpStep) Begin() bool { return false }

// TestQueuedStepGivenUpIsNotSent: a chained charge whose caller stopped
// waiting while it sat in a peer's queue (and answered 503) is dropped by
// the worker, never sent to the owner; the same at a local owner's shard.
func TestQueuedStepGivenUpIsNotSent(t *testing.T) {
	addr, owner := serve(t, &fakeOwners{self: "a", owner: "a", token: 7})
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quietLog }))
	local := quota.New(sys.Root, quota.Config{Shards: 2, Logger: quietLog})
	defer local.Stop()
	q, err := NewQuota(QuotaConfig{Local: local, Owners: &fakeOwners{self: "b", owner: "a", token: 7, addrs: map[string]string{"a": addr}}, Workers: 1, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	gone := &givenUpStep{step{c: capped, done: make(chan struct{})}}
	q.ChargeThen(gone)
	local.ChargeThen(gone)
	// A charge after it on the same worker and shard: once it is answered,
	// the dropped one was handled.
	if _, err := chargeThen(q, capped); err != nil {
		t.Fatal(err)
	}
	if _, err := local.Charge(capped); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gone.done:
		t.Fatal("a step whose caller gave up was answered")
	default:
	}
	if n := usedThisHour(t, owner); n != 1 {
		t.Fatalf("owner counts %d; want 1 (the step given up was sent)", n)
	}
	if n := usedThisHour(t, local); n != 1 {
		t.Fatalf("local shard counts %d; want 1 (the step given up was charged)", n)
	}
	if n := q.RemoteCalls(); n != 1 {
		t.Fatalf("%d round trips; want 1", n)
	}
}

// TestSettleGivesTheEventUseBack: an evaluation settled after the owner
// charged it and resolved its device event (stored at the owner) gives
// the event's use back with the charge, so the evaluation tried again is
// not a replay.
func TestSettleGivesTheEventUseBack(t *testing.T) {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quietLog }))
	ownerQuota := quota.New(sys.Root, quota.Config{Shards: 2, Logger: quietLog})
	t.Cleanup(func() { ownerQuota.Stop() })
	ownerEvents := events.New(sys.Root, events.Config{Shards: 2, Node: NodeRoute("a"), Logger: quietLog})
	t.Cleanup(func() { ownerEvents.Stop() })
	s, err := NewServer(ServerConfig{Quota: ownerQuota, Owners: &fakeOwners{self: "a", owner: "a", token: 7}, Now: func() time.Time { return testNow },
		Events: ownerEvents, Owner: &checks.OwnerParts{Quota: ownerQuota, Events: ownerEvents, History: &fakeHistory{}}, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	cli := NewNodeClient(dial(t, listen(t, s)))
	id, err := ownerEvents.Collect(events.Collected{Account: capped.Account, Now: testNow, Signals: []byte("{}"), Verdict: &device.Verdict{VisitorID: "visitor-a", Complete: true}})
	if err != nil {
		t.Fatal(err)
	}
	w := checks.OwnerWork{Resolve: &events.Resolve{ID: id, Account: capped.Account}}
	m := evaluateMsg(&capped, w, 7)
	m.Charge.CallId = 5
	rep, err := cli.Evaluate(context.Background(), m) // its answer is lost
	if err != nil || rep.Resolved == nil || rep.Resolved.Replayed {
		t.Fatalf("evaluate: %v %v", rep, err)
	}
	if rep, err := cli.Settle(context.Background(), settleReq(5)); err != nil || rep.Outcome != settleRefunded {
		t.Fatalf("settle: %v %v", rep, err)
	}
	m.Charge.CallId = 6 // tried again
	rep, err = cli.Evaluate(context.Background(), m)
	if err != nil || rep.Resolved == nil || rep.Resolved.Replayed {
		t.Fatalf("the evaluation tried again: %v %v", rep, err)
	}
	if n := usedThisHour(t, ownerQuota); n != 1 {
		t.Fatalf("owner counts %d calls; want 1", n)
	}
}

// TestChargeMemoKeepsWhatARefundNeeds: the book's short form of a charge
// gives back the same refund as the charge itself (limits aside, which a
// refund does not read).
func TestChargeMemoKeepsWhatARefundNeeds(t *testing.T) {
	for _, c := range []quota.Charge{
		{Account: "acct_1", Bucket: quota.Test, Kind: quota.Lookup, Monthly: true, Total: true, Now: testNow.Add(1234567)},
		{Account: "acct_2", Bucket: quota.Live, Kind: quota.Evaluate, Hourly: true, Monthly: true, Now: testNow},
	} {
		for _, r := range []quota.ChargeResult{{Allowed: true}, {Refusal: quota.RefusedMonthly}} {
			m := memoOf(&c, &r)
			got := m.refund(c.Account)
			want := quota.Refund{Charge: c, Result: quota.ChargeResult{Allowed: r.Allowed, Refusal: r.Refusal}}
			if !got.Charge.Now.Equal(want.Charge.Now) {
				t.Fatalf("now %v, want %v", got.Charge.Now, want.Charge.Now)
			}
			got.Charge.Now = want.Charge.Now
			if got != want {
				t.Fatalf("refund %+v, want %+v", got, want)
			}
		}
	}
}

// TestSettleGivesTheEventUseBackAtAThirdNode: an evaluation whose event a
// third node stores counts the use there; settling the call gives it back
// there too, so the evaluation tried again is not a replay.
func TestSettleGivesTheEventUseBackAtAThirdNode(t *testing.T) {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quietLog }))
	// c stores the event and answers Resolve and Unuse for it.
	c, atC, id := eventStorer(t, sys, "c")
	cAddr := listen(t, c)
	// a owns the account and reaches c for the event.
	ownerQuota := quota.New(sys.Root, quota.Config{Shards: 2, Logger: quietLog})
	t.Cleanup(func() { ownerQuota.Stop() })
	ownerEvents := events.New(sys.Root, events.Config{Shards: 2, Node: NodeRoute("a"), Logger: quietLog})
	t.Cleanup(func() { ownerEvents.Stop() })
	// (Its view names c as a member: fakeOwners lists self and owner; this
	// client only routes events.)
	peers, err := NewQuota(QuotaConfig{Local: ownerQuota, Owners: &fakeOwners{self: "a", owner: "c", token: 7, addrs: map[string]string{"c": cAddr}}, Timeout: 2 * time.Second, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(peers.Close)
	routed := peers.Events(ownerEvents)
	s, err := NewServer(ServerConfig{Quota: ownerQuota, Owners: &fakeOwners{self: "a", owner: "a", token: 7}, Now: func() time.Time { return testNow },
		Events: ownerEvents, EventUses: routed, Owner: &checks.OwnerParts{Quota: ownerQuota, Events: routed, History: &fakeHistory{}}, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	cli := NewNodeClient(dial(t, listen(t, s)))
	w := checks.OwnerWork{Resolve: &events.Resolve{ID: id, Account: capped.Account}}
	m := evaluateMsg(&capped, w, 7)
	m.Charge.CallId = 5
	rep, err := cli.Evaluate(context.Background(), m) // its answer is lost
	if err != nil || rep.Resolved == nil || !rep.Resolved.Found || rep.Resolved.Replayed {
		t.Fatalf("evaluate: %v %v", rep, err)
	}
	if res, err := atC.Peek(events.Resolve{ID: id, Account: capped.Account, Now: testNow}); err != nil || !res.Replayed {
		t.Fatalf("c did not count the use: %+v %v", res, err)
	}
	if rep, err := cli.Settle(context.Background(), settleReq(5)); err != nil || rep.Outcome != settleRefunded {
		t.Fatalf("settle: %v %v", rep, err)
	}
	// The use goes back at c in the background.
	deadline := time.Now().Add(5 * time.Second)
	for {
		res, err := atC.Peek(events.Resolve{ID: id, Account: capped.Account, Now: testNow})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Replayed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the use was not given back at the node that stores the event")
		}
		time.Sleep(10 * time.Millisecond)
	}
	m.Charge.CallId = 6 // tried again
	rep, err = cli.Evaluate(context.Background(), m)
	if err != nil || rep.Resolved == nil || rep.Resolved.Replayed {
		t.Fatalf("the evaluation tried again: %v %v", rep, err)
	}
}

// TestUnuseRequestChecked: a malformed Unuse changes nothing and says why.
func TestUnuseRequestChecked(t *testing.T) {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quietLog }))
	s, evs, id := eventStorer(t, sys, "c")
	if _, err := evs.Resolve(events.Resolve{ID: id, Account: capped.Account, Now: testNow}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*UnuseRequest{
		{Id: id[:], Account: capped.Account, UsedUnixNano: testNow.UnixNano()},                          // no version
		{Version: version, Id: id[:3], Account: capped.Account, UsedUnixNano: testNow.UnixNano()},       // short id
		{Version: version, Id: id[:], UsedUnixNano: testNow.UnixNano()},                                 // no account
		{Version: version, Id: id[:], Account: capped.Account},                                          // no time
		{Version: version, Id: id[:], Account: strings.Repeat("a", maxObsAccountID+1), UsedUnixNano: 1}, // too long
	} {
		if _, err := s.Unuse(context.Background(), r); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%+v: %v, want InvalidArgument", r, err)
		}
	}
	// Another account's: nothing given back.
	if _, err := s.Unuse(context.Background(), &UnuseRequest{Version: version, Id: id[:], Account: "acct_other", UsedUnixNano: testNow.UnixNano()}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if res, _ := evs.Peek(events.Resolve{ID: id, Account: capped.Account, Now: testNow}); !res.Replayed {
		t.Fatal("another account's Unuse gave the use back")
	}
	if s2, _ := NewServer(ServerConfig{Quota: s.cfg.Quota, Owners: &fakeOwners{self: "c", owner: "c", token: 7}, Now: func() time.Time { return testNow }, Logger: quietLog}); s2 != nil {
		if _, err := s2.Unuse(context.Background(), &UnuseRequest{Version: version, Id: id[:], Account: capped.Account, UsedUnixNano: 1}); status.Code(err) != codes.Unavailable {
			t.Fatalf("a node without events: %v", err)
		}
	}
}

// eventStorer is a node, self, whose device events hold one event of
// capped's, collected there; its server answers Resolve and Unuse.
func eventStorer(t *testing.T, sys *actor.ActorSystem, self string) (*Server, *events.Client, events.EventID) {
	t.Helper()
	evs := events.New(sys.Root, events.Config{Shards: 1, Node: NodeRoute(self), Logger: quietLog})
	t.Cleanup(func() { evs.Stop() })
	q := quota.New(sys.Root, quota.Config{Shards: 1, Logger: quietLog})
	t.Cleanup(func() { q.Stop() })
	s, err := NewServer(ServerConfig{Quota: q, Owners: &fakeOwners{self: self, owner: self, token: 7}, Now: func() time.Time { return testNow }, Events: evs, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	id, err := evs.Collect(events.Collected{Account: capped.Account, Now: testNow, Signals: []byte("{}"), Verdict: &device.Verdict{VisitorID: "visitor-" + self, Complete: true}})
	if err != nil {
		t.Fatal(err)
	}
	return s, evs, id
}

// TestChargeMemoKeepsTheHour: a settled call's refund names the hourly
// window its charge counted in when an hourly cap set the answer's reset
// (quota.Refund.HourEnds), so that a refund that comes after the next
// window began gives nothing back to it; without an hourly cap it names
// none.
func TestChargeMemoKeepsTheHour(t *testing.T) {
	c := capped
	c.Now = testNow
	r := quota.ChargeResult{Allowed: true, Capped: true, Limit: 5, Reset: testNow.Add(time.Hour).Unix()}
	m := memoOf(&c, &r)
	if got := m.refund("acct").HourEnds; got != r.Reset {
		t.Fatalf("hourly cap: refund names hour end %d, want %d", got, r.Reset)
	}
	c.Limits.Hourly = quota.NoLimit
	m = memoOf(&c, &r)
	if got := m.refund("acct").HourEnds; got != 0 {
		t.Fatalf("no hourly cap: refund names hour end %d, want 0", got)
	}
}

// TestSettleCutShortByCloseLogs: a settle still under way when this
// node's quota client closes (its owner slow to answer, cut off) ends with
// the log line every settle that cannot vouch for its call ends with.
// Before, it ended silently, and a call answered 503 counted at its owner
// with no trace.
func TestSettleCutShortByCloseLogs(t *testing.T) {
	s, owner := newTestServer(t, &fakeOwners{self: "a", owner: "a", token: 7})
	n := &deafSettle{Server: s, gate: make(chan struct{})}
	addr := listenNode(t, n)
	defer close(n.gate)
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quietLog }))
	local := quota.New(sys.Root, quota.Config{Shards: 2, Logger: quietLog})
	defer local.Stop()
	var logs syncBuf
	q, err := NewQuota(QuotaConfig{Local: local, Owners: &fakeOwners{self: "b", owner: "a", token: 7, addrs: map[string]string{"a": addr}},
		Timeout: 200 * time.Millisecond, Workers: 2, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	_, err = q.Charge(capped)
	if !errors.Is(err, ErrNoOwner) {
		t.Fatalf("caller: %v", err)
	}
	time.Sleep(100 * time.Millisecond)
	q.Close()
	if q.Settles() != 1 || hourCount(t, owner, capped) != 1 || !strings.Contains(logs.String(), "may have counted") {
		t.Fatalf("settles %d, owner counts %d, the caller logged %q", q.Settles(), hourCount(t, owner, capped), logs.String())
	}
}

// deafSettle answers no Settle, and holds each Charge's answer until
// gate closes.
type deafSettle struct {
	*Server
	gate chan struct{}
}

func (n *deafSettle) Settle(context.Context, *SettleRequest) (*SettleReply, error) {
	return nil, status.Error(codes.Unavailable, "partitioned")
}
func (n *deafSettle) Charge(ctx context.Context, r *ChargeRequest) (*ChargeReply, error) {
	rep, err := n.Server.Charge(ctx, r)
	<-n.gate // the answer is held past the caller's deadline
	return rep, err
}
func (n *deafSettle) Pipe(stream Node_PipeServer) error { return n.servePipe(stream, n) }

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }
