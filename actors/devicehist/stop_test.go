package devicehist

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/internal/logrec"
	"github.com/fraudd/fraudd/storage"
)

// stuckHistStore holds LoadHist of device "stuck" at a gate: a store stall
// that keeps a shard's handler busy past the shards' stop timeout.
type stuckHistStore struct {
	*storage.DB
	gate    chan struct{}
	entered chan struct{}
}

func (s *stuckHistStore) LoadHist(r storage.HistRecord) (storage.HistStored, bool, error) {
	if d, ok := r.(*storage.HistCustomerDevice); ok && d.Device == "stuck" {
		close(s.entered)
		<-s.gate
	}
	return s.DB.LoadHist(r)
}

// TestStopAfterAStuckShard: a shard still stuck in a handler when Stop
// gives up on it (actors.StopTimeout) goes on after Stop has closed the
// group committer, and handles what is queued behind it: a take, a
// barrier (which flushes first). None may panic on the closed committer.
// The take's deletes cannot be stored, so it must take nothing (ErrStopped):
// records handed out while the store keeps them would count twice at the
// node that merges them. The barrier hears ErrStopped instead of waiting
// for its timeout; the shard says once that it outlived Stop.
func TestStopAfterAStuckShard(t *testing.T) {
	old := actors.StopTimeout
	actors.StopTimeout = 100 * time.Millisecond
	defer func() { actors.StopTimeout = old }()

	db := openDBWith(t, vfs.NewMem(), time.Hour)
	defer db.Close()
	c := newClient(t, Config{Shards: 1, Store: db})
	observe(t, c, Observation{Customer: "acc_t", DeviceID: "d1", EventID: "e1", Now: t0})
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	onlyT := func(cust string) bool { return cust == "acc_t" }
	var refs []storage.HistRef
	if err := db.HistOf(onlyT, func(r storage.HistRef) bool { refs = append(refs, r); return true }); err != nil || len(refs) != 1 {
		t.Fatalf("stored records of acc_t: %v %v", refs, err)
	}

	st := &stuckHistStore{DB: db, gate: make(chan struct{}), entered: make(chan struct{})}
	release := sync.OnceFunc(func() { close(st.gate) })
	defer release()
	rec := &logrec.Recorder{}
	sys := quietSystem()
	c, err := New(sys.Root, Config{Shards: 1, Store: st, Timeout: 200 * time.Millisecond, Logger: rec.Logger(), Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	// The observation may run inline on the caller's goroutine: call it
	// from one of its own.
	go func() { _, _ = c.Observe(Observation{Customer: "acc_s", DeviceID: "stuck", EventID: "e2", Now: t0}) }()
	<-st.entered
	// Queued behind the stuck observation.
	taken := make(chan takeReply, 1)
	c.shards.Send(0, &takeReq{refs: refs, now: t0.Unix(), reply: taken})
	barred := newBarrier()
	c.shards.Send(0, barred)
	deadline := time.Now().Add(5 * time.Second)
	for depth := 0; depth < 2; {
		if time.Now().After(deadline) {
			t.Fatal("the take and the barrier never reached the stuck shard's mailbox")
		}
		time.Sleep(time.Millisecond)
		depth = 0
		actors.KindsOf(sys).Depths(func(_ string, d int) { depth += d })
	}

	if err := c.Stop(); !errors.Is(err, actors.ErrStopTimeout) {
		t.Fatalf("Stop with a stuck shard: %v; want ErrStopTimeout", err)
	}
	release()
	select {
	case r := <-taken:
		if !errors.Is(r.err, ErrStopped) || len(r.recs) != 0 {
			t.Errorf("take after the committer closed: %d records, %v; want none, ErrStopped", len(r.recs), r.err)
		}
	case <-time.After(5 * time.Second):
		t.Error("the take after the committer closed was never answered")
	}
	select {
	case err := <-barred:
		if !errors.Is(err, ErrStopped) {
			t.Errorf("barrier after the committer closed: %v; want ErrStopped", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("the barrier after the committer closed was never answered")
	}
	if p := rec.Find("panic"); len(p) > 0 {
		t.Errorf("panics after Stop: %q", p)
	}
	if l := rec.Find("outlived Stop"); len(l) != 1 {
		t.Errorf("logged about the shard that outlived Stop: %q; want one line", l)
	}
	var left []storage.HistRef
	if err := db.HistOf(onlyT, func(r storage.HistRef) bool { left = append(left, r); return true }); err != nil || len(left) != 1 {
		t.Errorf("stored records of acc_t after the refused take: %v %v; want the one stored before", left, err)
	}
}

// unsyncedGateStore holds LoadHist of device "stuck" at a gate and then
// answers it without reaching the store: a stuck handler that, once
// released, shares no lock with what Stop did meanwhile (the store's locks
// would order Stop's write before the shard's read and hide a race).
type unsyncedGateStore struct {
	*storage.DB
	gate    chan struct{}
	entered chan struct{}
}

func (s *unsyncedGateStore) LoadHist(r storage.HistRecord) (storage.HistStored, bool, error) {
	if d, ok := r.(*storage.HistCustomerDevice); ok && d.Device == "stuck" {
		close(s.entered)
		<-s.gate
		return storage.HistStored{}, false, nil
	}
	return s.DB.LoadHist(r)
}

// TestStopLeavesAStuckShardsState: Stop must not flush the state of a shard
// that did not stop (actors.StopTimeout): that shard's goroutine still owns
// its dirty lists and sequence, and goes on with them once its handler is
// released. The gate is released by a timer, not by the test after Stop,
// so that nothing orders Stop's work before the shard's: under -race, a
// Stop that touches the shard's state is reported. Stop says instead that
// the shard's unstored changes are lost, and the store does not get them.
func TestStopLeavesAStuckShardsState(t *testing.T) {
	old := actors.StopTimeout
	actors.StopTimeout = 100 * time.Millisecond
	defer func() { actors.StopTimeout = old }()

	db := openDBWith(t, vfs.NewMem(), time.Hour)
	defer db.Close()
	st := &unsyncedGateStore{DB: db, gate: make(chan struct{}), entered: make(chan struct{})}
	release := sync.OnceFunc(func() { close(st.gate) })
	defer release()
	rec := &logrec.Recorder{}
	sys := quietSystem()
	defer sys.Shutdown()
	c, err := New(sys.Root, Config{Shards: 1, Store: st, Timeout: 200 * time.Millisecond, Logger: rec.Logger(), Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	// Changed, not yet flushed (no sync within the test).
	observe(t, c, Observation{Customer: "acc_d", DeviceID: "d1", EventID: "e1", Now: t0})
	// The observation may run inline on the caller's goroutine: call it
	// from one of its own.
	go func() { _, _ = c.Observe(Observation{Customer: "acc_s", DeviceID: "stuck", EventID: "e2", Now: t0}) }()
	<-st.entered
	// Queued behind the stuck observation: answered once the shard is done
	// with it.
	probe := make(lenProbe, 1)
	c.shards.Broadcast(probe)

	go func() {
		time.Sleep(3 * actors.StopTimeout)
		release()
	}()
	if err := c.Stop(); !errors.Is(err, actors.ErrStopTimeout) {
		t.Fatalf("Stop with a stuck shard: %v; want ErrStopTimeout", err)
	}
	select {
	case <-probe:
	case <-time.After(5 * time.Second):
		t.Fatal("the stuck shard never finished its observation")
	}
	if l := rec.Find("not stored"); len(l) != 1 || !strings.Contains(l[0], "shard=0") {
		t.Errorf("Stop's word on the shard that did not stop: %q; want one line naming shard 0", l)
	}
	var refs []storage.HistRef
	if err := db.HistOf(func(cust string) bool { return cust == "acc_d" }, func(r storage.HistRef) bool { refs = append(refs, r); return true }); err != nil || len(refs) != 0 {
		t.Errorf("the stuck shard's records reached the store through Stop: %v %v", refs, err)
	}
}
