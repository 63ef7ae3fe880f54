package events

import (
	"log/slog"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/storage"
)

// poisonStore panics when the shard loads the sightings of visitor
// "poison": an injected bug in the shard's handler.
type poisonStore struct{ *storage.DB }

func (p poisonStore) LoadSightings(visitor string, now time.Time) (storage.Sightings, bool, error) {
	if visitor == "poison" {
		panic("injected panic")
	}
	return p.DB.LoadSightings(visitor, now)
}

// TestShardDownDoesNotStallSync: while a shard its supervisor stopped is
// down, the store's group sync (which first asks every shard with changes to
// hand them over) goes on without it instead of waiting forever; the
// restarted shard stores what it had changed.
func TestShardDownDoesNotStallSync(t *testing.T) {
	db, err := storage.Open("d", storage.Options{FS: vfs.NewMem(), SyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	sup := actors.SupervisionOf(sys)
	sup.SetRestartDelays(4*time.Second, 4*time.Second)
	c := New(sys.Root, Config{Shards: 1, Store: poisonStore{db}, Timeout: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	defer c.Stop()
	ok := event("acc_a", "visitor-ok", t0)
	c.Record(ok)
	// Each poison event is kept (and marked changed) before its sightings
	// load panics; the 11th panic in 10 s stops the shard.
	for i := 0; i < 11; i++ {
		c.Record(event("acc_a", "poison", t0))
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(sup.Down()) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if d := sup.Down(); len(d) != 1 || d[0] != "events" {
		t.Fatalf("down: %v", d)
	}
	synced := make(chan error, 1)
	go func() { synced <- db.Sync() }()
	select {
	case err := <-synced:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second): // the shard comes back only after 4 s
		t.Fatal("the group sync waits for a shard that is down")
	}
	for len(sup.Down()) > 0 && time.Now().Before(deadline.Add(10*time.Second)) {
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := db.GetEvent(ok.ID); err != nil {
		t.Fatalf("the event recorded before the crashes: %v", err)
	}
	if r, err := c.Resolve(Resolve{ID: ok.ID, Account: "acc_a", Now: t0}); err != nil || !r.Found || r.Sightings.TimesSeen != 1 {
		t.Fatalf("after the restart: %+v %v", r, err)
	}
}
