package rpc

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cockroachdb/pebble/v2/vfs"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/storage"
)

// shareNode is a member with its own store, quota actors over the
// G-counter store, a routing client and a server: enough to charge, to
// load another member's share and to refund.
type shareNode struct {
	db     *storage.DB
	local  *quota.Client
	q      *Quota
	owners *fakeOwners
	addr   string
}

func startShareNode(t *testing.T, self, owner string) *shareNode {
	t.Helper()
	return startShareNodeWith(t, self, owner, nil)
}

// startShareNodeWith is startShareNode with the hourly windows the node
// handed over (nil: none), answered with its shares.
func startShareNodeWith(t *testing.T, self, owner string, windows *HandedWindows) *shareNode {
	t.Helper()
	return startShareNodeOn(t, self, owner, windows, storage.Options{})
}

// startShareNodeOn is startShareNodeWith on a store opened with opts (an
// in-memory file system).
func startShareNodeOn(t *testing.T, self, owner string, windows *HandedWindows, opts storage.Options) *shareNode {
	t.Helper()
	opts.FS, opts.Logger = vfs.NewMem(), quietLog
	db, err := storage.Open("d", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quietLog }))
	shared := NewSharedStore(db, self, windows)
	n := &shareNode{owners: &fakeOwners{self: self, owner: owner, token: 7, addrs: map[string]string{}}, db: db}
	n.local = quota.New(sys.Root, quota.Config{Shards: 2, Store: shared, Logger: quietLog})
	t.Cleanup(func() { n.local.Stop() })
	if n.q, err = NewQuota(QuotaConfig{Local: n.local, Owners: n.owners, Timeout: 2 * time.Second, Logger: quietLog}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.q.Close)
	shared.Attach(n.q)
	s, err := NewServer(ServerConfig{Quota: n.local, Owners: n.owners, Shares: db, Windows: windows, Discounts: n.q, Now: func() time.Time { return testNow }, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	n.addr = listen(t, s)
	return n
}

// chargeCall charges ch as call id at the member cli talks to (under claim
// token 7) and fails the test unless it is allowed.
func chargeCall(t *testing.T, cli NodeClient, ch *quota.Charge, id uint64) {
	t.Helper()
	m := chargeMsg(ch, 7)
	m.CallId = id
	if rep, err := cli.Charge(context.Background(), m); err != nil || !rep.Allowed {
		t.Fatalf("charge %d at a: %v %v", id, rep, err)
	}
}

// TestRefundDiscountedWhereTheShareWasRead: node a charges a call; node b
// loads the account, reading a's share with the call in it; a refunds the
// call (its caller settled it). b's load no longer counts the call, so the
// account is not strict by it; a call a charged and refunded after b's
// read is not taken out of b's load, which never held it; and b's next load
// reads a's share without either.
func TestRefundDiscountedWhereTheShareWasRead(t *testing.T) {
	a := startShareNode(t, "a", "a")
	b := startShareNode(t, "b", "a")
	a.owners.addrs["b"] = b.addr
	b.owners.addrs["a"] = a.addr
	cli := NewNodeClient(dial(t, a.addr))
	ctx := context.Background()
	ch := quota.Charge{Account: "acct_1", Kind: quota.Evaluate, Monthly: true, Total: true, Now: testNow,
		Limits: quota.LimitsFor(quota.PlanCustom, limit(1000), nil, testNow, testNow)}
	used := func(n *shareNode) int64 {
		t.Helper()
		u, err := n.local.Usage(quota.Usage{Account: ch.Account, Limits: ch.Limits, Now: testNow})
		if err != nil {
			t.Fatal(err)
		}
		return u.MonthUsed
	}
	charge := func(id uint64) { t.Helper(); chargeCall(t, cli, &ch, id) }
	settleAt := func(id uint64) {
		t.Helper()
		rep, err := cli.Settle(ctx, &SettleRequest{Version: version, Account: ch.Account, CallId: id, SentUnixNano: time.Now().UnixNano()})
		if err != nil || rep.Outcome != settleRefunded {
			t.Fatalf("settle %d at a: %v %v", id, rep, err)
		}
	}
	charge(1)
	charge(2)
	if n := used(b); n != 2 {
		t.Fatalf("b loaded %d calls from a's share; want 2", n)
	}
	settleAt(2)
	if n := used(a); n != 1 {
		t.Fatalf("a holds %d calls after its refund; want 1", n)
	}
	eventually(t, "b's load to give the refunded call back", func() bool { return used(b) == 1 })
	if a.q.Discounts() != 1 {
		t.Fatalf("a sent %d discounts; want 1", a.q.Discounts())
	}
	// Charged and refunded after b's read: b's load never held it.
	charge(3)
	settleAt(3)
	time.Sleep(100 * time.Millisecond)
	if a.q.Discounts() != 1 || used(b) != 1 {
		t.Fatalf("a call b never read: %d discounts sent, b holds %d; want 1 and 1", a.q.Discounts(), used(b))
	}
	// b's next load reads a's share as it is now.
	if _, err := b.local.Drop(func(string) bool { return true }, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := used(b); n != 1 {
		t.Fatalf("b's next load holds %d calls; want 1", n)
	}
}

// TestDiscountRequestChecked: a discount that is not one call's take of a
// named load is refused, and one naming a load not held changes nothing.
func TestDiscountRequestChecked(t *testing.T) {
	n := startShareNode(t, "b", "a")
	cli := NewNodeClient(dial(t, n.addr))
	ok := func() *DiscountRequest {
		return &DiscountRequest{Version: version, From: "a", Account: "acct_1", Month: uint32(storage.MonthOf(testNow)), Load: 9, Used: 1, Evaluations: 1}
	}
	for name, mod := range map[string]func(*DiscountRequest){
		"no version":     func(r *DiscountRequest) { r.Version = 0 },
		"no account":     func(r *DiscountRequest) { r.Account = "" },
		"month 13":       func(r *DiscountRequest) { r.Month = 202613 },
		"no load":        func(r *DiscountRequest) { r.Load = 0 },
		"two calls":      func(r *DiscountRequest) { r.Used = 2 },
		"negative":       func(r *DiscountRequest) { r.LimitHits = -1 },
		"no member":      func(r *DiscountRequest) { r.From = "" },
		"two kinds":      func(r *DiscountRequest) { r.Lookups = 1 },
		"hit and use":    func(r *DiscountRequest) { r.LimitHits = 1 },
		"bucket 2":       func(r *DiscountRequest) { r.Bucket = 2 },
		"hour, no stamp": func(r *DiscountRequest) { r.Hourly = true },
	} {
		r := ok()
		mod(r)
		if _, err := cli.Discount(context.Background(), r); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
	rep, err := cli.Discount(context.Background(), ok())
	if err != nil || rep.Applied {
		t.Fatalf("a load not held: %v %v", rep, err)
	}
}

// TestRefundDiscountGivesBackAHandedHour: node a handed its hourly window
// over with two calls in it; node b resumes the window when it loads the
// account. a refunds one of the calls, and b's window gives it back.
func TestRefundDiscountGivesBackAHandedHour(t *testing.T) {
	ch := quota.Charge{Account: "acct_1", Bucket: quota.Live, Kind: quota.Evaluate, Hourly: true, Monthly: true, Total: true, Now: testNow,
		Limits: quota.LimitsFor(quota.PlanCustom, limit(1000), nil, testNow, testNow)}
	windows := NewHandedWindows()
	a := startShareNodeWith(t, "a", "a", windows)
	b := startShareNode(t, "b", "a")
	a.owners.addrs["b"] = b.addr
	b.owners.addrs["a"] = a.addr
	cli := NewNodeClient(dial(t, a.addr))
	ctx := context.Background()
	for _, id := range []uint64{1, 2} {
		m := chargeMsg(&ch, 7)
		m.CallId = id
		if rep, err := cli.Charge(ctx, m); err != nil || !rep.Allowed {
			t.Fatalf("charge %d at a: %v %v", id, rep, err)
		}
	}
	var h [2]quota.HourWindow
	h[quota.Live] = quota.HourWindow{Start: testNow.Add(-time.Minute), N: 2}
	windows.Put([]quota.Handed{{Account: ch.Account, Hour: h}}, testNow)
	hour := func() int64 {
		t.Helper()
		u, err := b.local.Usage(quota.Usage{Account: ch.Account, Bucket: quota.Live, Limits: ch.Limits, Now: testNow})
		if err != nil {
			t.Fatal(err)
		}
		return u.UsedThisHour
	}
	if n := hour(); n != 2 {
		t.Fatalf("b resumed a window of %d calls; want 2", n)
	}
	rep, err := cli.Settle(ctx, &SettleRequest{Version: version, Account: ch.Account, CallId: 2, SentUnixNano: time.Now().UnixNano()})
	if err != nil || rep.Outcome != settleRefunded {
		t.Fatalf("settle at a: %v %v", rep, err)
	}
	eventually(t, "b's resumed window to give the refunded call back", func() bool { return hour() == 1 })
}

// TestCallBookReadsHolding: a refund is discounted in the reads that may
// hold its call, those that ended after the call began and began before
// its refund was stored, a read still under way included; not in a read
// over before the call, one begun after the refund, one that failed, or
// another month's; and once per member and load.
func TestCallBookReadsHolding(t *testing.T) {
	b := newCallBook()
	m := storage.MonthOf(testNow)
	read := func(from string, load uint64) *shareRead { return b.beginRead("acct_1", from, load, m) }
	before := read("m1", 1)
	b.endRead(before, true)
	across := read("m2", 2) // began before the call, ends after it began
	b.begin(7, "acct_1")
	b.endRead(across, true)
	during := read("m3", 3)
	b.endRead(during, true)
	again := read("m3", 3) // the same load asking again
	b.endRead(again, true)
	failed := read("m4", 4)
	b.endRead(failed, false)
	read("m5", 5) // not answered yet when the refund is stored
	b.endRead(read("m6", 6), true)
	other := b.beginRead("acct_1", "m7", 7, m+1)
	b.endRead(other, true)
	b.mu.Lock()
	e := b.find(7)
	e.state, e.charged = callRefunding, true
	b.mu.Unlock()
	b.refunded(e, nil)
	b.endRead(read("m8", 8), true) // after the refund
	var got []string
	for _, r := range b.readsHolding(e, m) {
		got = append(got, fmt.Sprintf("%s/%d", r.from, r.load))
	}
	want := []string{"m2/2", "m3/3", "m5/5", "m6/6"}
	if !slices.Equal(got, want) {
		t.Fatalf("reads holding the call: %v; want %v", got, want)
	}
	// A refund the quota did not confirm in time is most likely still
	// queued: the reads before it are discounted all the same.
	b.begin(8, "acct_1")
	b.endRead(read("m9", 9), true)
	b.mu.Lock()
	u := b.find(8)
	u.state, u.charged = callRefunding, true
	b.mu.Unlock()
	b.refunded(u, actors.ErrTimeout)
	var gotU []string
	for _, r := range b.readsHolding(u, m) {
		gotU = append(gotU, r.from)
	}
	if wantU := []string{"m5", "m9"}; u.state != callUncertain || !slices.Equal(gotU, wantU) {
		t.Fatalf("an unconfirmed refund (state %d): reads %v; want %v (m5's still open)", u.state, gotU, wantU)
	}
}

// TestSharesHoldChargesAnsweredAhead: a member answers charges ahead of
// their commit (the Interval mode; here nothing commits by itself, the
// sync being an hour away), yet the share it answers a new owner's load
// (Shares) and its daily counts (Days) hold every charge it acknowledged:
// both wait for the queued increments first.
func TestSharesHoldChargesAnsweredAhead(t *testing.T) {
	opts := storage.Options{SyncInterval: time.Hour}
	a := startShareNodeOn(t, "a", "a", nil, opts)
	b := startShareNodeOn(t, "b", "a", nil, opts)
	a.owners.addrs["b"] = b.addr
	b.owners.addrs["a"] = a.addr
	if _, ok := quota.Store(NewSharedStore(a.db, "a", nil)).(quota.AheadStore); !ok {
		t.Fatal("SharedStore is no quota.AheadStore")
	}
	cli := NewNodeClient(dial(t, a.addr))
	ctx := context.Background()
	ch := quota.Charge{Account: "acct_1", Kind: quota.Evaluate, Monthly: true, Total: true, Now: testNow,
		Limits: quota.LimitsFor(quota.PlanCustom, limit(1000), nil, testNow, testNow)}
	charge := func(id uint64) { t.Helper(); chargeCall(t, cli, &ch, id) }
	// The first charge loads the account, whose flush may leave the
	// committer a wake-up that stores the next increment at once (see
	// actors.GroupCommitter's kick); what follows stays queued.
	charge(1)
	if err := a.local.Flush(time.Second); err != nil {
		t.Fatal(err)
	}
	stored := func() int64 {
		t.Helper()
		c, _, err := a.db.LoadUsage(ch.Account, storage.MonthOf(testNow))
		if err != nil {
			t.Fatal(err)
		}
		return c.Used
	}
	charge(2)
	base := stored()
	charge(3)
	charge(4)
	charge(5)
	// Answered ahead: none of the last three is in a's store yet.
	if n := stored(); n != base || n > 2 {
		t.Fatalf("a's store holds %d calls after the last three (%d before); they were not answered ahead", n, base)
	}
	days, err := cli.Days(ctx, &DaysRequest{Version: version, Account: ch.Account, First: uint32(storage.DayOf(testNow)), Last: uint32(storage.DayOf(testNow))})
	if err != nil || len(days.Days) != 1 || days.Days[0].Used != 5 {
		t.Fatalf("a's daily counts: %v %v; want 5 calls today", days, err)
	}
	charge(6)
	u, err := b.local.Usage(quota.Usage{Account: ch.Account, Limits: ch.Limits, Now: testNow})
	if err != nil || u.MonthUsed != 6 {
		t.Fatalf("b loaded %d calls from a's share (err %v); want 6", u.MonthUsed, err)
	}
}

// TestLoadHoldsOwnChargesAnsweredAhead: a node's quota actors that forget
// an account (a shard it claimed: quota.Client.Forget) load it again from
// the sum of the shares, its own read from its store after the increments
// it answered ahead of their commit landed (the quota shard waits for its committer before the load).
func TestLoadHoldsOwnChargesAnsweredAhead(t *testing.T) {
	a := startShareNodeOn(t, "a", "a", nil, storage.Options{SyncInterval: time.Hour})
	ch := quota.Charge{Account: "acct_1", Kind: quota.Evaluate, Monthly: true, Total: true, Now: testNow,
		Limits: quota.LimitsFor(quota.PlanCustom, limit(1000), nil, testNow, testNow)}
	for i := range 5 {
		if res, err := a.local.Charge(ch); err != nil || !res.Allowed {
			t.Fatalf("charge %d: %+v %v", i+1, res, err)
		}
	}
	if _, err := a.local.Forget(func(string) bool { return true }, time.Second); err != nil {
		t.Fatal(err)
	}
	u, err := a.local.Usage(quota.Usage{Account: ch.Account, Limits: ch.Limits, Now: testNow})
	if err != nil || u.MonthUsed != 5 {
		t.Fatalf("reloaded %d calls (err %v); want 5", u.MonthUsed, err)
	}
}

// orderedFlush is a quota client whose flushes, and a Freezer whose
// freezes, are written down in order.
type orderedFlush struct {
	*quota.Client
	mu    sync.Mutex
	calls []string
}

func (o *orderedFlush) Flush(wait time.Duration) error {
	o.note("flush")
	return o.Client.Flush(wait)
}

func (o *orderedFlush) Freeze(context.Context, string) { o.note("freeze") }

func (o *orderedFlush) note(s string) {
	o.mu.Lock()
	o.calls = append(o.calls, s)
	o.mu.Unlock()
}

// TestSharesFreezeThenFlush: Shares stops the node using its slices of the
// account's allowance first and only then waits for the queued increments:
// a leased charge settled between the two would otherwise be answered
// ahead and left out of the share.
func TestSharesFreezeThenFlush(t *testing.T) {
	db, err := storage.Open("d", storage.Options{FS: vfs.NewMem(), Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quietLog }))
	local := quota.New(sys.Root, quota.Config{Shards: 1, Store: NewSharedStore(db, "a", nil), Logger: quietLog})
	defer local.Stop()
	o := &orderedFlush{Client: local}
	s, err := NewServer(ServerConfig{Quota: o, Owners: &fakeOwners{self: "a", owner: "a"}, Shares: db, Leases: o, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Shares(context.Background(), &SharesRequest{Version: version, Account: "acct_1", Month: 202611}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.calls, []string{"freeze", "flush"}) {
		t.Fatalf("Shares called %v; want the freeze, then the flush", o.calls)
	}
}
