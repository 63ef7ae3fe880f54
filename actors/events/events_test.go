package events

import (
	"errors"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/intel/device"
	"github.com/fraudd/fraudd/storage"
)

var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func event(account, visitor string, at time.Time) *storage.DeviceEvent {
	return &storage.DeviceEvent{
		ID: NewEventID(visitor, at), Account: account, Created: at, Schema: 1,
		Signals: []byte(`{"v":1}`), Flags: storage.EventAutomation, VisitorID: visitor,
	}
}

func TestEventIDs(t *testing.T) {
	id := NewEventID("0123456789abcdef0123", t0)
	s := FormatEventID(id)
	back, ok := ParseEventID(s)
	if !ok || back != id || storage.EventDay(id) != storage.DayOf(t0) {
		t.Fatalf("%s → %v %v", s, back, ok)
	}
	for _, bad := range []string{"", "ev_", s[:len(s)-1], s + "0", "EV_" + s[3:], s[:10] + "G" + s[11:], s[:10] + "A" + s[11:]} {
		if _, ok := ParseEventID(bad); ok {
			t.Fatalf("%q parsed", bad)
		}
	}
	if n := testing.AllocsPerRun(100, func() { ParseEventID(s) }); n != 0 {
		t.Fatalf("ParseEventID allocates %.0f", n)
	}
	if NewEventID("v", t0) == NewEventID("v", t0) {
		t.Fatal("ids repeat")
	}
}

func TestRecordResolveReplay(t *testing.T) {
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	c := New(sys.Root, Config{Shards: 4})
	defer c.Stop()

	e1 := event("acc_a", "visitor-1", t0)
	c.Record(e1)
	r, err := c.Resolve(Resolve{ID: e1.ID, Account: "acc_a", Now: t0.Add(5 * time.Second)})
	if err != nil || !r.Found || r.Replayed || r.Event.VisitorID != "visitor-1" {
		t.Fatalf("first resolve: %v %+v", err, r)
	}
	if r.Sightings.TimesSeen != 1 || !r.Sightings.FirstSeen.Equal(t0) {
		t.Fatalf("sightings %+v", r.Sightings)
	}
	r, _ = c.Resolve(Resolve{ID: e1.ID, Account: "acc_a", Now: t0.Add(9 * time.Second)})
	if !r.Found || !r.Replayed {
		t.Fatalf("second resolve is not a replay: %+v", r)
	}
	// Another account never sees it; an unknown id is simply not found.
	if r, err := c.Resolve(Resolve{ID: e1.ID, Account: "acc_b", Now: t0}); err != nil || r.Found {
		t.Fatalf("foreign account: %v %+v", err, r)
	}
	if r, err := c.Resolve(Resolve{ID: NewEventID("visitor-1", t0), Account: "acc_a", Now: t0}); err != nil || r.Found {
		t.Fatalf("unknown id: %v %+v", err, r)
	}
	// The same device seen again: times_seen counts sightings.
	e2 := event("acc_a", "visitor-1", t0.Add(time.Hour))
	c.Record(e2)
	r, _ = c.Resolve(Resolve{ID: e2.ID, Account: "acc_a", Now: t0.Add(time.Hour)})
	if r.Sightings.TimesSeen != 2 || !r.Sightings.FirstSeen.Equal(t0) || r.Replayed {
		t.Fatalf("second event: %+v", r)
	}
}

