package devicehist

import (
	"bytes"
	"cmp"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/storage"
)

func all(string) bool { return true }

// normalized sorts a node's records (and their link lists) into a form
// two nodes' histories can be compared in. Event-id lists are left out:
// their order depends on which node saw what.
func normalized(recs []storage.HistRecord) []string {
	out := make([]string, 0, len(recs))
	for _, r := range recs {
		switch r := r.(type) {
		case *storage.HistCustomerDevice:
			c := *r
			c.Events = nil
			c.Accounts = slices.Clone(c.Accounts)
			slices.SortFunc(c.Accounts, func(a, b storage.SeenAccount) int { return bytes.Compare(a.Hash[:], b.Hash[:]) })
			out = append(out, fmt.Sprintf("device %+v", c))
		case *storage.HistAccount:
			c := *r
			c.Sealed = nil
			c.Devices = slices.Clone(c.Devices)
			slices.SortFunc(c.Devices, func(a, b storage.SeenDevice) int { return cmp.Compare(a.ID, b.ID) })
			c.Addrs = slices.Clone(c.Addrs)
			slices.SortFunc(c.Addrs, func(a, b storage.SeenAddr) int { return a.Addr.Compare(b.Addr) })
			out = append(out, fmt.Sprintf("account %+v", c))
		case *storage.HistAddress:
			c := *r
			c.Accounts = slices.Clone(c.Accounts)
			slices.SortFunc(c.Accounts, func(a, b storage.SeenAccount) int { return bytes.Compare(a.Hash[:], b.Hash[:]) })
			out = append(out, fmt.Sprintf("address %+v", c))
		}
	}
	slices.Sort(out)
	return out
}

func take(t *testing.T, c *Client, match func(string) bool, now time.Time) []storage.HistRecord {
	t.Helper()
	recs, err := c.Take(match, now)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// TestMoveEqualsOneNode: observations spread at random over two nodes,
// then one node's records taken and merged into the other, leave the same
// history as one node that saw them all (visit counts, days, hours, links).
// With stores, the nodes also restart at random (what is resident is
// dropped; the store holds what a take left).
func TestMoveEqualsOneNode(t *testing.T) {
	for seed := range uint64(20) {
		for _, stored := range []bool{false, true} {
			t.Run(fmt.Sprintf("%d/stored=%v", seed, stored), func(t *testing.T) { moveModel(t, seed, stored) })
		}
	}
}

func moveModel(t *testing.T, seed uint64, stored bool) {
	rng := rand.New(rand.NewPCG(seed, 11))
	one := newClient(t, Config{Shards: 2})
	var dbA, dbB *storage.DB
	start := func(db **storage.DB, fs vfs.FS, shards int) *Client {
		cfg := Config{Shards: shards}
		if stored {
			if *db == nil {
				*db = openDB(t, fs)
				t.Cleanup(func() { (*db).Close() })
			}
			cfg.Store = *db
		}
		return newClient(t, cfg)
	}
	fsA, fsB := vfs.NewMem(), vfs.NewMem()
	a := start(&dbA, fsA, 4)
	b := start(&dbB, fsB, 1)
	restart := func(c **Client, db **storage.DB, fs vfs.FS, shards int) {
		if err := (*c).Stop(); err != nil {
			t.Fatal(err)
		}
		*c = start(db, fs, shards)
	}
	devices := []string{"d1", "d2", "d3"}
	accounts := []string{"", "u1", "u2", "u3"}
	ips := []netip.Addr{{}, netip.MustParseAddr("73.0.0.1"), netip.MustParseAddr("2001:db8::7")}
	now := t0
	for i := range 200 {
		now = now.Add(time.Duration(rng.IntN(4*3600)) * time.Second)
		o := Observation{Customer: []string{"acc_a", "acc_b"}[rng.IntN(2)], DeviceID: devices[rng.IntN(len(devices))],
			AccountID: accounts[rng.IntN(len(accounts))], IP: ips[rng.IntN(len(ips))], EventID: fmt.Sprint("ev", i), Now: now}
		if rng.IntN(5) == 0 {
			o.DeviceID = ""
		}
		observe(t, one, o)
		if rng.IntN(2) == 0 {
			observe(t, a, o)
		} else {
			observe(t, b, o)
		}
		if rng.IntN(40) == 0 { // moves happen at any time, several times
			if err := b.Merge(take(t, a, all, now), now); err != nil {
				t.Fatal(err)
			}
		}
		if stored && rng.IntN(30) == 0 {
			restart(&a, &dbA, fsA, 1+rng.IntN(4))
		}
		if stored && rng.IntN(30) == 0 {
			restart(&b, &dbB, fsB, 1+rng.IntN(4))
		}
	}
	if err := b.Merge(take(t, a, all, now), now); err != nil {
		t.Fatal(err)
	}
	if left := take(t, a, all, now); len(left) != 0 {
		t.Fatalf("a still holds %d records", len(left))
	}
	want, got := normalized(take(t, one, all, now)), normalized(take(t, b, all, now))
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("merged history differs from one node's:\n got %q\nwant %q", got, want)
	}
}

