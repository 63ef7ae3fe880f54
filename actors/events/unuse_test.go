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
func evictAll(t *testing.T, c *Client, now time.Time) { evictAllBut(t, c, now, 0) }

// evictAllBut sweeps at now until at most keep events are resident.
func evictAllBut(t *testing.T, c *Client, now time.Time, keep int) {
	deadline := time.Now().Add(3 * time.Second)
	for {
		c.Sweep(now)
		if ev, _ := c.resident(); ev <= keep {
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

// TestFailedWriteRetried: the events and first uses a failed write
// carried are written again with the shard's next write, so a graceful
// stop after the store recovered keeps them. Before, a failed write was
// never retried: an event collected an hour before a clean restart, and a
// first use, were gone after it.
func TestFailedWriteRetried(t *testing.T) {
	fs := vfs.NewMem()
	db, err := storage.Open("d", storage.Options{FS: fs, SyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	st := &failingStore{DB: db}
	sys := quietEventsSystem()
	defer sys.Shutdown()
	c := New(sys.Root, Config{Shards: 1, Store: st, Logger: slog.New(slog.DiscardHandler)})

	used := event("acc_a", "visitor-u", t0)
	c.Record(used)
	c.flush() // stored
	lost := event("acc_a", "visitor-l", t0)
	c.Record(lost)
	if r, _ := c.Resolve(Resolve{ID: used.ID, Account: "acc_a", Now: t0.Add(time.Second)}); r.Replayed {
		t.Fatal("first use replayed")
	}
	st.fail.Store(true)
	c.flush() // carries the new event and the first use: fails
	st.fail.Store(false)
	// The store is healthy again; more traffic, more syncs, all fine.
	for i := 0; i < 3; i++ {
		c.Record(event("acc_a", "visitor-other", t0.Add(time.Minute)))
		if err := db.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if r, _ := c.Resolve(Resolve{ID: used.ID, Account: "acc_a", Now: t0.Add(2 * time.Minute)}); !r.Replayed {
		t.Fatal("memory: not replayed")
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = storage.Open("d", storage.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c = New(sys.Root, Config{Shards: 1, Store: db})
	defer c.Stop()
	r1, err1 := c.Resolve(Resolve{ID: lost.ID, Account: "acc_a", Now: t0.Add(time.Hour)})
	r2, err2 := c.Resolve(Resolve{ID: used.ID, Account: "acc_a", Now: t0.Add(time.Hour)})
	if !r1.Found || err1 != nil {
		t.Errorf("event collected an hour before a graceful stop: %+v %v", r1, err1)
	}
	if !r2.Replayed || err2 != nil {
		t.Errorf("first use made an hour before a graceful stop: %+v %v; replay undetected", r2, err2)
	}
}

// TestFailedWriteDoesNotPinOlderEntries: after a failed write and the
// shard's next one, the entries written before are evicted when idle, as
// any: the retry wrote them again. Before, every entry written before the
// failure stayed in memory for the life of the process.
func TestFailedWriteDoesNotPinOlderEntries(t *testing.T) {
	db, err := storage.Open("d", storage.Options{FS: vfs.NewMem(), SyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st := &failingStore{DB: db}
	sys := quietEventsSystem()
	defer sys.Shutdown()
	c := New(sys.Root, Config{Shards: 1, Store: st, IdleAfter: time.Minute, Logger: slog.New(slog.DiscardHandler)})
	defer c.Stop()
	for i := 0; i < 100; i++ {
		c.Record(event("acc_a", "v-stored", t0))
	}
	c.flush() // stored fine
	c.Record(event("acc_a", "v-lost", t0))
	st.fail.Store(true)
	c.flush()
	st.fail.Store(false)
	c.Record(event("acc_a", "v-later", t0))
	c.flush()
	evictAllBut(t, c, t0.Add(24*time.Hour), 1)
	if ev, _ := c.resident(); ev > 1 {
		t.Errorf("%d events stay resident; only the one whose write failed needs to", ev)
	}
}

// givenUpStep is a chained resolve whose caller answered without it.
type givenUpStep struct {
	req  Resolve
	gave bool
	out  chan Resolved
}

func (g *givenUpStep) ResolveReq() *Resolve           { return &g.req }
func (g *givenUpStep) Resolved(r Resolved, err error) { g.out <- r }
func (g *givenUpStep) Fail(error)                     { close(g.out) }
func (g *givenUpStep) GivenUp() bool                  { return g.gave }

// TestGivenUpResolveCountsNoUse: a chained resolve whose evaluation was
// answered without it (its wait timed out: device_status "unavailable")
// counts no use, so the customer's retry is a first use, not a replay.
// Before, the late resolve used the event up.
func TestGivenUpResolveCountsNoUse(t *testing.T) {
	sys := quietEventsSystem()
	defer sys.Shutdown()
	c := New(sys.Root, Config{Shards: 1, Logger: slog.New(slog.DiscardHandler)})
	defer c.Stop()
	e := event("acc_a", "visitor-g", t0)
	c.Record(e)
	late := &givenUpStep{req: Resolve{ID: e.ID, Account: "acc_a", Now: t0.Add(time.Second)}, gave: true, out: make(chan Resolved, 1)}
	c.ResolveThen(late)
	if r := <-late.out; !r.Found || r.Replayed {
		t.Fatalf("the given-up resolve: %+v", r)
	}
	r, err := c.Resolve(Resolve{ID: e.ID, Account: "acc_a", Now: t0.Add(2 * time.Second)})
	if err != nil || !r.Found || r.Replayed {
		t.Fatalf("the retry after a given-up resolve: %+v %v; want a first use", r, err)
	}
	again := &givenUpStep{req: Resolve{ID: e.ID, Account: "acc_a", Now: t0.Add(3 * time.Second)}, out: make(chan Resolved, 1)}
	c.ResolveThen(again)
	if r := <-again.out; !r.Replayed {
		t.Fatalf("a resolve its caller waited for, after a use: %+v, want a replay", r)
	}
}

// TestUnuseFirstThenReplay: the first use and a replay are both given back,
// the first's refund first (a cluster settles them in any order): no use
// stands, and the next resolve is a first use again.
func TestUnuseFirstThenReplay(t *testing.T) {
	sys := quietEventsSystem()
	defer sys.Shutdown()
	c := New(sys.Root, Config{Shards: 1, Logger: slog.New(slog.DiscardHandler)})
	defer c.Stop()
	e := event("acc_a", "visitor-x", t0)
	c.Record(e)
	t1, t2, t3 := t0.Add(time.Second), t0.Add(2*time.Second), t0.Add(3*time.Second)
	c.Resolve(Resolve{ID: e.ID, Account: "acc_a", Now: t1})
	c.Resolve(Resolve{ID: e.ID, Account: "acc_a", Now: t2})
	c.Unuse(e.ID, "acc_a", t1)
	c.Unuse(e.ID, "acc_a", t2)
	r, err := c.Resolve(Resolve{ID: e.ID, Account: "acc_a", Now: t3})
	if err != nil || !r.Found {
		t.Fatal(err)
	}
	if r.Replayed {
		t.Fatalf("both uses given back, yet the next resolve reads Replayed (Uses %d, FirstUse %v)", r.Event.Uses, r.Event.FirstUse)
	}
}
