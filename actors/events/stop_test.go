package events

import (
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/internal/logrec"
	"github.com/fraudd/fraudd/storage"
)

// stuckSightingsStore holds LoadSightings of visitor "stuck" at a gate: a
// store stall that keeps a shard's handler busy past the shards' stop
// timeout.
type stuckSightingsStore struct {
	*storage.DB
	gate    chan struct{}
	entered chan struct{}
}

func (s *stuckSightingsStore) LoadSightings(visitor string, now time.Time) (storage.Sightings, bool, error) {
	if visitor == "stuck" {
		close(s.entered)
		<-s.gate
	}
	return s.DB.LoadSightings(visitor, now)
}

// TestStopAfterAStuckShard: a shard still stuck in a handler when Stop
// gives up on it (actors.StopTimeout) goes on after Stop has closed the
// group committer, and handles the flush queued behind it. That flush must
// not panic on the closed committer: its write is dropped (logged once) and
// the shard keeps the entries, as after a failed write.
func TestStopAfterAStuckShard(t *testing.T) {
	old := actors.StopTimeout
	actors.StopTimeout = 100 * time.Millisecond
	defer func() { actors.StopTimeout = old }()

	db, err := storage.Open("d", storage.Options{FS: vfs.NewMem(), SyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st := &stuckSightingsStore{DB: db, gate: make(chan struct{}), entered: make(chan struct{})}
	release := sync.OnceFunc(func() { close(st.gate) })
	defer release()
	rec := &logrec.Recorder{}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	defer sys.Shutdown()
	c := New(sys.Root, Config{Shards: 1, Store: st, Timeout: 200 * time.Millisecond, Logger: rec.Logger()})

	// The record may run inline on the sender's goroutine: send it from
	// one of its own.
	go c.Record(event("acc_a", "stuck", t0))
	<-st.entered
	// The flush hook's request, queued behind the stuck record (the hook
	// gives up on it after Timeout).
	flushed := make(chan struct{})
	go func() { c.flush(); close(flushed) }()
	deadline := time.Now().Add(5 * time.Second)
	for depth := 0; depth == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the flush request never reached the stuck shard's mailbox")
		}
		time.Sleep(time.Millisecond)
		actors.KindsOf(sys).Depths(func(_ string, d int) { depth += d })
	}
	<-flushed

	if err := c.Stop(); err == nil {
		t.Fatal("Stop with a stuck shard: no error; want ErrStopTimeout")
	}
	release()
	// The shard finishes the record, then handles the flush request.
	deadline = time.Now().Add(5 * time.Second)
	for len(rec.Find("panic"))+len(rec.Find("outlived Stop")) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the stuck shard never handled its flush request")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // a second line, if any, comes now
	if p := rec.Find("panic"); len(p) > 0 {
		t.Errorf("panics after Stop: %q", p)
	}
	if l := rec.Find("outlived Stop"); len(l) != 1 {
		t.Errorf("logged about the shard that outlived Stop: %q; want one line", l)
	}
}

// unsyncedGateStore holds LoadSightings of visitor "stuck" at a gate and
// then answers it without reaching the store: a stuck handler that, once
// released, shares no lock with what Stop did meanwhile (the store's locks
// would order Stop's write before the shard's read and hide a race).
type unsyncedGateStore struct {
	*storage.DB
	gate    chan struct{}
	entered chan struct{}
}

func (s *unsyncedGateStore) LoadSightings(visitor string, now time.Time) (storage.Sightings, bool, error) {
	if visitor == "stuck" {
		close(s.entered)
		<-s.gate
		return storage.Sightings{}, false, nil
	}
	return s.DB.LoadSightings(visitor, now)
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

	db, err := storage.Open("d", storage.Options{FS: vfs.NewMem(), SyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st := &unsyncedGateStore{DB: db, gate: make(chan struct{}), entered: make(chan struct{})}
	release := sync.OnceFunc(func() { close(st.gate) })
	defer release()
	rec := &logrec.Recorder{}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	defer sys.Shutdown()
	c := New(sys.Root, Config{Shards: 1, Store: st, Timeout: 200 * time.Millisecond, Logger: rec.Logger()})

	// The record marks its event dirty, then waits for the visitor's
	// sightings at the gate. Sent from a goroutine of its own: it may run
	// inline on the sender's.
	stuck := event("acc_a", "stuck", t0)
	go c.Record(stuck)
	<-st.entered
	// Queued behind the record: answered once the shard is done with it.
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
		t.Fatal("the stuck shard never finished its record")
	}
	if l := rec.Find("not stored"); len(l) != 1 || !strings.Contains(l[0], "shard=0") {
		t.Errorf("Stop's word on the shard that did not stop: %q; want one line naming shard 0", l)
	}
	if _, err := db.GetEvent(stuck.ID); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("the stuck shard's event reached the store through Stop: %v", err)
	}
}