// TestTakeStored: records only in the store are taken too, their deletes
// stored; an observation after the take starts from nothing; the other
// customers' records stay.
func TestTakeStored(t *testing.T) {
	fs := vfs.NewMem()
	db := openDB(t, fs)
	c := newClient(t, Config{Shards: 2, Store: db})
	for i := range 3 {
		observe(t, c, Observation{Customer: "acc_a", DeviceID: "d1", AccountID: "u1", IP: ip1, EventID: fmt.Sprint("a", i), Now: t0})
		observe(t, c, Observation{Customer: "acc_b", DeviceID: "d1", EventID: fmt.Sprint("b", i), Now: t0})
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	// A new client: nothing resident, everything in the store.
	c = newClient(t, Config{Shards: 4, Store: db})
	onlyA := func(cust string) bool { return cust == "acc_a" }
	recs := take(t, c, onlyA, t0)
	if len(recs) != 3 { // device, account, address
		t.Fatalf("took %d records, want 3: %v", len(recs), normalized(recs))
	}
	for _, r := range recs {
		if cd, ok := r.(*storage.HistCustomerDevice); ok && history(cd).Visits != 3 {
			t.Fatalf("taken device has %d visits, want 3", history(cd).Visits)
		}
	}
	f := observe(t, c, Observation{Customer: "acc_a", DeviceID: "d1", EventID: "a-after", Now: t0})
	if f.History.Visits != 1 {
		t.Fatalf("after the take the device starts again: visits %d, want 1", f.History.Visits)
	}
	if f := observe(t, c, Observation{Customer: "acc_b", DeviceID: "d1", EventID: "b-after", Now: t0}); f.History.Visits != 4 {
		t.Fatalf("another customer's history stays: visits %d, want 4", f.History.Visits)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	// What the store holds of acc_a now is the one later visit only.
	n := 0
	if err := db.HistOf(onlyA, func(ref storage.HistRef) bool {
		n++
		r := ref.Record()
		if _, found, err := db.LoadHist(r); err != nil || !found {
			t.Errorf("%+v: %v", ref, err)
		} else if cd, ok := r.(*storage.HistCustomerDevice); !ok || history(cd).Visits != 1 {
			t.Errorf("stored after the take: %+v", r)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("store holds %d records of acc_a, want 1", n)
	}
	// Giving the taken records back restores the sum.
	c = newClient(t, Config{Shards: 1, Store: db})
	if err := c.Merge(recs, t0); err != nil {
		t.Fatal(err)
	}
	if f := observe(t, c, Observation{Customer: "acc_a", DeviceID: "d1", EventID: "a-last", Now: t0}); f.History.Visits != 5 {
		t.Fatalf("merged back: visits %d, want 5", f.History.Visits)
	}
}

func TestMergeRejectsBadCustomer(t *testing.T) {
	c := newClient(t, Config{Shards: 1})
	if err := c.Merge([]storage.HistRecord{&storage.HistAddress{Addr: ip1}}, t0); err == nil {
		t.Fatal("a record without a customer was merged")
	}
}

func TestMergeDeviceOrdersDays(t *testing.T) {
	dst := &storage.HistCustomerDevice{Days: []storage.DayVisits{{Day: 5, N: 1, First: 500}, {Day: 7, N: 2, First: 700}}}
	src := &storage.HistCustomerDevice{Days: []storage.DayVisits{{Day: 6, N: 1, First: 600}, {Day: 7, N: 1, First: 650}, {Day: 8, N: 3, First: 800}}}
	mergeDevice(dst, src)
	want := []storage.DayVisits{{Day: 5, N: 1, First: 500}, {Day: 6, N: 1, First: 600}, {Day: 7, N: 3, First: 650}, {Day: 8, N: 3, First: 800}}
	if !reflect.DeepEqual(dst.Days, want) {
		t.Fatalf("days %+v, want %+v", dst.Days, want)
	}
}

func TestMergeLinksKeepNewest(t *testing.T) {
	var dst, src []storage.SeenAccount
	for i := range maxLinks {
		dst = append(dst, storage.SeenAccount{Hash: storage.AccountHash{byte(i), 1}, Last: int64(i)})
	}
	src = append(src, storage.SeenAccount{Hash: storage.AccountHash{9, 9}, Last: 1e6}, storage.SeenAccount{Hash: storage.AccountHash{3, 1}, Last: 2e6})
	a := &storage.HistAddress{Accounts: dst}
	mergeAddress(a, &storage.HistAddress{Accounts: src})
	if len(a.Accounts) != maxLinks {
		t.Fatalf("%d links, want %d", len(a.Accounts), maxLinks)
	}
	has := func(h storage.AccountHash, last int64) bool {
		return slices.ContainsFunc(a.Accounts, func(l storage.SeenAccount) bool { return l.Hash == h && l.Last == last })
	}
	if !has(storage.AccountHash{9, 9}, 1e6) || !has(storage.AccountHash{3, 1}, 2e6) || has(storage.AccountHash{0, 1}, 0) {
		t.Fatal("the merge did not keep the most recently seen links")
	}
}

// TestTakeUnstoredWithStore: a record changed a moment ago (in memory, not
// yet stored) is taken at its current count, and the store keeps nothing
// of it afterwards.
func TestTakeUnstoredWithStore(t *testing.T) {
	db := openDBWith(t, vfs.NewMem(), time.Hour) // no sync of its own in the test
	c := newClient(t, Config{Shards: 2, Store: db})
	for i := range 4 {
		observe(t, c, Observation{Customer: "acc_a", DeviceID: "d1", EventID: fmt.Sprint(i), Now: t0})
	}
	recs := take(t, c, all, t0)
	if len(recs) != 1 || history(recs[0].(*storage.HistCustomerDevice)).Visits != 4 {
		t.Fatalf("took %v, want the device with 4 visits", normalized(recs))
	}
	if again := take(t, c, all, t0); len(again) != 0 {
		t.Fatalf("taken twice: %v", normalized(again))
	}
	if err := c.barrierAll(time.Second); err != nil {
		t.Fatal(err)
	}
	if err := db.HistOf(nil, func(r storage.HistRef) bool { t.Errorf("left in the store: %+v", r); return true }); err != nil {
		t.Fatal(err)
	}
}

// gatedStore holds every write with changes while hold is set (the store
// is slow to land a take's delete).
type gatedStore struct {
	*storage.DB
	mu   sync.Mutex
	hold chan struct{}
	held chan struct{} // hears once for every write held
}

func (g *gatedStore) WriteHist(ws []*storage.HistWrite) error {
	n := 0
	for _, w := range ws {
		n += w.Len()
	}
	g.mu.Lock()
	h := g.hold
	g.mu.Unlock()
	if n > 0 && h != nil {
		select {
		case g.held <- struct{}{}:
		default:
		}
		<-h
	}
	return g.DB.WriteHist(ws)
}

// TestExpireKeepsTakenEntry: the daily prune reaching a record a take has
// just emptied (its delete not stored yet) must not forget the empty entry:
// an observation meanwhile would reload the stored copy that already left
// for another node, and count its visits twice.
func TestExpireKeepsTakenEntry(t *testing.T) {
	db := openDBWith(t, vfs.NewMem(), time.Hour) // flushes only by barriers here
	g := &gatedStore{DB: db}
	c := newClient(t, Config{Shards: 1, Store: g})
	old, recent := t0, t0.Add(89*24*time.Hour)
	now := t0.Add(91 * 24 * time.Hour) // the visit at old is out of the window
	observe(t, c, Observation{Customer: "acc_a", DeviceID: "d1", EventID: "e1", Now: old})
	observe(t, c, Observation{Customer: "acc_a", DeviceID: "d1", EventID: "e2", Now: recent})
	if err := c.barrierAll(time.Second); err != nil {
		t.Fatal(err)
	}
	refs := expired(t, db, windowStart(now.Unix()))
	if len(refs) != 1 {
		t.Fatalf("expiry refs %+v, want the device's", refs)
	}

	gate := make(chan struct{})
	g.mu.Lock()
	g.hold, g.held = gate, make(chan struct{}, 1)
	g.mu.Unlock()
	// Take returns once its delete is stored: it waits on the gate while
	// the shard, done with the take, goes on.
	taken := make(chan []storage.HistRecord, 1)
	go func() {
		recs, err := c.Take(all, now)
		if err != nil {
			t.Error(err)
		}
		taken <- recs
	}()
	<-g.held // the take's delete is on its way
	// The prune's expiry of the taken record, before the take's delete lands.
	c.shards.Send(actors.HashString("acc_a"), &expire{ref: refs[0], now: now.Unix()})
	if f := observe(t, c, Observation{Customer: "acc_a", DeviceID: "d1", EventID: "e3", Now: now}); f.History.Visits != 1 {
		t.Errorf("after the take and an expiry: %d visits, want 1 (the taken visit counted again)", f.History.Visits)
	}
	close(gate)
	if recs := <-taken; len(recs) != 1 || history(recs[0].(*storage.HistCustomerDevice)).Visits != 1 {
		t.Fatalf("took %v, want the device with its one visit in the window", normalized(recs))
	}
}

// TestMergeKeepsNewestEvents: merging an older record (a leftover of
// visits before the owner's) keeps the owner's recent event ids, so an
// event resubmitted to the owner still counts once.
func TestMergeKeepsNewestEvents(t *testing.T) {
	leftover, owner := newClient(t, Config{Shards: 1}), newClient(t, Config{Shards: 1})
	for i := range 5 {
		observe(t, leftover, Observation{Customer: "acc_a", DeviceID: "d1", EventID: fmt.Sprint("old", i), Now: t0})
	}
	later := t0.Add(time.Hour)
	for i := range maxEvents {
		observe(t, owner, Observation{Customer: "acc_a", DeviceID: "d1", EventID: fmt.Sprint("new", i), Now: later})
	}
	if err := owner.Merge(take(t, leftover, all, later), later); err != nil {
		t.Fatal(err)
	}
	f := observe(t, owner, Observation{Customer: "acc_a", DeviceID: "d1", EventID: "new0", Now: later})
	if !f.Repeated || f.History.Visits != 5+maxEvents {
		t.Fatalf("the owner's event resubmitted after the merge: repeated %v, %d visits, want true and %d", f.Repeated, f.History.Visits, 5+maxEvents)
	}
}
