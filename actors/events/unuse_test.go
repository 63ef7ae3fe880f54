package events

import (
	"log/slog"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/storage"
)

func quietEventsSystem() *actor.ActorSystem {
	return actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
}

// evictAll sweeps at now until no event is resident.
func evictAll(t *testing.T, c *Client, now time.Time) {
	deadline := time.Now().Add(3 * time.Second)
	for {
		c.Sweep(now)
		if ev, _ := c.resident(); ev == 0 {
			return
		}
		if time.Now().After(deadline) {
			ev, hi := c.resident()
			t.Fatalf("still resident: %d events %d sightings", ev, hi)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestUnuseAfterReloadKeepsAStandingUse: A is the event's first use
// (stored), B a replay (counted in memory only); the entry is evicted and
// reloaded with one use. B's refund must not make the event read as
// unused: A's use stands, and the next evaluation is a replay. Before,
// the refund took the stored count to zero.
func TestUnuseAfterReloadKeepsAStandingUse(t *testing.T) {
	db, err := storage.Open("d", storage.Options{FS: vfs.NewMem(), SyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sys := quietEventsSystem()
	defer sys.Shutdown()
	c := New(sys.Root, Config{Shards: 1, Store: db, IdleAfter: time.Minute, Logger: slog.New(slog.DiscardHandler)})
	defer c.Stop()
	e := event("acc_a", "visitor-x", t0)
	c.Record(e)
	t1, t2, t3 := t0.Add(time.Second), t0.Add(2*time.Second), t0.Add(3*time.Second)
	if r, _ := c.Resolve(Resolve{ID: e.ID, Account: "acc_a", Now: t1}); r.Replayed {
		t.Fatal("A replayed")
	}
	if err := db.Sync(); err != nil {
		t.Fatal(err)
	}
	if r, _ := c.Resolve(Resolve{ID: e.ID, Account: "acc_a", Now: t2}); !r.Replayed {
		t.Fatal("B not replayed")
	}
	evictAll(t, c, t0.Add(time.Hour))
	c.Unuse(e.ID, "acc_a", t2) // B's call refunded
	r, _ := c.Resolve(Resolve{ID: e.ID, Account: "acc_a", Now: t3})
	if !r.Found || !r.Replayed {
		t.Errorf("A's use stands, yet C reads %+v", r)
	}
}
