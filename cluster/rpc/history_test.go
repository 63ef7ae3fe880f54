package rpc

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cockroachdb/pebble/v2/vfs"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fraudd/fraudd/actors/devicehist"
	"github.com/fraudd/fraudd/cluster"
	"github.com/fraudd/fraudd/internal/secrets"
	"github.com/fraudd/fraudd/storage"
)

var eventSeq atomic.Int64

func observeOn(t *testing.T, n *node, customer, device string, times int) devicehist.Facts {
	t.Helper()
	var f devicehist.Facts
	for range times {
		var err error
		if f, err = n.dh.Observe(devicehist.Observation{Customer: customer, DeviceID: device, EventID: fmt.Sprint("ev", eventSeq.Add(1)), Now: testNow}); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func held(t *testing.T, n *node, customer string) int {
	t.Helper()
	recs, err := n.dh.Take(func(c string) bool { return c == customer }, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.dh.Merge(recs, testNow); err != nil { // put back: a look, not a move
		t.Fatal(err)
	}
	return len(recs)
}

// TestHistoryMoves: a non-owner's leftover records reach the owner and
// add to its history; a handoff sends a shard's history to the next owner,
// which keeps it until it owns the shard; a batch merges once; a failed
// delivery keeps the records; a leased account's records stay.
func TestHistoryMoves(t *testing.T) {
	ids := []string{"a", "b", "c"}
	nodes := settledNodes(t, nil, ids...)
	a, b, c := nodes[0], nodes[1], nodes[2]
	x := accountOwnedBy("a", ids)
	ctx := context.Background()

	observeOn(t, a, x, "d1", 2)
	observeOn(t, b, x, "d1", 3) // b's leftovers, as after a failover
	b.mover.cfg.Leased = func() map[string]bool { return map[string]bool{x: true} }
	if n, err := b.mover.MoveLeftovers(ctx); err != nil || n != 0 || held(t, b, x) != 1 {
		t.Fatalf("a leased account's records moved: %d, %v", n, err)
	}
	b.mover.cfg.Leased = nil
	b.mover.cfg.Assigned = func(int) string { return "b" } // b is about to claim the shard
	if n, err := b.mover.MoveLeftovers(ctx); err != nil || n != 0 || held(t, b, x) != 1 {
		t.Fatalf("records of a shard assigned to b moved: %d, %v", n, err)
	}
	b.mover.cfg.Assigned = nil
	if n, err := b.mover.MoveLeftovers(ctx); err != nil || n != 1 {
		t.Fatalf("moved %d records (%v), want the one device record", n, err)
	}
	if held(t, b, x) != 0 {
		t.Fatal("the moved record is still on b")
	}
	if f := observeOn(t, a, x, "d1", 1); f.History.Visits != 6 {
		t.Fatalf("the owner's history after the move: %d visits, want 2+3+1", f.History.Visits)
	}
	if n, err := a.mover.MoveLeftovers(ctx); err != nil || n != 0 {
		t.Fatalf("the owner moved its own records: %d, %v", n, err)
	}

	// A handoff to c, which does not own the shard: it keeps the records
	// (within historyHold) rather than send them back to a.
	shard := cluster.ShardOf(cluster.KindAccount, x)
	if err := a.mover.Hand(ctx, shard, "c"); err != nil {
		t.Fatal(err)
	}
	if held(t, a, x) != 0 || held(t, c, x) != 1 {
		t.Fatal("the handoff did not move the record from a to c")
	}
	if n, err := c.mover.MoveLeftovers(ctx); err != nil || n != 0 {
		t.Fatalf("c sent records it awaits the shard for: %d, %v", n, err)
	}
	if f := observeOn(t, c, x, "d1", 1); f.History.Visits != 7 {
		t.Fatalf("c's history after the handoff: %d visits, want 7", f.History.Visits)
	}

	// A delivery that fails leaves the records where they were.
	if err := c.mover.Hand(ctx, shard, "nobody"); err == nil {
		t.Fatal("a handoff to an unknown member succeeded")
	}
	if held(t, c, x) != 1 {
		t.Fatal("a failed handoff lost the record")
	}

	// A second handoff to a member that just failed one does not wait on
	// it again: the records stay.
	if err := c.mover.Hand(ctx, shard, "nobody"); err == nil || held(t, c, x) != 1 {
		t.Fatalf("a handoff to a member that failed one moments ago: %v", err)
	}

	// A failed handoff brings the next round of Run forward: b's records
	// of x reach a within a couple of seconds, not at Run's period.
	observeOn(t, b, x, "d3", 2)
	if err := b.mover.Hand(ctx, shard, "nobody"); err == nil || held(t, b, x) != 1 {
		t.Fatalf("a failed handoff: %v, b holds %d records", err, held(t, b, x))
	}
	runCtx, stopRun := context.WithCancel(ctx)
	runDone := make(chan struct{})
	go func() { defer close(runDone); b.mover.Run(runCtx, time.Hour) }()
	eventually(t, "b's records reach the owner after the failed handoff", func() bool { return held(t, a, x) >= 1 && held(t, b, x) == 0 })
	stopRun()
	<-runDone

	// One batch merges once, however often it arrives.
	rec := &storage.HistCustomerDevice{Customer: x, Device: "d2", LastSeen: testNow.Unix(),
		Days: []storage.DayVisits{{Day: storage.Day(testNow.Unix() / 86400), N: 4, First: testNow.Unix()}}}
	parcel, err := storage.AppendHistParcel(nil, rec)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(ServerConfig{Quota: b.local, Owners: b.owners, History: b.mover})
	if err != nil {
		t.Fatal(err)
	}
	req := &HistoryParcels{Version: version, Node: "c", Batch: 77, Records: [][]byte{parcel}}
	for i, want := range []bool{true, false} {
		rep, err := srv.MergeHistory(ctx, req)
		if err != nil || rep.Merged != want {
			t.Fatalf("send %d: merged %v (%v), want %v", i, rep.GetMerged(), err, want)
		}
	}
	if f := observeOn(t, b, x, "d2", 1); f.History.Visits != 5 {
		t.Fatalf("a batch sent twice: %d visits, want 4+1", f.History.Visits)
	}
	for name, bad := range map[string]*HistoryParcels{
		"no version":  {Node: "c", Batch: 1, Records: [][]byte{parcel}},
		"no node":     {Version: version, Batch: 1, Records: [][]byte{parcel}},
		"no batch":    {Version: version, Node: "c", Records: [][]byte{parcel}},
		"no records":  {Version: version, Node: "c", Batch: 1},
		"bad parcel":  {Version: version, Node: "c", Batch: 2, Records: [][]byte{parcel[:len(parcel)-1]}},
		"huge parcel": {Version: version, Node: "c", Batch: 3, Records: [][]byte{make([]byte, maxHistoryParcel+1)}},
		"too many":    {Version: version, Node: "c", Batch: 4, Records: make([][]byte, maxHistoryBatch+1)},
	} {
		if _, err := srv.MergeHistory(ctx, bad); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
}

// slowLoads is a store whose reads take longer than the history's call
// timeout (a stalled disk, or shards with a backlog).
type slowLoads struct{ *storage.DB }

func (s slowLoads) LoadHist(r storage.HistRecord) (storage.HistStored, bool, error) {
	time.Sleep(150 * time.Millisecond)
	return s.DB.LoadHist(r)
}

// TestHistoryBatchSlowMergeOnce: a batch whose merge outlasts the history's
// call timeout is merged once, though the sender sends it again (its reply
// was lost meanwhile).
func TestHistoryBatchSlowMergeOnce(t *testing.T) {
	db, err := storage.Open("d", storage.Options{FS: vfs.NewMem(), Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quietLog }))
	dh, err := devicehist.New(sys.Root, devicehist.Config{Shards: 1, Store: slowLoads{db}, Timeout: 20 * time.Millisecond,
		Secret: secrets.FromBytes([]byte("rpc test")), Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer dh.Stop()
	m := NewHistoryMover(HistoryConfig{Local: dh, Now: func() time.Time { return testNow }, Log: quietLog})

	rec := &storage.HistCustomerDevice{Customer: "acc_x", Device: "d1", LastSeen: testNow.Unix(),
		Days: []storage.DayVisits{{Day: storage.Day(testNow.Unix() / 86400), N: 4, First: testNow.Unix()}}}
	parcel, err := storage.AppendHistParcel(nil, rec)
	if err != nil {
		t.Fatal(err)
	}
	req := &HistoryParcels{Version: version, Node: "c", Batch: 9, Records: [][]byte{parcel}}
	// The shard is busy with an evaluation's slow read when the batch comes.
	busy := make(chan struct{})
	go func() {
		defer close(busy)
		_, _ = dh.Observe(devicehist.Observation{Customer: "acc_x", DeviceID: "d0", Now: testNow})
	}()
	time.Sleep(20 * time.Millisecond)
	for range 2 {
		_, _, _ = m.receive(context.Background(), req) // the sender resends after any error
	}
	<-busy
	var recs []storage.HistRecord
	for deadline := time.Now().Add(5 * time.Second); ; { // a barrier that times out takes nothing
		if recs, err = dh.Take(func(c string) bool { return true }, testNow); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	visits := 0
	for _, r := range recs {
		if cd := r.(*storage.HistCustomerDevice); cd.Device == "d1" {
			for _, d := range cd.Days {
				visits += int(d.N)
			}
		}
	}
	if visits != 4 {
		t.Fatalf("a batch received twice: %d visits, want 4", visits)
	}
}

// failingLoads is a store whose reads of one device's record fail while
// fail is set (a read error on part of a batch).
// failingHistory is a device history on a store whose loads of device
// "bad" fail while fail is set.
func failingHistory(t *testing.T, fail *atomic.Bool) *devicehist.Client {
	t.Helper()
	db, err := storage.Open("d", storage.Options{FS: vfs.NewMem(), Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quietLog }))
	dh, err := devicehist.New(sys.Root, devicehist.Config{Shards: 4, Store: failingLoads{db, "bad", fail},
		Secret: secrets.FromBytes([]byte("rpc test")), Logger: quietLog})
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dh.Stop()
		db.Close()
	})
	return dh
}

type failingLoads struct {
	*storage.DB
	device string
	fail   *atomic.Bool
}

func (s failingLoads) LoadHist(r storage.HistRecord) (storage.HistStored, bool, error) {
	if cd, ok := r.(*storage.HistCustomerDevice); ok && cd.Device == s.device && s.fail.Load() {
		return storage.HistStored{}, false, fmt.Errorf("read of %s failed", s.device)
	}
	return s.DB.LoadHist(r)
}

// visitsOf takes every record of dh and answers the visits of each device.
func visitsOf(t *testing.T, dh *devicehist.Client) map[string]int {
	t.Helper()
	recs, err := dh.Take(func(string) bool { return true }, testNow)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, r := range recs {
		if cd, ok := r.(*storage.HistCustomerDevice); ok {
			for _, d := range cd.Days {
				out[cd.Device] += int(d.N)
			}
		}
	}
	return out
}

func deviceParcel(t *testing.T, customer, device string, visits uint32) []byte {
	t.Helper()
	rec := &storage.HistCustomerDevice{Customer: customer, Device: device, LastSeen: testNow.Unix(),
		Days: []storage.DayVisits{{Day: storage.Day(testNow.Unix() / 86400), N: visits, First: testNow.Unix()}}}
	b, err := storage.AppendHistParcel(nil, rec)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHistoryBatchPartlyMergedOnce: a receiver that merged part of a batch
// and failed on the rest (a read error) merges only the rest when the
// batch comes again: nothing counts twice.
func TestHistoryBatchPartlyMergedOnce(t *testing.T) {
	fail := new(atomic.Bool)
	dh := failingHistory(t, fail)
	m := NewHistoryMover(HistoryConfig{Local: dh, Now: func() time.Time { return testNow }, Log: quietLog})

	var recs [][]byte
	for i := range 8 { // customers spread over the shards
		recs = append(recs, deviceParcel(t, fmt.Sprint("acc_", i), "good", 4))
	}
	recs = append(recs, deviceParcel(t, "acc_0", "bad", 2))
	req := &HistoryParcels{Version: version, Node: "c", Batch: 5, Records: recs}
	fail.Store(true)
	if _, _, err := m.receive(context.Background(), req); err == nil {
		t.Fatal("a batch with a record that cannot be read merged")
	}
	fail.Store(false)
	if merged, _, err := m.receive(context.Background(), req); err != nil || !merged {
		t.Fatalf("the batch sent again: merged %v, %v", merged, err)
	}
	got := visitsOf(t, dh)
	if got["good"] != 8*4 || got["bad"] != 2 {
		t.Fatalf("visits %v, want good 32 and bad 2 (each record merged once)", got)
	}
}

// memHistory is a memory-only device history for the mover tests.
func memHistory(t *testing.T) *devicehist.Client {
	t.Helper()
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quietLog }))
	dh, err := devicehist.New(sys.Root, devicehist.Config{Shards: 2, Secret: secrets.FromBytes([]byte("rpc test")), Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dh.Stop() })
	return dh
}

// TestHistoryLostRepliesCountOnce: a delivery whose replies are all lost
// (the receiver merged the batch) does not count twice: the sender keeps
// the batch rather than merge it back, and sends it again with the same
// id once the receiver answers, which says it has it.
func TestHistoryLostRepliesCountOnce(t *testing.T) {
	ctx := context.Background()
	sender, receiver := memHistory(t), memHistory(t)
	a := NewHistoryMover(HistoryConfig{Local: sender, Owners: &fakeOwners{self: "a"}, Now: func() time.Time { return testNow }, Log: quietLog})
	b := NewHistoryMover(HistoryConfig{Local: receiver, Owners: &fakeOwners{self: "b"}, Now: func() time.Time { return testNow }, Log: quietLog})
	var lose atomic.Bool
	a.call = func(_ context.Context, to string, req *HistoryParcels) (*HistoryReply, error) {
		rep, err := b.mergeHistory(context.Background(), req)
		if lose.Load() {
			return nil, status.Error(codes.DeadlineExceeded, "the reply was lost")
		}
		return rep, err
	}
	for _, dev := range []string{"d1", "d2"} {
		if _, err := sender.Observe(devicehist.Observation{Customer: "acc_x", DeviceID: dev, EventID: "ev-" + dev, Now: testNow}); err != nil {
			t.Fatal(err)
		}
	}
	takeAll := func() []storage.HistRecord {
		recs, err := sender.Take(func(string) bool { return true }, testNow)
		if err != nil {
			t.Fatal(err)
		}
		return recs
	}
	lose.Store(true)
	if err := a.deliver(ctx, "b", takeAll(), testNow); err == nil {
		t.Fatal("a delivery whose replies were lost succeeded")
	}
	lose.Store(false)
	if err := a.deliver(ctx, "b", takeAll(), testNow); err != nil {
		t.Fatal(err)
	}
	if got, left := visitsOf(t, receiver), visitsOf(t, sender); got["d1"] != 1 || got["d2"] != 1 || len(left) != 0 {
		t.Fatalf("the receiver holds visits %v and the sender %v, want one visit of each device at the receiver", got, left)
	}
}

// TestHistoryPartMergedKeepsRest: a receiver that merges part of a batch
// answers which records it did not merge; the sender keeps just those,
// and its next delivery adds them: every visit counts once.
func TestHistoryPartMergedKeepsRest(t *testing.T) {
	ctx := context.Background()
	fail := new(atomic.Bool)
	receiver := failingHistory(t, fail)
	sender := memHistory(t)
	a := NewHistoryMover(HistoryConfig{Local: sender, Owners: &fakeOwners{self: "a"}, Now: func() time.Time { return testNow }, Log: quietLog})
	b := NewHistoryMover(HistoryConfig{Local: receiver, Owners: &fakeOwners{self: "b"}, Now: func() time.Time { return testNow }, Log: quietLog})
	a.call = func(_ context.Context, _ string, req *HistoryParcels) (*HistoryReply, error) {
		return b.mergeHistory(context.Background(), req)
	}
	for i := range 8 {
		if _, err := sender.Observe(devicehist.Observation{Customer: fmt.Sprint("acc_", i), DeviceID: "good", EventID: fmt.Sprint("ev", i), Now: testNow}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sender.Observe(devicehist.Observation{Customer: "acc_0", DeviceID: "bad", EventID: "evb", Now: testNow}); err != nil {
		t.Fatal(err)
	}
	takeAll := func() []storage.HistRecord {
		recs, err := sender.Take(func(string) bool { return true }, testNow)
		if err != nil {
			t.Fatal(err)
		}
		return recs
	}
	fail.Store(true)
	if err := a.deliver(ctx, "b", takeAll(), testNow); err == nil {
		t.Fatal("a delivery merged in part succeeded")
	}
	if len(a.held) != 0 { // the answer named the rest: nothing in doubt
		t.Fatalf("the sender holds %d batches it is unsure of", len(a.held))
	}
	fail.Store(false)
	if err := a.deliver(ctx, "b", takeAll(), testNow); err != nil {
		t.Fatal(err)
	}
	if got, left := visitsOf(t, receiver), visitsOf(t, sender); got["good"] != 8 || got["bad"] != 1 || len(left) != 0 {
		t.Fatalf("the receiver holds visits %v and the sender %v, want good 8 and bad 1 at the receiver", got, left)
	}
}

// TestHistoryHeldBatchGivenBack: a batch no reply confirmed goes back to
// the sender's history when the receiver stays silent past heldFor, and
// when the sender's rounds stop (a node stopping), rather than be lost.
func TestHistoryHeldBatchGivenBack(t *testing.T) {
	ctx := context.Background()
	sender := memHistory(t)
	a := NewHistoryMover(HistoryConfig{Local: sender, Owners: &fakeOwners{self: "a"}, Now: func() time.Time { return testNow }, Log: quietLog})
	a.call = func(context.Context, string, *HistoryParcels) (*HistoryReply, error) {
		return nil, status.Error(codes.DeadlineExceeded, "no answer")
	}
	hold := func() {
		t.Helper()
		if _, err := sender.Observe(devicehist.Observation{Customer: "acc_x", DeviceID: "d1", EventID: fmt.Sprint("ev", eventSeq.Add(1)), Now: testNow}); err != nil {
			t.Fatal(err)
		}
		recs, err := sender.Take(func(string) bool { return true }, testNow)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.deliver(ctx, "b", recs, testNow); err == nil || len(a.held) != 1 {
			t.Fatalf("an unanswered delivery: %v, %d batches held", err, len(a.held))
		}
	}
	hold()
	a.held["b"].since = time.Now().Add(-heldFor - time.Second)
	if err := a.resend(ctx, "b", testNow); err != nil || len(a.held) != 0 {
		t.Fatalf("a batch held past heldFor: %v, %d held", err, len(a.held))
	}
	if got := visitsOf(t, sender); got["d1"] != 1 {
		t.Fatalf("the sender holds %v after giving the batch up, want d1's visit", got)
	}

	hold()
	stopped, stop := context.WithCancel(ctx)
	stop()
	a.Run(stopped, time.Hour)
	if got := visitsOf(t, sender); len(a.held) != 0 || got["d1"] != 1 {
		t.Fatalf("after Run ended: %d held, the sender holds %v, want d1's visit", len(a.held), got)
	}

	// A receiver that answers at the last resend keeps the batch.
	hold()
	receiver := memHistory(t)
	b := NewHistoryMover(HistoryConfig{Local: receiver, Owners: &fakeOwners{self: "b"}, Now: func() time.Time { return testNow }, Log: quietLog})
	a.call = func(_ context.Context, _ string, req *HistoryParcels) (*HistoryReply, error) {
		return b.mergeHistory(context.Background(), req)
	}
	a.Run(stopped, time.Hour)
	if got, left := visitsOf(t, receiver), visitsOf(t, sender); len(a.held) != 0 || got["d1"] != 1 || len(left) != 0 {
		t.Fatalf("after Run ended with the receiver back: %d held, the receiver holds %v and the sender %v", len(a.held), got, left)
	}
}

// TestHistoryHeldBatchKeptWhileUnreachable: a batch no reply confirmed
// (the receiver merged it) stays held while the receiver cannot be
// reached (not a live member for a moment: no address to dial), instead
// of going back to the sender, where it would count a second time; the
// resend once the receiver is back confirms it.
func TestHistoryHeldBatchKeptWhileUnreachable(t *testing.T) {
	ctx := context.Background()
	sender, receiver := memHistory(t), memHistory(t)
	a := NewHistoryMover(HistoryConfig{Local: sender, Owners: &fakeOwners{self: "a"}, Now: func() time.Time { return testNow }, Log: quietLog})
	b := NewHistoryMover(HistoryConfig{Local: receiver, Owners: &fakeOwners{self: "b"}, Now: func() time.Time { return testNow }, Log: quietLog})
	var state atomic.Int32 // 0: replies lost, 1: unreachable, 2: answers
	a.call = func(_ context.Context, _ string, req *HistoryParcels) (*HistoryReply, error) {
		switch state.Load() {
		case 0:
			b.mergeHistory(context.Background(), req)
			return nil, status.Error(codes.DeadlineExceeded, "the reply was lost")
		case 1:
			return nil, fmt.Errorf("%w: member %q: %w", errNotSent, "b", errNoAddr)
		}
		return b.mergeHistory(context.Background(), req)
	}
	if _, err := sender.Observe(devicehist.Observation{Customer: "acc_x", DeviceID: "d1", EventID: "ev-unreach", Now: testNow}); err != nil {
		t.Fatal(err)
	}
	recs, err := sender.Take(func(string) bool { return true }, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.deliver(ctx, "b", recs, testNow); err == nil || len(a.held) != 1 {
		t.Fatalf("a delivery whose replies were lost: %v, %d batches held", err, len(a.held))
	}
	state.Store(1)
	if err := a.resend(ctx, "b", testNow); err == nil || len(a.held) != 1 {
		t.Fatalf("a resend that could not reach the receiver: %v, %d batches held, want the batch still held", err, len(a.held))
	}
	state.Store(2)
	if err := a.resend(ctx, "b", testNow); err != nil || len(a.held) != 0 {
		t.Fatalf("the resend to the receiver back: %v, %d held", err, len(a.held))
	}
	if got, left := visitsOf(t, receiver), visitsOf(t, sender); got["d1"] != 1 || len(left) != 0 {
		t.Fatalf("the receiver holds visits %v and the sender %v, want d1's one visit at the receiver only", got, left)
	}
}

// TestHistoryBatchIDReusedIsRefused: a batch id that comes again with
// another number of records than the part-merged batch the receiver
// remembers (a sender's bug, or anyone who reaches the port) is refused
// as invalid, not read past the receiver's record of the batch (a panic
// in a gRPC handler ends the process).
func TestHistoryBatchIDReusedIsRefused(t *testing.T) {
	fail := new(atomic.Bool)
	dh := failingHistory(t, fail)
	m := NewHistoryMover(HistoryConfig{Local: dh, Now: func() time.Time { return testNow }, Log: quietLog})
	var recs [][]byte
	for i := range 8 {
		recs = append(recs, deviceParcel(t, fmt.Sprint("acc_", i), "good", 1))
	}
	recs = append(recs, deviceParcel(t, "acc_0", "bad", 1))
	fail.Store(true)
	if _, err := m.mergeHistory(context.Background(), &HistoryParcels{Version: version, Node: "c", Batch: 9, KeepsRest: true, Records: recs}); err != nil {
		t.Fatal(err)
	}
	fail.Store(false)
	for _, n := range []int{2, len(recs) + 3} {
		other := recs[:min(n, len(recs))]
		for len(other) < n {
			other = append(other, deviceParcel(t, fmt.Sprint("acc_extra", len(other)), "good", 1))
		}
		_, err := m.mergeHistory(context.Background(), &HistoryParcels{Version: version, Node: "c", Batch: 9, KeepsRest: true, Records: other})
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("batch 9 again with %d records instead of %d: %v, want InvalidArgument", n, len(recs), err)
		}
	}
}

// TestHistoryAttemptGivenUpMergesNothing: an attempt to deliver a batch
// whose sender gave up on it before it got the receiver's lock merges
// nothing: the sender has sent the batch again, or taken back what a
// later attempt answered as rest, and merging now would count it twice.
func TestHistoryAttemptGivenUpMergesNothing(t *testing.T) {
	receiver := memHistory(t)
	m := NewHistoryMover(HistoryConfig{Local: receiver, Owners: &fakeOwners{self: "b"}, Now: func() time.Time { return testNow }, Log: quietLog})
	req := &HistoryParcels{Version: version, Node: "a", Batch: 3, KeepsRest: true, Records: [][]byte{deviceParcel(t, "acc_x", "d1", 4)}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.mergeHistory(ctx, req); status.Code(err) != codes.Unavailable {
		t.Fatalf("an attempt given up on: %v, want Unavailable", err)
	}
	if got := visitsOf(t, receiver); got["d1"] != 0 {
		t.Fatalf("an attempt given up on merged %d visits", got["d1"])
	}
	if rep, err := m.mergeHistory(context.Background(), req); err != nil || !rep.GetMerged() {
		t.Fatalf("the next attempt: %v %v", rep, err)
	}
	if got := visitsOf(t, receiver); got["d1"] != 4 {
		t.Fatalf("after the next attempt: %d visits, want 4", got["d1"])
	}
}
