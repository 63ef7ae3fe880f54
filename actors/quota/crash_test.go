package quota

import (
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/storage"
)

// poisonStore panics when the shard loads the poison account: a stand-in for
// any bug that panics in a shard's handler.
type poisonStore struct{ Store }

func (p poisonStore) LoadUsage(a string, m storage.Month) (storage.MonthCounts, storage.Totals, error) {
	if a == "poison" {
		panic("injected panic loading " + a)
	}
	return p.Store.LoadUsage(a, m)
}

// TestShardCrashReloadsFromStore: a quota shard that panics restarts with its
// accounts loaded from the store again (not from memory the panic may have
// left half-changed); one that keeps panicking is stopped by its supervisor,
// reported down — its calls fail at once with an error the edge answers 503
// — and comes back by itself.
func TestShardCrashReloadsFromStore(t *testing.T) {
	db := openMem(t, vfs.NewMem())
	defer db.Close()
	sys := quietSystem()
	sup := actors.SupervisionOf(sys)
	sup.SetRestartDelays(300*time.Millisecond, time.Second)
	c := New(sys.Root, Config{Shards: 1, Store: poisonStore{db}, Timeout: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	defer c.Stop()
	l := custom(100, 1000)
	ch := Charge{Account: "a", Limits: l, Hourly: true, Monthly: true, Total: true, Now: t0}
	for i := 0; i < 3; i++ {
		if r, err := c.Charge(ch); err != nil || !r.Allowed {
			t.Fatalf("charge %d: %+v %v", i, r, err)
		}
	}
	// Behind the shard's back, the store moves on (as another process's
	// writes, or a repair, would); memory still says 3.
	if err := db.ApplyUsage([]storage.UsageDelta{{Account: "a", Month: storage.MonthOf(t0), Counts: storage.MonthCounts{Used: 10}}}); err != nil {
		t.Fatal(err)
	}
	if u, _ := c.Usage(Usage{Account: "a", Limits: l, Now: t0}); u.MonthUsed != 3 {
		t.Fatalf("before the crash: %d", u.MonthUsed)
	}
	if _, err := c.Charge(Charge{Account: "poison", Limits: l, Hourly: true, Now: t0}); !errors.Is(err, actors.ErrTimeout) {
		t.Fatalf("the panicking call: %v", err)
	}
	u, err := c.Usage(Usage{Account: "a", Limits: l, Now: t0})
	if err != nil || u.MonthUsed != 13 || u.TotalEvaluations != 3 {
		t.Fatalf("after the restart: month %d total %d %v; want the store's 13 and 3", u.MonthUsed, u.TotalEvaluations, err)
	}

	// A crash loop: protoactor stops the shard at the 11th panic in 10 s.
	var wg sync.WaitGroup
	for i := 0; i < 11; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Charge(Charge{Account: "poison", Limits: l, Hourly: true, Now: t0})
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for len(sup.Down()) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if d := sup.Down(); len(d) != 1 || d[0] != "quota" {
		t.Fatalf("down: %v", d)
	}
	start := time.Now()
	if _, err := c.Charge(ch); !errors.Is(err, actors.ErrShardDown) || !errors.Is(err, actors.ErrUnavailable) || time.Since(start) > 100*time.Millisecond {
		t.Fatalf("charge while down: %v after %s", err, time.Since(start))
	}
	for len(sup.Down()) > 0 && time.Now().Before(deadline.Add(5*time.Second)) {
		time.Sleep(5 * time.Millisecond)
	}
	if r, err := c.Charge(ch); err != nil || !r.Allowed {
		t.Fatalf("after the restart: %+v %v", r, err)
	}
	if u, err := c.Usage(Usage{Account: "a", Limits: l, Now: t0}); err != nil || u.MonthUsed != 14 || u.TotalEvaluations != 4 {
		t.Fatalf("after the restart: month %d total %d %v", u.MonthUsed, u.TotalEvaluations, err)
	}
}
