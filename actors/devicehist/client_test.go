package devicehist

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/internal/secrets"
	"github.com/fraudd/fraudd/storage"
)

func quietSystem() *actor.ActorSystem {
	return actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
}

var testSecret = secrets.FromBytes([]byte("devicehist test"))

func newClient(t testing.TB, cfg Config) *Client {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Secret = testSecret
	c, err := New(quietSystem().Root, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	return c
}

func openDB(t testing.TB, fs vfs.FS) *storage.DB {
	t.Helper()
	return openDBWith(t, fs, 0)
}

// openDBWith opens a store with the given group sync interval.
func openDBWith(t testing.TB, fs vfs.FS, interval time.Duration) *storage.DB {
	t.Helper()
	db, err := storage.Open("dh", storage.Options{FS: fs, Logger: slog.New(slog.DiscardHandler), SyncInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func observe(t testing.TB, c *Client, o Observation) Facts {
	t.Helper()
	f, err := c.Observe(o)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestObserveNothing(t *testing.T) {
	c := newClient(t, Config{Shards: 2})
	if f := observe(t, c, Observation{Customer: "acc_1", EventID: "ev", IP: ip1, Now: t0}); f != (Facts{}) {
		t.Fatalf("no device, no account: %+v", f)
	}
	for _, o := range []Observation{
		{DeviceID: "d", Now: t0},
		{Customer: strings.Repeat("c", storage.MaxHistCustomer+1), DeviceID: "d", Now: t0},
		{Customer: "acc_1", DeviceID: strings.Repeat("d", storage.MaxHistDevice+1), Now: t0},
		{Customer: "acc_1", AccountID: strings.Repeat("a", 4*MaxAccountID+1), Now: t0},
	} {
		if _, err := c.Observe(o); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v", o, err)
		}
	}
}

func TestTestKeyNotRecorded(t *testing.T) {
	c := newClient(t, Config{Shards: 2})
	o := Observation{Customer: "acc_1", EventID: "ev1", DeviceID: "dev", AccountID: "user-1", IP: ip1, Now: t0}
	// A test-key check answers as if recorded...
	tst := o
	tst.Test = true
	f := observe(t, c, tst)
	if f.History.Visits != 1 || f.LinkedAccounts != 1 || f.DeviceAccounts24h != 1 || f.IPAccounts24h != 1 || !f.IPCounted {
		t.Fatalf("test-key facts: %+v", f)
	}
	// ...but leaves nothing behind.
	if n := c.resident(); n != 0 {
		t.Fatalf("%d entries kept for test traffic", n)
	}
	other := Observation{Customer: "acc_1", EventID: "ev2", DeviceID: "dev", AccountID: "user-2", IP: ip1, Now: t0.Add(time.Minute)}
	if f = observe(t, c, other); f.History.Visits != 1 || f.LinkedAccounts != 1 || f.IPAccounts24h != 1 || f.RelatedAccounts90d != 0 {
		t.Fatalf("live after test: %+v", f)
	}
	// A test check over live history sees it and adds nothing.
	tst.Now = t0.Add(2 * time.Minute)
	if f = observe(t, c, tst); f.History.Visits != 2 || f.LinkedAccounts != 2 || f.RelatedAccounts90d != 1 || f.IPAccounts24h != 2 {
		t.Fatalf("test over live: %+v", f)
	}
	other.EventID, other.Now = "ev3", t0.Add(3*time.Minute)
	if f = observe(t, c, other); f.History.Visits != 2 || f.LinkedAccounts != 1 || f.RelatedAccounts90d != 0 {
		t.Fatalf("the test check left a trace: %+v", f)
	}
}

func TestSharedExitNotCounted(t *testing.T) {
	c := newClient(t, Config{Shards: 2})
	o := Observation{Customer: "acc_1", DeviceID: "dev", AccountID: "u1", IP: ip1, SharedExit: true, Now: t0}
	if f := observe(t, c, o); f.IPCounted || f.IPAccounts24h != 0 {
		t.Fatalf("shared exit counted: %+v", f)
	}
	o.AccountID, o.DeviceID = "u2", "dev2"
	if f := observe(t, c, o); f.RelatedAccounts90d != 0 {
		t.Fatalf("a shared exit linked two accounts: %+v", f)
	}
	// Unmeasured (no address) is null too; a real address counts.
	o.SharedExit, o.IP = false, netip.Addr{}
	if f := observe(t, c, o); f.IPCounted {
		t.Fatalf("no address counted: %+v", f)
	}
	o.IP = netip.MustParseAddr("::ffff:73.1.1.1") // mapped: the same address as ip1
	if f := observe(t, c, o); !f.IPCounted || f.IPAccounts24h != 1 {
		t.Fatalf("address: %+v", f)
	}
	o.AccountID, o.IP = "u3", ip1
	if f := observe(t, c, o); f.IPAccounts24h != 2 {
		t.Fatalf("mapped and plain IPv4 differ: %+v", f)
	}
}

func TestCustomersApart(t *testing.T) {
	c := newClient(t, Config{Shards: 4})
	a := Observation{Customer: "acc_a", EventID: "e1", DeviceID: "dev", AccountID: "same-user", IP: ip1, Now: t0}
	b := a
	b.Customer, b.EventID = "acc_b", "e2"
	observe(t, c, a)
	f := observe(t, c, b)
	if f.History.Visits != 1 || f.LinkedAccounts != 1 || f.IPAccounts24h != 1 || f.RelatedAccounts90d != 0 || f.AccountDevices24h != 1 {
		t.Fatalf("another customer's history leaked: %+v", f)
	}
}

func TestDevicesMemory(t *testing.T) {
	c := newClient(t, Config{Shards: 2})
	for i := 0; i < 60; i++ {
		observe(t, c, Observation{Customer: "acc_1", EventID: "e" + string(rune('A'+i)), DeviceID: "dev" + string(rune('A'+i)), AccountID: "u", Now: t0.Add(time.Duration(i) * time.Minute)})
	}
	observe(t, c, Observation{Customer: "acc_2", DeviceID: "x", Now: t0})
	got, err := c.Devices("acc_1", 0, t0.Add(time.Hour))
	if err != nil || len(got) != DevicesLimit {
		t.Fatalf("devices: %v %d", err, len(got))
	}
	if got[0].VisitorID != "dev"+string(rune('A'+59)) || got[0].Visits != 1 || got[0].LinkedAccounts != 1 || !got[0].LastSeen.Equal(t0.Add(59*time.Minute)) {
		t.Fatalf("newest: %+v", got[0])
	}
	if got, _ := c.Devices("acc_3", 0, t0); len(got) != 0 {
		t.Fatalf("unknown customer: %+v", got)
	}
}

// TestRestartKeepsHistory: everything observed survives Stop, closing the
// store and opening it again on the same (in-memory) filesystem.
func TestRestartKeepsHistory(t *testing.T) {
	fs := vfs.NewMem()
	db := openDB(t, fs)
	c := newClient(t, Config{Shards: 4, Store: db})
	for i, u := range []string{"u1", "u2", "u1"} {
		observe(t, c, Observation{Customer: "acc_1", EventID: "e" + u + string(rune('0'+i)), DeviceID: "dev", AccountID: u, IP: ip1, Now: t0.Add(time.Duration(i) * time.Minute)})
	}
	observe(t, c, Observation{Customer: "acc_1", EventID: "x", DeviceID: "dev2", AccountID: "u1", IP: ip2, Now: t0.Add(5 * time.Minute)})
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db = openDB(t, fs)
	defer db.Close()
	c = newClient(t, Config{Shards: 2, Store: db})
	f := observe(t, c, Observation{Customer: "acc_1", EventID: "e4", DeviceID: "dev", AccountID: "u2", IP: ip1, Now: t0.Add(10 * time.Minute)})
	want := Facts{Device: true, History: History{Visits: 4, FirstSeen: t0, LastSeen: t0.Add(10 * time.Minute), Accounts: 2}, Visits24h: 4,
		LinkedAccounts: 2, Account: true, DeviceAccounts24h: 2, AccountDevices24h: 1, IPAccounts24h: 2, IPCounted: true, RelatedAccounts90d: 1}
	if f != want {
		t.Fatalf("after restart:\n got %+v\nwant %+v", f, want)
	}
	// A resubmitted event from before the restart still counts once.
	if f = observe(t, c, Observation{Customer: "acc_1", EventID: "x", DeviceID: "dev2", AccountID: "u1", Now: t0.Add(11 * time.Minute)}); !f.Repeated || f.History.Visits != 1 {
		t.Fatalf("repeat after restart: %+v", f)
	}
	if f = observe(t, c, Observation{Customer: "acc_1", EventID: "y", DeviceID: "dev3", AccountID: "u1", Now: t0.Add(12 * time.Minute)}); !f.NewDevice || f.AccountDevices24h != 3 {
		t.Fatalf("account links after restart: %+v", f)
	}
	devs, err := c.Devices("acc_1", 0, t0.Add(time.Hour))
	// A repeated event is no new sighting: dev2's last_seen stays at +5 min.
	if err != nil || len(devs) != 3 || devs[0].VisitorID != "dev3" || devs[1].VisitorID != "dev" || devs[2].VisitorID != "dev2" ||
		devs[1].Visits != 4 || devs[1].LinkedAccounts != 2 || !devs[1].FirstSeen.Equal(t0) {
		t.Fatalf("devices after restart: %v %+v", err, devs)
	}
}

// TestCrashLosesOnlyUnsynced: after the committer drained and the store's
// write-behind sync ran, a crash (the filesystem as of its last sync) keeps
// everything.
func TestCrashLosesOnlyUnsynced(t *testing.T) {
	fs := vfs.NewCrashableMem()
	db := openDB(t, fs)
	c := newClient(t, Config{Shards: 2, Store: db})
	for i := 0; i < 20; i++ {
		observe(t, c, Observation{Customer: "acc_1", EventID: "e" + string(rune('a'+i)), DeviceID: "dev", AccountID: "u" + string(rune('a'+i%3)), IP: ip1, Now: t0.Add(time.Duration(i) * time.Second)})
	}
	if _, err := c.Devices("acc_1", 0, t0); err != nil { // a barrier: waits for the shard's writes
		t.Fatal(err)
	}
	// Write-behind commits are synced by the store's group sync; take
	// the crash image after that sync.
	if err := db.Sync(); err != nil {
		t.Fatal(err)
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	db2 := openDB(t, crashed)
	defer db2.Close()
	c2 := newClient(t, Config{Shards: 2, Store: db2})
	f := observe(t, c2, Observation{Customer: "acc_1", EventID: "z", DeviceID: "dev", AccountID: "ua", IP: ip1, Now: t0.Add(time.Minute)})
	if f.History.Visits != 21 || f.LinkedAccounts != 3 || f.IPAccounts24h != 3 {
		t.Fatalf("after crash: %+v", f)
	}
	_ = c.Stop()
	_ = db.Close()
}

// TestWritesOncePerInterval: a device, account and address observed many
// times within one sync interval are written once, in one batch just
// before the group sync. A crash before that sync loses the interval; one
// after it keeps everything.
func TestWritesOncePerInterval(t *testing.T) {
	fs := vfs.NewCrashableMem()
	// No ticks of the loop during the test: db.Sync stands in for them.
	db, err := storage.Open("dh", storage.Options{FS: fs, SyncInterval: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c := newClient(t, Config{Shards: 4, Store: db})
	obs := func(c *Client, i int) Facts {
		return observe(t, c, Observation{Customer: "acc_1", EventID: fmt.Sprintf("e%d", i), DeviceID: "dev", AccountID: "u1", IP: ip1, Now: t0.Add(time.Duration(i) * time.Second)})
	}
	for i := range 50 {
		obs(c, i)
	}
	visitsIn := func(fs vfs.FS) int {
		db2, err := storage.Open("dh", storage.Options{FS: fs, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		defer db2.Close()
		c2 := newClient(t, Config{Shards: 2, Store: db2})
		defer c2.Stop()
		return obs(c2, 1000).History.Visits - 1
	}
	if n := visitsIn(fs.CrashClone(vfs.CrashCloneCfg{})); n != 0 {
		t.Fatalf("before the group sync a crash image has %d visits", n)
	}
	before := db.WriteStats()
	if err := db.Sync(); err != nil {
		t.Fatal(err)
	}
	after := db.WriteStats()
	if d := after.Commits - before.Commits; d != 1 {
		t.Errorf("%d commits for one interval, want 1", d)
	}
	// The device, account and address records, and the first expiry-index
	// and recency-index entries: 3 + 3 + 1, however many observations.
	if d := after.Keys - before.Keys; d != 7 {
		t.Errorf("%d keys written for one interval, want 7", d)
	}
	if n := visitsIn(fs.CrashClone(vfs.CrashCloneCfg{})); n != 50 {
		t.Fatalf("after the group sync a crash image has %d visits, want 50", n)
	}
}

// TestPruneRemovesExpired: 90 days after the last check nothing of an
// account is left in the store — its sealed id, links and index entries.
func TestPruneRemovesExpired(t *testing.T) {
	db := openDB(t, vfs.NewMem())
	defer db.Close()
	c := newClient(t, Config{Shards: 2, Store: db})
	observe(t, c, Observation{Customer: "acc_1", EventID: "e1", DeviceID: "old", AccountID: "gone", IP: ip2, Now: t0})
	observe(t, c, Observation{Customer: "acc_1", EventID: "e2", DeviceID: "dev", AccountID: "stays", IP: ip1, Now: t0})
	observe(t, c, Observation{Customer: "acc_1", EventID: "e3", DeviceID: "dev", AccountID: "stays", IP: ip1, Now: t0.Add(60 * 24 * time.Hour)})
	if err := c.Prune(t0.Add(60 * 24 * time.Hour)); err != nil {
		t.Fatal(err)
	}
	// 6 records, each with its expiry entry; 2 recent-device entries.
	if n := countHist(t, db); n != 6+2 {
		t.Fatalf("keys before expiry: %d", n)
	}
	hashGone := hashOf(c, "acc_1", "gone")
	if _, ok, _ := db.LoadHist(&storage.HistAccount{Customer: "acc_1", Hash: hashGone}); !ok {
		t.Fatal("account pruned early")
	}

	at := t0.Add(90*24*time.Hour + 24*time.Hour)
	if err := c.Prune(at); err != nil {
		t.Fatal(err)
	}
	for _, r := range []storage.HistRecord{
		&storage.HistAccount{Customer: "acc_1", Hash: hashGone},
		&storage.HistCustomerDevice{Customer: "acc_1", Device: "old"},
		&storage.HistAddress{Customer: "acc_1", Addr: ip2},
	} {
		if _, ok, err := db.LoadHist(r); ok || err != nil {
			t.Fatalf("%T survived 90 days: %v %v", r, ok, err)
		}
	}
	// The account still in use was trimmed, not deleted: its old link went.
	dev := &storage.HistCustomerDevice{Customer: "acc_1", Device: "dev"}
	if _, ok, _ := db.LoadHist(dev); !ok || len(dev.Days) != 1 || len(dev.Accounts) != 1 {
		t.Fatalf("kept device: %v %+v", ok, dev)
	}
	if refs := expired(t, db, storage.DayOf(at)+200); len(refs) != 3 {
		t.Fatalf("index entries left: %+v", refs)
	}
	for _, ref := range expired(t, db, storage.DayOf(at)+200) {
		if ref.Day != storage.DayOf(t0.Add(60*24*time.Hour)) {
			t.Fatalf("a kept record was not moved to its new index day: %+v", ref)
		}
	}
	devs, err := c.Devices("acc_1", 0, at)
	if err != nil || len(devs) != 1 || devs[0].VisitorID != "dev" || devs[0].Visits != 1 {
		t.Fatalf("devices after prune: %v %+v", err, devs)
	}
	// Everything goes once the rest is 90 days old too; a second run is a no-op.
	end := t0.Add(151 * 24 * time.Hour)
	for i := 0; i < 2; i++ {
		if err := c.Prune(end); err != nil {
			t.Fatal(err)
		}
	}
	if n := countHist(t, db); n != 0 {
		t.Fatalf("%d device-history keys left after everything expired", n)
	}
}

func expired(t *testing.T, db *storage.DB, before storage.Day) []storage.HistRef {
	t.Helper()
	var out []storage.HistRef
	if err := db.ExpiredHist(before, func(r storage.HistRef) bool { out = append(out, r); return true }); err != nil {
		t.Fatal(err)
	}
	return out
}

// countHist counts the keys under every device-history prefix, through the
// public API: the expiry index names every record, and the recent index is
// read per customer.
func countHist(t *testing.T, db *storage.DB) int {
	t.Helper()
	n := len(expired(t, db, 1<<31))
	recent, err := db.RecentHistDevices("acc_1", 1000)
	if err != nil {
		t.Fatal(err)
	}
	return n + len(recent)
}

func hashOf(c *Client, customer, accountID string) storage.AccountHash {
	var q obsReq
	q.nCust = uint8(copy(q.cust[:], customer))
	q.nAcct = uint16(copy(q.acctID[:], accountID))
	return c.accountHash(&q)
}

func TestLongAccountID(t *testing.T) {
	c := newClient(t, Config{Shards: 2})
	long := strings.Repeat("é", MaxAccountID) // 256 characters, 512 bytes
	f := observe(t, c, Observation{Customer: "acc_1", DeviceID: "d", AccountID: long, Now: t0})
	if !f.Account || f.LinkedAccounts != 1 {
		t.Fatalf("256-character id: %+v", f)
	}
	if f = observe(t, c, Observation{Customer: "acc_1", DeviceID: "d", AccountID: long[:len(long)-2] + "e", Now: t0}); f.LinkedAccounts != 2 {
		t.Fatalf("ids differing in the last character linked as one: %+v", f)
	}
}

func TestSealedAccountID(t *testing.T) {
	db := openDB(t, vfs.NewMem())
	defer db.Close()
	c := newClient(t, Config{Shards: 2, Store: db})
	observe(t, c, Observation{Customer: "acc_1", AccountID: "user-42", Now: t0})
	if _, err := c.Devices("acc_1", 0, t0); err != nil { // barrier
		t.Fatal(err)
	}
	h := hashOf(c, "acc_1", "user-42")
	if h == hashOf(c, "acc_2", "user-42") || h == hashOf(c, "acc_1", "user-43") {
		t.Fatal("account hash not scoped to customer and id")
	}
	r := &storage.HistAccount{Customer: "acc_1", Hash: h}
	if _, ok, err := db.LoadHist(r); !ok || err != nil {
		t.Fatalf("account record: %v %v", ok, err)
	}
	if strings.Contains(string(r.Sealed), "user-42") {
		t.Fatal("account id stored in the clear")
	}
	s, _ := secrets.NewSealer(testSecret, secrets.LabelAccountSeal)
	if id, err := s.Open(r.Sealed); err != nil || string(id) != "user-42" {
		t.Fatalf("sealed copy: %q %v", id, err)
	}
}

func TestSweepEvicts(t *testing.T) {
	db := openDB(t, vfs.NewMem())
	defer db.Close()
	c := newClient(t, Config{Shards: 2, Store: db, IdleAfter: time.Hour})
	observe(t, c, Observation{Customer: "acc_1", EventID: "e", DeviceID: "dev", AccountID: "u", IP: ip1, Now: t0})
	if _, err := c.Devices("acc_1", 0, t0); err != nil {
		t.Fatal(err)
	}
	c.Sweep(t0.Add(30 * time.Minute))
	if n := c.resident(); n != 3 {
		t.Fatalf("%d resident before idle", n)
	}
	c.Sweep(t0.Add(2 * time.Hour))
	if n := c.resident(); n != 0 {
		t.Fatalf("%d resident after idle", n)
	}
	// Reloaded on the next touch.
	if f := observe(t, c, Observation{Customer: "acc_1", EventID: "e2", DeviceID: "dev", AccountID: "u", IP: ip1, Now: t0.Add(3 * time.Hour)}); f.History.Visits != 2 {
		t.Fatalf("after eviction: %+v", f)
	}
	// Memory only: idle entries stay, expired ones go.
	m := newClient(t, Config{Shards: 2, IdleAfter: time.Hour})
	observe(t, m, Observation{Customer: "acc_1", DeviceID: "dev", AccountID: "u", IP: ip1, Now: t0})
	m.Sweep(t0.Add(48 * time.Hour))
	if n := m.resident(); n != 3 {
		t.Fatalf("memory-only evicted live state: %d", n)
	}
	m.Sweep(t0.Add(91 * 24 * time.Hour))
	if n := m.resident(); n != 0 {
		t.Fatalf("memory-only kept expired state: %d", n)
	}
}

// TestReplayedEventCountsOnce: SPEC 2.2 customer_history "repeated
// submissions count once". The device keeps only its latest event ids; an
// older event resubmitted after them is known as a replay by the events
// actor (Observation.Replayed), and adds no visit.
func TestReplayedEventCountsOnce(t *testing.T) {
	c := newClient(t, Config{Shards: 2})
	o := Observation{Customer: "acc_1", DeviceID: "dev", Now: t0}
	for i := range 40 {
		o.EventID = fmt.Sprintf("ev_%032x", i)
		o.Now = t0.Add(time.Duration(i) * time.Minute)
		observe(t, c, o)
	}
	o.EventID, o.Now, o.Replayed = fmt.Sprintf("ev_%032x", 0), t0.Add(45*time.Minute), true
	if f := observe(t, c, o); !f.Repeated || f.History.Visits != 40 {
		t.Fatalf("40 distinct events, the first resubmitted: visits %d (want 40), repeated %v", f.History.Visits, f.Repeated)
	}
	// Without the events actor's word, the device's list alone decides.
	o.Replayed = false
	if f := observe(t, c, o); f.Repeated || f.History.Visits != 41 {
		t.Fatalf("not known as a replay: visits %d (want 41), repeated %v", f.History.Visits, f.Repeated)
	}
}
