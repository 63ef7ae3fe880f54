package devicehist

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/storage"
)

// stallingLoads holds the first read of device dev once armed until gate
// closes: a shard stuck on a slow disk.
type stallingLoads struct {
	*storage.DB
	dev     string
	armed   atomic.Bool
	entered chan struct{}
	gate    chan struct{}
}

func (s *stallingLoads) LoadHist(r storage.HistRecord) (storage.HistStored, bool, error) {
	if cd, ok := r.(*storage.HistCustomerDevice); ok && cd.Device == s.dev && s.armed.CompareAndSwap(true, false) {
		close(s.entered)
		<-s.gate
	}
	return s.DB.LoadHist(r)
}

// shortTakeWait sets takeWait to d for the test.
func shortTakeWait(t *testing.T, d time.Duration) {
	old := takeWait.Load()
	takeWait.Store(int64(d))
	t.Cleanup(func() { takeWait.Store(old) })
}

// TestTakeTimedOutGivesBack: a Take whose shard is stuck past takeWait
// hands out nothing, and what that shard takes when it gets to the take
// goes back into this node's history, for the next move. Before, the late
// shard took and deleted the records, and nobody had them.
func TestTakeTimedOutGivesBack(t *testing.T) {
	shortTakeWait(t, 300*time.Millisecond)
	db := openDBWith(t, vfs.NewMem(), time.Hour)
	defer db.Close()
	st := &stallingLoads{DB: db, dev: "stall", entered: make(chan struct{}), gate: make(chan struct{})}
	c := newClient(t, Config{Shards: 1, Store: st, Timeout: 100 * time.Millisecond})
	observe(t, c, Observation{Customer: "acc_x", DeviceID: "d1", EventID: "e1", Now: t0})
	st.armed.Store(true)
	var once atomic.Bool
	match := func(cust string) bool {
		if once.CompareAndSwap(false, true) {
			// After the barrier, before the take reaches the shard: an
			// evaluation's read stalls it.
			go c.Observe(Observation{Customer: "acc_y", DeviceID: "stall", EventID: "e2", Now: t0})
			<-st.entered
		}
		return cust == "acc_x"
	}
	recs, err := c.Take(match, t0)
	if err == nil || len(recs) != 0 {
		t.Fatalf("a take past its wait: %d records, %v; want none and the timeout", len(recs), err)
	}
	close(st.gate)
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, err := c.Devices("acc_x", 10, t0)
		if err == nil && len(v) == 1 && v[0].Visits == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("d1 after the late take: %+v %v; want it back with its visit", v, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// failingOne fails every read of device dev while fail is set.
type failingOne struct {
	*stallingLoads
	dev  string
	fail atomic.Bool
}

func (f *failingOne) LoadHist(r storage.HistRecord) (storage.HistStored, bool, error) {
	if cd, ok := r.(*storage.HistCustomerDevice); ok && cd.Device == f.dev && f.fail.Load() {
		return storage.HistStored{}, false, errors.New("injected read failure")
	}
	return f.stallingLoads.LoadHist(r)
}

// TestLateMergeFailureLogged: a merge whose shard answers after takeWait
// counts as merged (the caller must not send it again: it may yet merge);
// should it then fail, the loss is said in the log. Before, the failure
// went to a channel nobody read.
func TestLateMergeFailureLogged(t *testing.T) {
	shortTakeWait(t, 300*time.Millisecond)
	db := openDBWith(t, vfs.NewMem(), time.Hour)
	defer db.Close()
	st := &failingOne{stallingLoads: &stallingLoads{DB: db, dev: "stall", entered: make(chan struct{}), gate: make(chan struct{})}, dev: "slow"}
	var mu sync.Mutex
	var logged bytes.Buffer
	c := newClient(t, Config{Shards: 1, Store: st, Timeout: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logged}, nil))})
	st.armed.Store(true)
	go c.Observe(Observation{Customer: "acc_y", DeviceID: "stall", EventID: "e2", Now: t0})
	<-st.entered
	st.fail.Store(true)
	rec := &storage.HistCustomerDevice{Customer: "acc_x", Device: "slow", LastSeen: t0.Unix(),
		Days: []storage.DayVisits{{Day: storage.Day(t0.Unix() / 86400), N: 4, First: t0.Unix()}}}
	merged, err := c.MergeParts([]storage.HistRecord{rec}, t0)
	if err == nil || len(merged) != 1 || !merged[0] {
		t.Fatalf("a merge past its wait: %v %v; want counted as merged, with the timeout", merged, err)
	}
	close(st.gate)
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		ok := strings.Contains(logged.String(), "its records are lost")
		mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log of the late merge's failure: %s", logged.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
