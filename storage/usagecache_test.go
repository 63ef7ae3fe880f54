package storage

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// The usage cache adds to what was committed: repeated applies sum exactly
// as reads from the store would, a failed commit leaves the cache empty, and
// a reopened instance starts from what the store holds.
func TestUsageCacheFollowsCommits(t *testing.T) {
	var full atomic.Bool
	// Strict: the failing commit is the one that reports the full disk.
	db, err := Open("d", Options{FS: errorfs.Wrap(vfs.NewMem(), diskFull(&full)), CloseWait: 500 * time.Millisecond, Durability: Strict})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	day := Day(20000)
	one := []UsageDelta{{Account: "a", Month: 202611, Day: day, Counts: MonthCounts{Used: 1, Lookups: 2}, Totals: Totals{Evaluations: 1}}}
	for range 5 {
		if err := db.ApplyUsage(one); err != nil {
			t.Fatal(err)
		}
	}
	want := func(used, lookups, evals int64) {
		t.Helper()
		c, tot, err := db.LoadUsage("a", 202611)
		days, derr := db.DailyUsage("a", day, day)
		if err != nil || derr != nil || c.Used != used || c.Lookups != lookups || tot.Evaluations != evals ||
			len(days) != 1 || days[0].Used != used || days[0].Lookups != lookups {
			t.Fatalf("stored %+v %+v %+v (%v %v), want used %d lookups %d evaluations %d", c, tot, days, err, derr, used, lookups, evals)
		}
	}
	want(5, 10, 5)
	db.usage.mu.Lock()
	cached := len(db.usage.months) + len(db.usage.totals) + len(db.usage.days)
	db.usage.mu.Unlock()
	if cached != 3 {
		t.Fatalf("%d records cached, want 3 (month, totals, day)", cached)
	}

	// A commit that fails leaves nothing cached.
	full.Store(true)
	if err := db.ApplyUsage(one); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("apply on a full disk: %v", err)
	}
	db.usage.mu.Lock()
	if db.usage.months != nil || db.usage.h != nil {
		t.Fatal("the cache survived a failed commit")
	}
	db.usage.mu.Unlock()
	full.Store(false)
	if err := db.Probe(); err != nil {
		t.Fatalf("probe after the disk came back: %v", err)
	}
	// The reopened instance reads the store again, then caches on.
	stored, _, err := db.LoadUsage("a", 202611)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := db.ApplyUsage(one); err != nil {
			t.Fatal(err)
		}
	}
	want(stored.Used+3, stored.Lookups+6, stored.Used+3)
	db.usage.mu.Lock()
	h := db.usage.h
	db.usage.mu.Unlock()
	if h != db.h.Load() {
		t.Fatal("the cache is not tied to the current instance")
	}
}
