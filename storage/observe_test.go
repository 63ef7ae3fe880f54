package storage

import (
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestStoreStatsCountSyncs(t *testing.T) {
	db, err := Open("d", Options{FS: vfs.NewMem(), Durability: Strict})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	n0 := db.StoreStats().Syncs.Count
	if err := db.Probe(); err != nil { // a synced write…
		t.Fatal(err)
	}
	if err := db.PutDelivery(&Delivery{Account: "acc_1", EventID: "e1", Event: "test", Attempt: 1, At: time.Unix(1e9, 0)}); err != nil {
		t.Fatal(err)
	}
	db.markDirty()
	if err := db.Sync(); err != nil { // …and a group sync
		t.Fatal(err)
	}
	st := db.StoreStats()
	if st.Syncs.Count < n0+2 || st.Syncs.Sum <= 0 {
		t.Fatalf("syncs %d (before %d), %v s", st.Syncs.Count, n0, st.Syncs.Sum)
	}
	if len(st.Syncs.Buckets) != len(SyncBounds) {
		t.Fatalf("%d buckets, want one per bound %v: %v", len(st.Syncs.Buckets), SyncBounds, st.Syncs.Buckets)
	}
	last := uint64(0)
	for _, b := range SyncBounds {
		c, ok := st.Syncs.Buckets[b]
		if !ok || c < last || c > st.Syncs.Count {
			t.Fatalf("bucket %v: %d (present %v) not cumulative (prev %d, count %d)", b, c, ok, last, st.Syncs.Count)
		}
		last = c
	}
	if st.MemTableBytes == 0 {
		t.Fatalf("store stats %+v", st)
	}
}

func TestSyncBoundsAscendAndSpanTheDisk(t *testing.T) {
	if len(SyncBounds) < 10 {
		t.Fatalf("bounds %v", SyncBounds)
	}
	for i := 1; i < len(SyncBounds); i++ {
		if SyncBounds[i] <= SyncBounds[i-1] {
			t.Fatalf("bounds not ascending: %v", SyncBounds)
		}
	}
	if SyncBounds[0] != 0.0001 || SyncBounds[len(SyncBounds)-1] < 5 {
		t.Fatalf("bounds %v: want 100 µs up to seconds", SyncBounds)
	}
}
