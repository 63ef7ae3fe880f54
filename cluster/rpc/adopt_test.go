package rpc

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cockroachdb/pebble/v2/vfs"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/storage"
)

// TestAdoptStoresOrRefusesWhole: a hand-over with one malformed share is
// refused whole (InvalidArgument, nothing stored); a good one is stored
// under its origins and answered with the node's own share by Shares.
func TestAdoptStoresOrRefusesWhole(t *testing.T) {
	db, err := storage.Open("d", storage.Options{FS: vfs.NewMem(), Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.ApplyUsage([]storage.UsageDelta{{Account: "acct_1", Month: 202611, Counts: storage.MonthCounts{Used: 2}}}); err != nil {
		t.Fatal(err)
	}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quietLog }))
	local := quota.New(sys.Root, quota.Config{Shards: 1, Logger: quietLog})
	defer local.Stop()
	s, err := NewServer(ServerConfig{Quota: local, Owners: &fakeOwners{self: "a", owner: "a"}, Shares: db})
	if err != nil {
		t.Fatal(err)
	}
	good := &OriginShare{Node: "c", Account: "acct_1", Month: 202611, Used: 5, Evaluations: 9}
	ctx := context.Background()
	for name, r := range map[string]*AdoptRequest{
		"no sender":                  {Version: version, Shares: []*OriginShare{good}},
		"no version":                 {From: "c", Shares: []*OriginShare{good}},
		"month 13":                   {Version: version, From: "c", Shares: []*OriginShare{good, {Node: "c", Account: "acct_1", Month: 202613}}},
		"no origin":                  {Version: version, From: "c", Shares: []*OriginShare{good, {Account: "acct_1", Month: 202611}}},
		"negative":                   {Version: version, From: "c", Shares: []*OriginShare{good, {Node: "c", Account: "acct_2", Used: -1}}},
		"warned 256":                 {Version: version, From: "c", Shares: []*OriginShare{good, {Node: "c", Account: "acct_2", Warned: 256}}},
		"hourly warning before 1970": {Version: version, From: "c", Shares: []*OriginShare{good, {Node: "c", Account: "acct_2", HourWarnedCap: -1}}},
	} {
		if _, err := s.Adopt(ctx, r); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
	if got, err := db.AdoptedShares("acct_1", 202611); err != nil || len(got) != 0 {
		t.Fatalf("refused hand-overs stored %+v (%v)", got, err)
	}
	rep, err := s.Adopt(ctx, &AdoptRequest{Version: version, From: "c", Shares: []*OriginShare{good}})
	if err != nil || rep.Stored != 1 || rep.Node != "a" {
		t.Fatalf("adopt: %+v, %v", rep, err)
	}
	sh, err := s.Shares(ctx, &SharesRequest{Version: version, Account: "acct_1", Month: 202611})
	if err != nil || sh.Node != "a" || sh.Used != 2 || len(sh.Adopted) != 1 || !proto.Equal(sh.Adopted[0], good) {
		t.Fatalf("shares after adopting: %v, %v", sh, err)
	}
}

