package events

import (
	"fmt"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/storage"
)

// TestMemoryBoundedUnderCollectionFlood: a flood of collected events (the
// publishable key is public; a Scale account may store 333,333 a day) does
// not stay in memory for IdleAfter: past the default bounds the stored
// entries go, least recently touched first, and an evicted event still
// resolves, read back from the store, with its device's sightings.
func TestMemoryBoundedUnderCollectionFlood(t *testing.T) {
	db, err := storage.Open(t.TempDir(), storage.Options{SyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	c := New(sys.Root, Config{Shards: 4, Store: db})
	defer c.Stop()
	const n = 4 * DefaultMaxSightings
	var first *storage.DeviceEvent
	for i := range n {
		e := event("acc_a", fmt.Sprintf("visitor-%d", i), t0.Add(time.Duration(i)*time.Millisecond))
		if i == 0 {
			first = e
		}
		c.Record(e)
		if i%1000 == 999 {
			if err := db.Sync(); err != nil { // runs the flush hook
				t.Fatal(err)
			}
		}
	}
	if err := db.Sync(); err != nil {
		t.Fatal(err)
	}
	ev, si := c.resident()
	t.Logf("%d events recorded: %d events, %d sightings held", n, ev, si)
	// Slack: the entries of the last flush interval are not yet stored.
	if ev > DefaultMaxEvents+1000 || si > DefaultMaxSightings+1000 {
		t.Fatalf("%d events, %d sightings held after %d distinct events within IdleAfter; bounds %d, %d",
			ev, si, n, DefaultMaxEvents, DefaultMaxSightings)
	}
	r, err := c.Resolve(Resolve{ID: first.ID, Account: "acc_a", Now: t0.Add(time.Hour)})
	if err != nil || !r.Found || r.Replayed || r.Sightings.TimesSeen != 1 {
		t.Fatalf("an evicted event: %v %+v", err, r)
	}
}
