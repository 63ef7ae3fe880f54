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
