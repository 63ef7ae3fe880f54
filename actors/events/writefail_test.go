package events

import (
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/storage"
)

// failingStore refuses device writes while fail is set.
type failingStore struct {
	*storage.DB
	fail atomic.Bool
}

func (f *failingStore) WriteDevice(w storage.DeviceWrite) error {
	if f.fail.Load() {
		return errors.New("injected write failure")
	}
	return f.DB.WriteDevice(w)
}

// TestUnstoredEntriesStayInMemory: entries whose write failed are the only
// copy, so the shards keep serving them and do not evict them as idle, even
// once a later write of the shard is stored.
func TestUnstoredEntriesStayInMemory(t *testing.T) {
	db, err := storage.Open("d", storage.Options{FS: vfs.NewMem(), SyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st := &failingStore{DB: db}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	defer sys.Shutdown()
	c := New(sys.Root, Config{Shards: 1, Store: st, IdleAfter: time.Minute, Logger: slog.New(slog.DiscardHandler)})
	defer c.Stop()

	lost := event("acc_a", "visitor-1", t0)
	c.Record(lost)
	st.fail.Store(true)
	c.flush() // the write fails
	st.fail.Store(false)
	// A later write of the same shard is stored.
	later := event("acc_a", "visitor-2", t0)
	c.Record(later)
	c.flush()

	c.Sweep(t0.Add(time.Hour))
	if r, err := c.Resolve(Resolve{ID: lost.ID, Account: "acc_a", Now: t0.Add(time.Hour)}); err != nil || !r.Found {
		t.Fatalf("an event whose write failed was evicted and lost: %+v %v", r, err)
	}
}

// poisonFailingStore is a failingStore whose loads of visitor "poison"'s
// sightings panic.
type poisonFailingStore struct{ *failingStore }

func (p poisonFailingStore) LoadSightings(visitor string, now time.Time) (storage.Sightings, bool, error) {
	if visitor == "poison" {
		panic("injected panic")
	}
	return p.failingStore.LoadSightings(visitor, now)
}

// TestRestartKeepsUnstoredEntries: a panic restart drops the shard's
// entries to reload them from the store, but not the ones whose write
// failed: the store does not hold them, and the process goes on.
func TestRestartKeepsUnstoredEntries(t *testing.T) {
	db, err := storage.Open("d", storage.Options{FS: vfs.NewMem(), SyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st := &failingStore{DB: db}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	defer sys.Shutdown()
	c := New(sys.Root, Config{Shards: 1, Store: poisonFailingStore{st}, Timeout: 300 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	defer c.Stop()

	lost := event("acc_a", "visitor-1", t0)
	c.Record(lost)
	st.fail.Store(true)
	c.flush() // the write fails
	st.fail.Store(false)
	c.Record(event("acc_a", "poison", t0)) // the shard panics and restarts

	var r Resolved
	for range 50 { // until the shard is back
		if r, err = c.Resolve(Resolve{ID: lost.ID, Account: "acc_a", Now: t0.Add(time.Second), Peek: true}); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil || !r.Found {
		t.Fatalf("an event whose write failed, after a panic restart: %+v %v", r, err)
	}
}

// TestFailedWriteLeavesNoStrayKeys: a write the store refused leaves the
// store as it was, and the shards remember nothing of where their entries
// are stored (an event's key is its id; a device's sightings go to the
// period of their last sighting, and each write deletes the period before
// it), so the next write of the same entries stores what a run without the
// failure stores: the same keys, the same sightings, and nothing once
// retention has passed.
func TestFailedWriteLeavesNoStrayKeys(t *testing.T) {
	const visitor = "visitor-1"
	type run struct {
		db *storage.DB
		c  *Client
		// step records an event of visitor at at and resolves the one
		// before it while it is kept (its first use rewrites it), then flushes, refused
		// when refuse is set and the run fails.
		step func(at time.Time, refuse bool)
	}
	start := func(fail bool) *run {
		db, err := storage.Open("d", storage.Options{FS: vfs.NewMem(), SyncInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		st := &failingStore{DB: db}
		sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
		t.Cleanup(sys.Shutdown)
		c := New(sys.Root, Config{Shards: 1, Store: st, Logger: slog.New(slog.DiscardHandler)})
		t.Cleanup(func() { _ = c.Stop() })
		var prev *storage.DeviceEvent
		return &run{db: db, c: c, step: func(at time.Time, refuse bool) {
			st.fail.Store(fail && refuse)
			defer st.fail.Store(false)
			e := event("acc_a", visitor, at)
			c.Record(e)
			if prev != nil && !storage.EventExpired(prev.Created, at) { // an expired one resolves as unknown
				if r, err := c.Resolve(Resolve{ID: prev.ID, Account: "acc_a", Now: at}); err != nil || !r.Found {
					t.Fatalf("resolve at %v: %+v %v", at, r, err)
				}
			}
			prev = e
			c.flush()
		}}
	}
	keys := func(db *storage.DB) [2]int {
		e, s, err := db.DeviceKeys()
		if err != nil {
			t.Fatal(err)
		}
		return [2]int{e, s}
	}
	sightings := func(db *storage.DB, now time.Time) storage.Sightings {
		h, ok, err := db.LoadSightings(visitor, now)
		if err != nil || !ok {
			t.Fatalf("sightings as of %v: %+v %v %v", now, h, ok, err)
		}
		return h
	}
	want, got := start(false), start(true)
	period := storage.SightingsPeriod
	steps := []struct {
		at     time.Time
		refuse bool
	}{
		{t0, true}, // first writes refused: nothing stored
		{t0.Add(time.Second), false},
		{t0.Add(period), true}, // refused: the sightings would have moved to the next period
		{t0.Add(period + time.Second), false},
	}
	for _, s := range steps {
		want.step(s.at, s.refuse)
		got.step(s.at, s.refuse)
	}
	if g, w := keys(got.db), keys(want.db); g != w {
		t.Fatalf("keys (events, sightings) after refused writes: %v; a store without the failures holds %v", g, w)
	}
	at := t0.Add(period + time.Second)
	if g, w := sightings(got.db, at), sightings(want.db, at); g != w {
		t.Fatalf("stored sightings after refused writes: %+v; without the failures %+v", g, w)
	}

	// A refused write moves the sightings a period on and the next one a
	// period further: that write deletes the period before its own, not
	// the one the store holds, which stays behind as it does when an entry
	// in memory goes a whole period unwritten. LoadSightings never reads
	// it (it looks at the period of now and the one before), and the daily
	// prune drops it (every period before the one before now's).
	last := t0.Add(3 * period)
	want.step(t0.Add(2*period), false)
	got.step(t0.Add(2*period), true)
	want.step(last, false)
	got.step(last, false)
	if g, w := sightings(got.db, last), sightings(want.db, last); g != w {
		t.Fatalf("stored sightings after a refused write and a period: %+v; without the failure %+v", g, w)
	}
	for _, r := range []*run{want, got} {
		if err := r.c.Prune(last); err != nil {
			t.Fatal(err)
		}
	}
	if g, w := keys(got.db), keys(want.db); g != w {
		t.Fatalf("keys (events, sightings) after refused writes and the daily prune: %v; a store without the failures holds %v", g, w)
	}

	// Retention: events after 30 days, sightings once a period passed
	// without one.
	end := last.Add(2 * period)
	if err := got.c.Prune(end); err != nil {
		t.Fatal(err)
	}
	if g := keys(got.db); g != [2]int{} {
		t.Fatalf("keys (events, sightings) left at %v: %v", end, g)
	}
}