// FuzzAdoptRequest: whatever bytes a leaving peer sends, checking its shares
// never panics, and a share that passes converts back to the same message.
func FuzzAdoptRequest(f *testing.F) {
	b, err := proto.Marshal(&AdoptRequest{Version: version, From: "c", Shares: []*OriginShare{
		{Node: "c", Account: "acct_1", Month: 202611, Used: 5, Lookups: 1, Warned: 3, Evaluations: 9, LimitHits: 2},
		{Node: "b", Account: "acct_2", Evaluations: 4},
		{Node: "b", Account: "acct_3", Evaluations: 4, HourWarnedEighty: testNow.UnixNano(), HourWarnedCap: testNow.UnixNano() + 1},
	}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte{0x1a, 0x02, 0x18, 0x0d})
	f.Add([]byte{0x1a, 0x0c, 0x0a, 0x01, 0x62, 0x12, 0x01, 0x78, 0x48, 0x01, 0x50, 0xff, 0xff, 0x03})
	f.Fuzz(func(t *testing.T, b []byte) {
		var r AdoptRequest
		if proto.Unmarshal(b, &r) != nil {
			return
		}
		for _, m := range r.Shares {
			s, err := originShareOf(m)
			if err != nil {
				continue
			}
			m.ProtoReflect().SetUnknown(nil)
			if back := originShareMsg(&s); !proto.Equal(back, m) {
				t.Fatalf("%v converts back to %v", m, back)
			}
		}
	})
}

// FuzzSharesReply: whatever a peer answers to Shares, reading its adopted
// shares and hourly windows never panics; windows that pass are at most one
// per bucket, each with a count and a start.
func FuzzSharesReply(f *testing.F) {
	b, err := proto.Marshal(&SharesReply{Version: version, Node: "b", Month: 202611, Used: 4,
		Adopted:          []*OriginShare{{Node: "c", Account: "acct_1", Month: 202611, Used: 5, HourWarnedEighty: testNow.UnixNano()}},
		Hour:             []*HourWindow{{Bucket: 0, StartUnixNano: testNow.UnixNano(), N: 3}},
		HourWarnedEighty: testNow.UnixNano(), HourWarnedCap: testNow.UnixNano()})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte{0x52, 0x04, 0x08, 0x02, 0x18, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		var r SharesReply
		if proto.Unmarshal(b, &r) != nil {
			return
		}
		for _, a := range r.Adopted {
			_, _ = originShareOf(a)
		}
		w, ok := windowsOf(r.Hour)
		if !ok {
			return
		}
		for _, x := range w {
			if x.N < 0 || (x.N > 0 && x.Start.IsZero()) {
				t.Fatalf("windows %+v from %v", w, r.Hour)
			}
		}
	})
}

// TestRequestAccountBounded: a peer's request naming an account longer than
// any account id (a peer bug) is refused with InvalidArgument by every
// handler that takes one, as Discount, Settle and Unuse refuse it, before
// it reaches the quota actors' memory, the call book or the store (an
// adopted share's key stays for good).
func TestRequestAccountBounded(t *testing.T) {
	db, err := storage.Open("d", storage.Options{FS: vfs.NewMem(), Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quietLog }))
	local := quota.New(sys.Root, quota.Config{Shards: 1, Logger: quietLog})
	defer local.Stop()
	s, err := NewServer(ServerConfig{Quota: local, Owners: &fakeOwners{self: "a", owner: "a", token: 7}, Shares: db, Now: func() time.Time { return testNow }})
	if err != nil {
		t.Fatal(err)
	}
	huge := "acct_" + strings.Repeat("x", maxObsAccountID)
	ch := capped
	ch.Account = huge
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	limits := limitsMsg(&capped.Limits)
	for name, call := range map[string]func() error{
		"charge": func() error { _, err := s.Charge(ctx, chargeMsg(&ch, 7)); return err },
		"usage": func() error {
			_, err := s.Usage(ctx, &UsageRequest{Version: version, Account: huge, Limits: limits, NowUnixNano: testNow.UnixNano(), Token: 7})
			return err
		},
		"lease": func() error {
			_, err := s.Lease(ctx, &LeaseRequest{Version: version, Account: huge, Holder: "b", Limits: limits, Hourly: true, Want: 1, ForNanos: int64(time.Second), Token: 7})
			return err
		},
		"collect": func() error {
			_, err := s.Collect(ctx, &CollectRequest{Version: version, Account: huge, BudgetEvents: 10, BudgetBytes: 1000, Bytes: 1, Token: 7})
			return err
		},
		"shares": func() error {
			_, err := s.Shares(ctx, &SharesRequest{Version: version, Account: huge, Month: 202611, From: "b"})
			return err
		},
		"days": func() error {
			_, err := s.Days(ctx, &DaysRequest{Version: version, Account: huge, First: 20000, Last: 20001})
			return err
		},
		"adopt": func() error {
			_, err := s.Adopt(ctx, &AdoptRequest{Version: version, From: "c", Shares: []*OriginShare{{Node: "c", Account: huge, Month: 202611, Used: 1}}})
			return err
		},
	} {
		if err := call(); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s for a %d-byte account: %v, want InvalidArgument", name, len(huge), err)
		}
	}
	if got, err := db.AdoptedShares(huge, 202611); err != nil || len(got) != 0 {
		t.Fatalf("stored %+v (%v)", got, err)
	}
}
