package devicehist

import (
	"errors"
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
