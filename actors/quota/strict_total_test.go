package quota

import (
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/storage"
)

// slowStore is a store whose usage commits take a while, as a busy disk's
// do: what nobody waits for is not in a crash image taken at once.
type slowStore struct{ *storage.DB }

func (s slowStore) ApplyUsage(d []storage.UsageDelta) error {
	time.Sleep(50 * time.Millisecond)
	return s.DB.ApplyUsage(d)
}

// TestCountTotalStrictIsSyncedWhenItReturns: in Strict mode CountTotal (a
// degraded evaluation's total_evaluations, counted before its answer)
// returns only once the increment is synced, so a crash right after the
// answer keeps it. Fire-and-forget, it was lost to a kill -9 right after
// the answer: README Durability promises Strict loses nothing acknowledged,
// for billing from total_evaluations too.
func TestCountTotalStrictIsSyncedWhenItReturns(t *testing.T) {
	fs := vfs.NewCrashableMem()
	db, err := storage.Open("q", storage.Options{FS: fs, Durability: storage.Strict, SyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c := New(quietSystem().Root, Config{Shards: 2, Store: slowStore{db}})
	defer c.Stop()
	for range 3 {
		c.CountTotal("acct", t0)
	}
	if _, total := crashedUsage(t, fs.CrashClone(vfs.CrashCloneCfg{})); total != 3 {
		t.Fatalf("crash image right after three CountTotal calls returned: total_evaluations %d, want 3", total)
	}
}
