package rpc

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fraudd/fraudd/actors/quota"
)

// stallQuota is the owner's quota with a pause after a charge: the charge
// is made, then the answer waits for gate (a SIGSTOP between charging and
// answering).
type stallQuota struct {
	*quota.Client
	stall   atomic.Bool
	stalled chan struct{}
	gate    chan struct{}
}

func (s *stallQuota) Charge(c quota.Charge) (quota.ChargeResult, error) {
	res, err := s.Client.Charge(c)
	if s.stall.CompareAndSwap(true, false) {
		s.stalled <- struct{}{}
		<-s.gate
	}
	return res, err
}

// serveStalling is serve with stallQuota and, when replies is set, a
// pause after each Charge handler returns (its answer is late, not its
// charge) until gate closes.
func serveStalling(tb testing.TB, replies *atomic.Bool, gate chan struct{}) (string, *stallQuota) {
	tb.Helper()
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quietLog }))
	sq := &stallQuota{Client: quota.New(sys.Root, quota.Config{Shards: 2, Logger: quietLog}), stalled: make(chan struct{}, 1), gate: gate}
	s, err := NewServer(ServerConfig{Quota: sq, Owners: &fakeOwners{self: "a", owner: "a", token: 7}, Now: func() time.Time { return testNow }, Logger: quietLog})
	if err != nil {
		tb.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	g := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		rep, err := h(ctx, req)
		if strings.HasSuffix(info.FullMethod, "/Charge") && replies.CompareAndSwap(true, false) {
			sq.stalled <- struct{}{}
			<-gate
		}
		return rep, err
	}))
	s.Register(g)
	go g.Serve(l)
	tb.Cleanup(func() { g.Stop(); sq.Client.Stop() })
	return l.Addr().String(), sq
}

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
// deadline. The caller answers ErrNoOwner (503) only after settling the
// call with the owner, and the owner gives the charge back: the call does
// not count. A call in time still counts.
func TestSettleOwnerPausedAfterCharging(t *testing.T) {
	for _, where := range []string{"charging", "answering"} {
		t.Run(where, func(t *testing.T) {
			var replies atomic.Bool
			gate := make(chan struct{})
			addr, owner := serveStalling(t, &replies, gate)
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
			if where == "answering" {
				// The owner's Settle handler runs (only the answer of the
				// call is held): the refund is made before the caller
				// answers.
				if err := <-errc; !errors.Is(err, ErrNoOwner) {
					t.Fatalf("caller after the deadline: %v", err)
				}
				if n := usedThisHour(t, owner.Client); n != 1 {
					t.Fatalf("owner holds %d calls after the caller answered 503; want 1", n)
				}
				close(gate)
			} else {
				// The charge itself is under way when the Settle comes:
				// the caller may answer before it is done, and its runner
				// gives it back when it is.
				err := <-errc
				if !errors.Is(err, ErrNoOwner) {
					t.Fatalf("caller after the deadline: %v", err)
				}
				close(gate)
				deadline := time.Now().Add(5 * time.Second)
				for usedThisHour(t, owner.Client) != 1 {
					if time.Now().After(deadline) {
						t.Fatalf("owner holds %d calls after its paused charge resumed; want 1", usedThisHour(t, owner.Client))
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
			if q.Settles() != 1 {
				t.Fatalf("settles %d, want 1", q.Settles())
			}
			if _, err := q.Charge(capped); err != nil {
				t.Fatal(err)
			}
			if n := usedThisHour(t, owner.Client); n != 2 {
				t.Fatalf("owner holds %d calls after one more in time; want 2", n)
			}
		})
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
