package events

import (
	"errors"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/storage"
)

// openRetention is a store and an events client over it for the retention
// tests.
func openRetention(t *testing.T) (*Client, *storage.DB) {
	t.Helper()
	db, err := storage.Open("d", storage.Options{FS: vfs.NewMem(), SyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	sys := actor.NewActorSystem()
	c := New(sys.Root, Config{Shards: 2, Store: db})
	t.Cleanup(func() { c.Stop(); db.Close(); sys.Shutdown() })
	return c, db
}

// TestEventPastRetentionIsGone: an event older than its 30 days resolves as
// unknown whether or not the daily prune ran, and a resolve of one still in
// a shard's memory does not write it back to the store.
func TestEventPastRetentionIsGone(t *testing.T) {
	c, db := openRetention(t)
	e := event("acc_a", "visitor-old", t0)
	c.Record(e)
	if err := db.Sync(); err != nil {
		t.Fatal(err)
	}
	within := t0.Add(storage.EventRetention - time.Minute)
	if r, err := c.Resolve(Resolve{ID: e.ID, Account: "acc_a", Now: within, Peek: true}); err != nil || !r.Found {
		t.Fatalf("within its 30 days: %v %+v", err, r.Found)
	}
	later := t0.Add(storage.EventRetention + time.Minute)
	if r, err := c.Resolve(Resolve{ID: e.ID, Account: "acc_a", Now: later}); err != nil || r.Found {
		t.Fatalf("past its 30 days, not pruned yet: %v found=%v", err, r.Found)
	}
	if err := c.Prune(later.Add(48 * time.Hour)); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Resolve(Resolve{ID: e.ID, Account: "acc_a", Now: later.Add(48 * time.Hour)}); err != nil || r.Found {
		t.Fatalf("pruned: %v found=%v", err, r.Found)
	}
	c.flush()
	if err := db.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.GetEvent(e.ID); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("the pruned event is in the store again: %v", err)
	}
}

// TestLapsedSightingsStayGone: a device's sightings pruned after 90 days
// without one are not brought back by the copy a shard still holds: its
// next sighting starts a new record (SPEC 2.2: times_seen and first_seen
// are "in the current history record").
func TestLapsedSightingsStayGone(t *testing.T) {
	c, db := openRetention(t)
	c.Record(event("acc_a", "visitor-q", t0))
	if err := db.Sync(); err != nil {
		t.Fatal(err)
	}
	later := t0.Add(200 * 24 * time.Hour)
	if err := c.Prune(later); err != nil {
		t.Fatal(err)
	}
	e2 := event("acc_a", "visitor-q", later)
	c.Record(e2)
	r, err := c.Resolve(Resolve{ID: e2.ID, Account: "acc_a", Now: later})
	if err != nil || !r.Found {
		t.Fatalf("%v %+v", err, r)
	}
	if r.Sightings.TimesSeen != 1 || !r.Sightings.FirstSeen.Equal(later) {
		t.Fatalf("sightings pruned 200 days after the last came back: times_seen %d first_seen %v", r.Sightings.TimesSeen, r.Sightings.FirstSeen)
	}
}
