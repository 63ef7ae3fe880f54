package storage

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// crashUsage opens a store on a crash image of fs (only what was synced) and
// reads the account's month_used.
func crashUsage(t *testing.T, fs *vfs.MemFS, account string, m Month) int64 {
	t.Helper()
	db, err := Open("c", Options{FS: fs.CrashClone(vfs.CrashCloneCfg{})})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c, _, err := db.LoadUsage(account, m)
	if err != nil {
		t.Fatal(err)
	}
	return c.Used
}

// TestDurabilityModes: a strict store has every applied increment in a crash
// image; an interval store has exactly what was applied before its last
// sync, and the next sync covers the rest.
func TestDurabilityModes(t *testing.T) {
	const m = Month(202611)
	one := []UsageDelta{{Account: "a", Month: m, Counts: MonthCounts{Used: 1}}}
	for _, mode := range []Durability{Strict, Interval} {
		t.Run(mode.String(), func(t *testing.T) {
			fs := vfs.NewCrashableMem()
			// An hour: the loop never ticks during the test; Sync stands in for it.
			db, err := Open("c", Options{FS: fs, Durability: mode, SyncInterval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			for range 5 {
				if err := db.ApplyUsage(one); err != nil {
					t.Fatal(err)
				}
			}
			if err := db.Sync(); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if err := db.ApplyUsage(one); err != nil {
					t.Fatal(err)
				}
			}
			if c, _, _ := db.LoadUsage("a", m); c.Used != 8 {
				t.Fatalf("committed month_used %d, want 8 (reads see unsynced commits)", c.Used)
			}
			want := int64(8)
			if mode == Interval {
				want = 5 // the three after the sync are lost
			}
			if got := crashUsage(t, fs, "a", m); got != want {
				t.Fatalf("crash image month_used %d, want %d", got, want)
			}
			if err := db.Sync(); err != nil {
				t.Fatal(err)
			}
			if got := crashUsage(t, fs, "a", m); got != 8 {
				t.Fatalf("after the next sync: crash image month_used %d, want 8", got)
			}
		})
	}
}

// TestSyncLoopBoundsLoss: without any explicit Sync, the loop makes a commit
// durable.
func TestSyncLoopBoundsLoss(t *testing.T) {
	fs := vfs.NewCrashableMem()
	db, err := Open("c", Options{FS: fs, SyncInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const m = Month(202611)
	if err := db.ApplyUsage([]UsageDelta{{Account: "a", Month: m, Counts: MonthCounts{Used: 7}}}); err != nil {
		t.Fatal(err)
	}
	// No explicit Sync: the loop's own tick makes it durable (polled, so a
	// busy machine only makes this slower, never flaky).
	for deadline := time.Now().Add(10 * time.Second); crashUsage(t, fs, "a", m) != 7; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the sync loop did not make the commit durable")
		}
	}
}

// TestOnSyncHookCovered: what a hook writes is covered by the sync that
// follows it, and a removed hook no longer runs.
func TestOnSyncHookCovered(t *testing.T) {
	fs := vfs.NewCrashableMem()
	db, err := Open("c", Options{FS: fs, SyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const m = Month(202611)
	var runs atomic.Int32
	remove := db.OnSync(func() {
		runs.Add(1)
		b := db.newBatch()
		_ = b.Set(usageKey(nil, "h", m), MarshalMonthCounts(nil, MonthCounts{Used: 3}), nil)
		if err := db.commitBehind(b); err != nil {
			t.Error(err)
		}
	})
	if err := db.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := crashUsage(t, fs, "h", m); got != 3 || runs.Load() != 1 {
		t.Fatalf("crash image month_used %d after %d hook runs, want 3 after 1", got, runs.Load())
	}
	remove()
	if err := db.Sync(); err != nil {
		t.Fatal(err)
	}
	if runs.Load() != 1 {
		t.Fatalf("removed hook ran: %d runs", runs.Load())
	}
}

// TestLateSyncCaughtUp: when the loop's sync is held up (here, by a hook
// that blocks), a usage commit older than maxLag intervals makes the next
// ApplyUsage sync before it returns, so the unsynced window stays bounded.
func TestLateSyncCaughtUp(t *testing.T) {
	fs := vfs.NewCrashableMem()
	const every = 5 * time.Millisecond
	db, err := Open("c", Options{FS: fs, SyncInterval: every})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	remove := db.OnSync(func() {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-release
	})
	<-entered // the loop is stuck in its hook: no group sync from now on
	const m = Month(202611)
	one := []UsageDelta{{Account: "a", Month: m, Counts: MonthCounts{Used: 1}}}
	if err := db.ApplyUsage(one); err != nil {
		t.Fatal(err)
	}
	// (Unless this very commit took longer than maxLag intervals on a busy
	// machine, it was answered ahead of any sync.)
	if got, late := crashUsage(t, fs, "a", m), db.WriteStats().LateSyncs; late == 0 && got != 0 {
		t.Fatalf("the crash image has %d with the loop stuck and no late sync", got)
	}
	time.Sleep(3 * maxLag * every)
	if err := db.ApplyUsage(one); err != nil {
		t.Fatal(err)
	}
	if got, late := crashUsage(t, fs, "a", m), db.WriteStats().LateSyncs; got != 2 || late == 0 {
		t.Fatalf("crash image month_used %d after %d late syncs; want 2 after at least 1", got, late)
	}
	remove()
	close(release)
}

// TestAnswerAhead: increments may be answered ahead of their commit only in
// Interval mode, and not while the group sync or a usage commit under way
// is more than maxLag intervals late, nor on a broken store.
func TestAnswerAhead(t *testing.T) {
	strict, err := Open("s", Options{FS: vfs.NewMem(), Durability: Strict})
	if err != nil {
		t.Fatal(err)
	}
	defer strict.Close()
	if strict.AnswerAhead() {
		t.Fatal("strict mode answers ahead")
	}

	const every = time.Hour // the loop never syncs during the test
	db, err := Open("i", Options{FS: vfs.NewMem(), SyncInterval: every})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if !db.AnswerAhead() {
		t.Fatal("a fresh interval store does not answer ahead")
	}
	const m = Month(202611)
	if err := db.ApplyUsage([]UsageDelta{{Account: "a", Month: m, Counts: MonthCounts{Used: 1}}}); err != nil {
		t.Fatal(err)
	}
	if !db.AnswerAhead() {
		t.Fatal("a commit within the interval stops answering ahead")
	}
	late := db.clock() - int64((maxLag+1)*every)
	// The group sync is late: the oldest unsynced commit is too old.
	db.dirtySince.Store(late)
	if db.AnswerAhead() {
		t.Fatal("answers ahead with the group sync late")
	}
	if err := db.Sync(); err != nil {
		t.Fatal(err)
	}
	if !db.AnswerAhead() {
		t.Fatal("does not answer ahead once the sync caught up")
	}
	// A write answered ahead of its commit starts the lag clock as an
	// unsynced commit does.
	db.AnsweredAhead()
	if db.dirtySince.Load() == 0 {
		t.Fatal("a write answered ahead left the store clean")
	}
	if err := db.Sync(); err != nil {
		t.Fatal(err)
	}
	// A usage commit that hangs.
	db.usageSince.Store(late)
	if db.AnswerAhead() {
		t.Fatal("answers ahead with a usage commit hanging")
	}
	db.usageSince.Store(db.clock())
	if !db.AnswerAhead() {
		t.Fatal("a usage commit under way for less than the lag stops answering ahead")
	}
	db.usageSince.Store(0)
	// A broken store.
	h := db.h.Load()
	h.broken.Store(true)
	if db.AnswerAhead() {
		t.Fatal("a broken store answers ahead")
	}
	h.broken.Store(false)
}