// TestDurableAcrossEvictionAndRestart: uses and sightings survive eviction and
// a restart on the same store.
func TestDurableAcrossEvictionAndRestart(t *testing.T) {
	fs := vfs.NewMem()
	// No ticks of the sync loop during the test: db.Sync stands in for them.
	db, err := storage.Open("d", storage.Options{FS: fs, SyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	c := New(sys.Root, Config{Shards: 2, Store: db, IdleAfter: time.Minute})
	e := event("acc_a", "visitor-9", t0)
	c.Record(e)
	if r, _ := c.Resolve(Resolve{ID: e.ID, Account: "acc_a", Now: t0}); !r.Found || r.Replayed {
		t.Fatalf("%+v", r)
	}
	// Nothing is evicted before its write is stored; then everything goes.
	c.Sweep(t0.Add(time.Hour))
	if ev, hi := c.resident(); ev != 1 || hi != 1 {
		t.Fatalf("evicted before stored: %d events, %d histories resident", ev, hi)
	}
	if err := db.Sync(); err != nil { // runs the flush hook
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.Sweep(t0.Add(time.Hour))
		if ev, hi := c.resident(); ev == 0 && hi == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("entries not evicted")
		}
		time.Sleep(time.Millisecond)
	}
	if r, _ := c.Resolve(Resolve{ID: e.ID, Account: "acc_a", Now: t0.Add(time.Hour)}); !r.Found || !r.Replayed || r.Sightings.TimesSeen != 1 {
		t.Fatalf("after eviction: %+v", r)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err = storage.Open("d", storage.Options{FS: fs}); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c = New(sys.Root, Config{Shards: 8, Store: db}) // another shard count: routing is by the id
	defer c.Stop()
	r, err := c.Resolve(Resolve{ID: e.ID, Account: "acc_a", Now: t0.Add(2 * time.Hour)})
	// The stored first use makes it a replay; the replay after the
	// eviction was not written (only Uses > 0 is read).
	if err != nil || !r.Found || !r.Replayed || r.Event.Uses != 1 || r.Sightings.TimesSeen != 1 {
		t.Fatalf("after restart: %v %+v", err, r)
	}
	// Let the use recorded by that resolve reach the store so the prune
	// below is last.
	if err := db.Sync(); err != nil {
		t.Fatal(err)
	}
	// Past retention the event is pruned.
	if err := c.Prune(t0.Add(storage.EventRetention + 48*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.GetEvent(e.ID); err == nil {
		t.Fatal("event survived retention")
	}
}

// TestReplaysWriteNothing: once an event's first use is stored, replays
// are answered from memory and write nothing; after a crash the stored first
// use still makes the next resolve a replay.
func TestReplaysWriteNothing(t *testing.T) {
	fs := vfs.NewCrashableMem()
	db, err := storage.Open("d", storage.Options{FS: fs, SyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	c := New(sys.Root, Config{Shards: 4, Store: db})
	defer c.Stop()
	e := event("acc_a", "visitor-4", t0)
	c.Record(e)
	if r, err := c.Resolve(Resolve{ID: e.ID, Account: "acc_a", Now: t0}); err != nil || !r.Found || r.Replayed {
		t.Fatalf("first use: %v %+v", err, r)
	}
	if err := db.Sync(); err != nil {
		t.Fatal(err)
	}
	before := db.WriteStats()
	for i := range 50 {
		if r, err := c.Resolve(Resolve{ID: e.ID, Account: "acc_a", Now: t0.Add(time.Duration(i+1) * time.Second)}); err != nil || !r.Replayed || r.Event.Uses != uint32(i+1) {
			t.Fatalf("replay %d: %v %+v", i, err, r)
		}
	}
	if err := db.Sync(); err != nil {
		t.Fatal(err)
	}
	if d := db.WriteStats().Keys - before.Keys; d != 0 {
		t.Fatalf("50 replays wrote %d keys, want 0", d)
	}
	db2, err := storage.Open("d", storage.Options{FS: fs.CrashClone(vfs.CrashCloneCfg{})})
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	c2 := New(sys.Root, Config{Shards: 4, Store: db2})
	defer c2.Stop()
	if r, err := c2.Resolve(Resolve{ID: e.ID, Account: "acc_a", Now: t0.Add(time.Hour)}); err != nil || !r.Found || !r.Replayed {
		t.Fatalf("after a crash: %v %+v", err, r)
	}
}

// TestWritesOncePerInterval: however often an event is used within an
// interval, its record and its device's sightings are written once, in one
// batch, just before the group sync; a crash before that sync loses them,
// one after keeps them.
func TestWritesOncePerInterval(t *testing.T) {
	fs := vfs.NewCrashableMem()
	db, err := storage.Open("d", storage.Options{FS: fs, SyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	c := New(sys.Root, Config{Shards: 4, Store: db})
	defer c.Stop()
	e := event("acc_a", "visitor-3", t0)
	c.Record(e)
	for i := range 100 {
		if r, err := c.Resolve(Resolve{ID: e.ID, Account: "acc_a", Now: t0.Add(time.Duration(i) * time.Second)}); err != nil || !r.Found {
			t.Fatalf("resolve %d: %v %+v", i, err, r)
		}
	}
	stored := func(fs vfs.FS) uint32 {
		t.Helper()
		db2, err := storage.Open("d", storage.Options{FS: fs})
		if err != nil {
			t.Fatal(err)
		}
		defer db2.Close()
		got, err := db2.GetEvent(e.ID)
		if errors.Is(err, storage.ErrNotFound) {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		return got.Uses
	}
	if n := stored(fs.CrashClone(vfs.CrashCloneCfg{})); n != 0 {
		t.Fatalf("before the group sync a crash image has the event with %d uses", n)
	}
	before := db.WriteStats()
	if err := db.Sync(); err != nil {
		t.Fatal(err)
	}
	after := db.WriteStats()
	// One batch: the event, the history record and the delete of its
	// previous period's key.
	if d := after.Commits - before.Commits; d != 1 {
		t.Errorf("%d commits for one interval, want 1", d)
	}
	if d := after.Keys - before.Keys; d != 3 {
		t.Errorf("%d keys written for one interval, want 3", d)
	}
	if n := stored(fs.CrashClone(vfs.CrashCloneCfg{})); n != 100 {
		t.Fatalf("after the group sync a crash image has %d uses, want 100", n)
	}
}

func BenchmarkResolve(b *testing.B) {
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	c := New(sys.Root, Config{Shards: 4})
	defer c.Stop()
	e := event("acc_a", "visitor-1", t0)
	c.Record(e)
	m := Resolve{ID: e.ID, Account: "acc_a", Now: t0}
	b.ReportAllocs()
	for b.Loop() {
		if r, err := c.Resolve(m); err != nil || !r.Found {
			b.Fatal(err)
		}
	}
}

// TestCollectKeepsTheVerdict: the verdict a report was collected with is
// the one an evaluation resolves (the stored flag bits stay in this
// package), findings aside.
func TestCollectKeepsTheVerdict(t *testing.T) {
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	c := New(sys.Root, Config{Shards: 2})
	defer c.Stop()
	for i, v := range []device.Verdict{
		{Automation: true, Emulator: true, IPBlocklisted: true, TamperingScore: 0.37, Checked: 0x3f, VisitorID: "visitor-a",
			Findings: []device.Finding{"headless_ua", "webdriver"}},
		{Antidetect: true, VirtualMachine: true, Incognito: true, PrivacyMode: true, Complete: true, TamperingScore: 1, Checked: 0x7f, VisitorID: "visitor-b"},
		{},
	} {
		id, err := c.Collect(Collected{Account: "acc_a", Now: t0, Origin: "https://shop.example", Addr: netip.MustParseAddr("73.0.0.1"),
			Schema: 1, Signals: []byte(`{"v":1}`), Verdict: &v})
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.Resolve(Resolve{ID: id, Account: "acc_a", Now: t0})
		if err != nil || !r.Found || r.Event.Origin != "https://shop.example" || len(r.Event.Findings) != len(v.Findings) {
			t.Fatalf("%d: %v %+v", i, err, r)
		}
		want := v
		want.Findings = nil
		if got := r.Verdict(); !reflect.DeepEqual(got, want) {
			t.Fatalf("%d: verdict\n got %+v\nwant %+v", i, got, want)
		}
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Collect(Collected{Verdict: &device.Verdict{}}); !errors.Is(err, ErrStopped) {
		t.Fatalf("after Stop: %v", err)
	}
}

// TestPeekCountsNoUse: a stored event peeked (for a challenge) is not a
// replay for the evaluation that follows; another account's is not found.
func TestPeekCountsNoUse(t *testing.T) {
	db, err := storage.Open("d", storage.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	e := event("acc_a", "visitor-p", t0)
	if err := db.WriteDevice(storage.DeviceWrite{Events: []*storage.DeviceEvent{e}}); err != nil {
		t.Fatal(err)
	}
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	c := New(sys.Root, Config{Shards: 2, Store: db})
	defer c.Stop()
	for range 2 {
		if r, err := c.Peek(Resolve{ID: e.ID, Account: "acc_a", Now: t0}); err != nil || !r.Found || r.Event.VisitorID != "visitor-p" {
			t.Fatalf("peek: %v %+v", err, r)
		}
	}
	if r, err := c.Peek(Resolve{ID: e.ID, Account: "acc_b", Now: t0}); err != nil || r.Found {
		t.Fatalf("another account's event: %v %+v", err, r)
	}
	if r, err := c.Resolve(Resolve{ID: e.ID, Account: "acc_a", Now: t0}); err != nil || !r.Found || r.Replayed {
		t.Fatalf("resolve after peeks: %v %+v", err, r)
	}
}

// TestPeekSeesEventsNotYetStored: an event collected within the last sync
// interval is still only in its shard. A peek at it (a device-evidence
// challenge issued right after collection) must not count a use either,
// or the evaluation that follows reports device_replayed. It used to fall
// back to Resolve whenever the store had not the event yet.
func TestPeekSeesEventsNotYetStored(t *testing.T) {
	db, err := storage.Open("d", storage.Options{FS: vfs.NewMem(), SyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	c := New(sys.Root, Config{Shards: 2, Store: db})
	defer c.Stop()
	e := event("acc_a", "visitor-q", t0)
	c.Record(e)
	if r, err := c.Peek(Resolve{ID: e.ID, Account: "acc_a", Now: t0}); err != nil || !r.Found || r.Replayed {
		t.Fatalf("peek: %v %+v", err, r)
	}
	if _, err := db.GetEvent(e.ID); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("the event is already stored (%v): the test shows nothing", err)
	}
	if r, err := c.Resolve(Resolve{ID: e.ID, Account: "acc_a", Now: t0}); err != nil || !r.Found || r.Replayed {
		t.Fatalf("resolve after a peek: %v %+v", err, r)
	}
	if r, err := c.Resolve(Resolve{ID: e.ID, Account: "acc_a", Now: t0}); err != nil || !r.Replayed {
		t.Fatalf("second resolve: %v %+v", err, r)
	}
}

// TestUnuseGivesTheUseBack: a use given back (an evaluation its caller never
// got the answer of) leaves the event unused, in memory and in the store,
// so the evaluation tried again is not a replay; a later use's give-back
// does not clear the first; another account's give-back does nothing.
func TestUnuseGivesTheUseBack(t *testing.T) {
	fs := vfs.NewMem()
	db, err := storage.Open("d", storage.Options{FS: fs, SyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	c := New(sys.Root, Config{Shards: 2, Store: db})
	e := event("acc_a", "visitor-u", t0)
	c.Record(e)
	at := t0.Add(time.Second)
	if r, err := c.Resolve(Resolve{ID: e.ID, Account: "acc_a", Now: at}); err != nil || !r.Found || r.Replayed {
		t.Fatalf("first use: %v %+v", err, r)
	}
	c.Unuse(e.ID, "acc_b", at)
	c.Unuse(e.ID, "acc_a", at)
	if r, err := c.Resolve(Resolve{ID: e.ID, Account: "acc_a", Now: at.Add(time.Second)}); err != nil || !r.Found || r.Replayed {
		t.Fatalf("after the first use was given back: %v %+v", err, r)
	}
	// A second use given back leaves the first.
	if _, err := c.Resolve(Resolve{ID: e.ID, Account: "acc_a", Now: at.Add(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	c.Unuse(e.ID, "acc_a", at.Add(2*time.Second))
	if r, _ := c.Resolve(Resolve{ID: e.ID, Account: "acc_a", Now: at.Add(3 * time.Second)}); !r.Replayed {
		t.Fatalf("a later use's give-back cleared the first: %+v", r)
	}
	// Stored: a first use given back is written, and a restart reads the
	// event unused.
	f := event("acc_a", "visitor-v", t0)
	c.Record(f)
	if _, err := c.Resolve(Resolve{ID: f.ID, Account: "acc_a", Now: at}); err != nil {
		t.Fatal(err)
	}
	if err := db.Sync(); err != nil {
		t.Fatal(err)
	}
	c.Unuse(f.ID, "acc_a", at)
	if err := db.Sync(); err != nil {
		t.Fatal(err)
	}
	c.Stop()
	c = New(sys.Root, Config{Shards: 2, Store: db})
	r, err := c.Resolve(Resolve{ID: f.ID, Account: "acc_a", Now: at.Add(time.Second)})
	c.Stop()
	db.Close()
	if err != nil || !r.Found || r.Replayed {
		t.Fatalf("after a restart: %v %+v", err, r)
	}
}

// TestPeekReadsSightings: a resolve that counts no use — the personal test
// key's evaluation, a cluster owner's push to its mirrors — still reads the
// device's global sightings. SPEC 2.2 device.times_seen and first_seen are
// the device's, "not scoped to the key", and SPEC 5.2 has the test key run
// the complete live pipeline; a peek answered zero sightings, so a test-key
// evaluation of a device seen twice read times_seen 1, returning false and
// the event's own time as first_seen.
func TestPeekReadsSightings(t *testing.T) {
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	c := New(sys.Root, Config{Shards: 2})
	defer c.Stop()
	e1, e2 := event("acc_a", "visitor-s", t0), event("acc_a", "visitor-s", t0.Add(time.Hour))
	c.Record(e1)
	c.Record(e2)
	r, err := c.Peek(Resolve{ID: e2.ID, Account: "acc_a", Now: t0.Add(2 * time.Hour)})
	if err != nil || !r.Found || r.Replayed {
		t.Fatalf("peek: %v %+v", err, r)
	}
	if r.Sightings.TimesSeen != 2 || !r.Sightings.FirstSeen.Equal(t0) || r.Sightings.Visitor != "visitor-s" {
		t.Fatalf("peek's sightings %+v, want the device's 2 since %v", r.Sightings, t0)
	}
	// The peek counted no use, and the resolve after it reads the same.
	r, err = c.Resolve(Resolve{ID: e2.ID, Account: "acc_a", Now: t0.Add(2 * time.Hour)})
	if err != nil || !r.Found || r.Replayed || r.Sightings.TimesSeen != 2 || !r.Sightings.FirstSeen.Equal(t0) {
		t.Fatalf("resolve after the peek: %v %+v", err, r)
	}
}
