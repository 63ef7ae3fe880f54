package devicehist

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/storage"
)

// failingStore refuses history writes while fail is set.
type failingStore struct {
	*storage.DB
	fail atomic.Bool
}

func (f *failingStore) WriteHist(ws []*storage.HistWrite) error {
	if f.fail.Load() {
		return errors.New("injected write failure")
	}
	return f.DB.WriteHist(ws)
}

// TestUnstoredEntriesStayInMemory: records whose write failed are the only
// copy of what was observed, so the shards keep serving them and do not
// evict them as idle, even once a later write of the shard is stored: a
// reload would read the older stored copy and lose the observations.
func TestUnstoredEntriesStayInMemory(t *testing.T) {
	db := openDBWith(t, vfs.NewMem(), time.Hour)
	defer db.Close()
	st := &failingStore{DB: db}
	c := newClient(t, Config{Shards: 1, Store: st, IdleAfter: time.Minute})

	// Stored once, so that a reload finds an older copy.
	observe(t, c, Observation{Customer: "acc_1", DeviceID: "d1", EventID: "e1", AccountID: "u1", Now: t0})
	c.flush()
	st.fail.Store(true)
	observe(t, c, Observation{Customer: "acc_1", DeviceID: "d1", EventID: "e2", AccountID: "u1", Now: t0.Add(time.Second)})
	c.flush() // the write fails
	st.fail.Store(false)
	// A later write of the same shard is stored.
	observe(t, c, Observation{Customer: "acc_1", DeviceID: "d2", EventID: "e3", Now: t0.Add(2 * time.Second)})
	c.flush()

	c.Sweep(t0.Add(time.Hour))
	f := observe(t, c, Observation{Customer: "acc_1", DeviceID: "d1", EventID: "e4", AccountID: "u1", Now: t0.Add(time.Hour)})
	if f.History.Visits != 3 {
		t.Fatalf("visits of a device whose last write failed, after a sweep: %d; want 3 (the unstored one evicted and lost)", f.History.Visits)
	}
}

// TestFailedWriteLeavesNoStrayKeys: a write the store refused leaves the
// store as it was, so the next write of the same records must replace what
// the store holds, not what the refused write would have left: the store
// ends with the keys a run without the failure has, and everything expires
// after 90 days (a record first written by a refused write was rewritten
// without its expiry-index entry, and a stored one left its old recent-list
// entry behind for good).
func TestFailedWriteLeavesNoStrayKeys(t *testing.T) {
	run := func(fail bool) (*storage.DB, *Client) {
		db := openDBWith(t, vfs.NewMem(), time.Hour)
		t.Cleanup(func() { _ = db.Close() })
		st := &failingStore{DB: db}
		c := newClient(t, Config{Shards: 1, Store: st})
		step := func(i int, refuse bool) {
			st.fail.Store(fail && refuse)
			observe(t, c, Observation{Customer: "acc_1", DeviceID: "d1", EventID: fmt.Sprint("e", i), AccountID: "u1", IP: ip1,
				Now: t0.Add(time.Duration(i) * time.Second)})
			c.flush()
		}
		step(1, true) // first write refused: nothing stored
		step(2, false)
		step(3, true) // a stored record's rewrite refused
		step(4, false)
		st.fail.Store(false)
		return db, c
	}
	keys := func(db *storage.DB) [3]int {
		r, e, n, err := db.HistKeys()
		if err != nil {
			t.Fatal(err)
		}
		return [3]int{r, e, n}
	}
	want, _ := run(false)
	got, c := run(true)
	if g, w := keys(got), keys(want); g != w {
		t.Fatalf("keys (records, expiry, recent) after refused writes: %v; a store without the failures holds %v", g, w)
	}
	if err := c.Prune(t0.Add(92 * 24 * time.Hour)); err != nil {
		t.Fatal(err)
	}
	if g := keys(got); g != [3]int{} {
		t.Fatalf("keys (records, expiry, recent) left 92 days later: %v", g)
	}
}

// panickyStore is a failingStore whose loads of device "boom" panic.
type panickyStore struct{ *failingStore }

func (p panickyStore) LoadHist(r storage.HistRecord) (storage.HistStored, bool, error) {
	if d, ok := r.(*storage.HistCustomerDevice); ok && d.Device == "boom" {
		panic("injected panic")
	}
	return p.failingStore.LoadHist(r)
}

// TestRestartKeepsUnstoredEntries: a panic restart drops the shard's
// entries to reload them from the store, but not the ones whose write
// failed: the store holds an older copy of them, and the process goes on.
func TestRestartKeepsUnstoredEntries(t *testing.T) {
	db := openDBWith(t, vfs.NewMem(), time.Hour)
	defer db.Close()
	st := &failingStore{DB: db}
	c := newClient(t, Config{Shards: 1, Store: panickyStore{st}, Timeout: 300 * time.Millisecond})

	observe(t, c, Observation{Customer: "acc_1", DeviceID: "d1", EventID: "e1", Now: t0})
	c.flush()
	st.fail.Store(true)
	observe(t, c, Observation{Customer: "acc_1", DeviceID: "d1", EventID: "e2", Now: t0.Add(time.Second)})
	c.flush() // the write fails
	st.fail.Store(false)
	if _, err := c.Observe(Observation{Customer: "acc_1", DeviceID: "boom", EventID: "e3", Now: t0.Add(2 * time.Second)}); err == nil {
		t.Fatal("an observation whose load panicked answered")
	}
	var f Facts
	var err error
	for range 50 { // until the shard is back
		if f, err = c.Observe(Observation{Customer: "acc_1", DeviceID: "d1", EventID: "e4", Now: t0.Add(3 * time.Second)}); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	if f.History.Visits != 3 {
		t.Fatalf("visits of a device whose last write failed, after a panic restart: %d; want 3", f.History.Visits)
	}
}
