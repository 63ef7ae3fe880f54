package quota

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/storage"
)

type flakyStore struct {
	Store
	failApply, failLoad atomic.Bool
}

var errDisk = errors.New("disk on fire")

func (f *flakyStore) ApplyUsage(d []storage.UsageDelta) error {
	if f.failApply.Load() {
		return errDisk
	}
	return f.Store.ApplyUsage(d)
}

func (f *flakyStore) LoadUsage(a string, m storage.Month) (storage.MonthCounts, storage.Totals, error) {
	if f.failLoad.Load() {
		return storage.MonthCounts{}, storage.Totals{}, errDisk
	}
	return f.Store.LoadUsage(a, m)
}

// stored waits until every increment c has queued is committed: with a
// *storage.DB (an AheadStore) an allowed charge is answered ahead of its
// commit, and an account with increments in flight is never evicted.
func stored(t testing.TB, c *Client) {
	t.Helper()
	if err := c.commit.Barrier(5 * time.Second); err != nil {
		t.Fatal(err)
	}
}

func openMem(t testing.TB, fs vfs.FS) *storage.DB {
	t.Helper()
	db, err := storage.Open("q", storage.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func TestQuotaStoreFailureChargesNothing(t *testing.T) {
	db := openMem(t, vfs.NewMem())
	defer db.Close()
	fl := &flakyStore{Store: db}
	c := New(quietSystem().Root, Config{Shards: 2, Store: fl})
	defer c.Stop()
	l := custom(10, 100)
	ch := Charge{Account: "a", Limits: l, Hourly: true, Monthly: true, Total: true, Now: t0}
	if r, err := c.Charge(ch); err != nil || !r.Allowed {
		t.Fatalf("first: %+v %v", r, err)
	}
	fl.failApply.Store(true)
	if _, err := c.Charge(ch); !errors.Is(err, ErrUnavailable) || !errors.Is(err, errDisk) {
		t.Fatalf("failed commit: %v", err)
	}
	u, err := c.Usage(Usage{Account: "a", Limits: l, Now: t0})
	if err != nil || u.MonthUsed != 1 || u.TotalEvaluations != 1 || u.UsedThisHour != 1 {
		t.Fatalf("after failure: %+v %v", u, err)
	}
	fl.failApply.Store(false)
	if r, err := c.Charge(ch); err != nil || r.Remaining != 8 {
		t.Fatalf("after recovery: %+v %v", r, err)
	}
	fl.failLoad.Store(true)
	if _, err := c.Charge(Charge{Account: "new", Limits: l, Hourly: true, Now: t0}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("failed load: %v", err)
	}
	if _, err := c.Usage(Usage{Account: "new", Limits: l, Now: t0}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("failed load usage: %v", err)
	}
	if c, tot, _ := db.LoadUsage("a", storage.MonthOf(t0)); c.Used != 2 || tot.Evaluations != 2 {
		t.Fatalf("stored: %+v %+v", c, tot)
	}
}

func TestQuotaCountTotalAndStop(t *testing.T) {
	fs := vfs.NewMem()
	db := openMem(t, fs)
	c := New(quietSystem().Root, Config{Shards: 4, Store: db})
	l := custom(-1, -1)
	for i := 0; i < 5; i++ {
		c.CountTotal("a", t0)
	}
	// A refusal's limit hit is not waited for; Stop must still flush it.
	if r, err := c.Charge(Charge{Account: "b", Limits: custom(0, -1), Hourly: true, Now: t0}); err != nil || r.Refusal != RefusedHourly {
		t.Fatalf("refusal: %+v %v", r, err)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Charge(Charge{Account: "a", Limits: l, Now: t0}); !errors.Is(err, ErrStopped) {
		t.Fatalf("after stop: %v", err)
	}
	db.Close()
	db = openMem(t, fs)
	defer db.Close()
	if _, tot, _ := db.LoadUsage("a", storage.MonthOf(t0)); tot.Evaluations != 5 {
		t.Fatalf("totals %+v", tot)
	}
	if _, tot, _ := db.LoadUsage("b", storage.MonthOf(t0)); tot.LimitHits != 1 {
		t.Fatalf("limit hits %+v", tot)
	}
}

// TestQuotaExactlyLimitAdmitted: 256 clients race on one account; exactly
// the limit gets through, hourly (memory) and monthly (durable).
func TestQuotaExactlyLimitAdmitted(t *testing.T) {
	const clients, each, limit = 256, 8, 1000
	for _, tc := range []struct {
		name    string
		limits  Limits
		monthly bool
	}{
		{"hourly", custom(limit, -1), false},
		{"monthly-durable", custom(-1, limit), true},
		{"lookups-durable", custom(-1, limit/LookupFactor), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewMem()
			db := openMem(t, fs)
			c := New(quietSystem().Root, Config{Shards: 8, Store: db})
			kind := Evaluate
			if tc.name == "lookups-durable" {
				kind = Lookup
			}
			var admitted, refused atomic.Int64
			var wg sync.WaitGroup
			for g := 0; g < clients; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < each; i++ {
						r, err := c.Charge(Charge{Account: "hot", Kind: kind, Limits: tc.limits, Hourly: true, Monthly: tc.monthly, Total: true, Now: t0})
						if err != nil {
							t.Error(err)
							return
						}
						if r.Allowed {
							admitted.Add(1)
						} else {
							refused.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			if admitted.Load() != limit || refused.Load() != clients*each-limit {
				t.Fatalf("admitted %d refused %d, want %d and %d", admitted.Load(), refused.Load(), limit, clients*each-limit)
			}
			if err := c.Stop(); err != nil {
				t.Fatal(err)
			}
			db.Close()
			db = openMem(t, fs)
			defer db.Close()
			mc, tot, err := db.LoadUsage("hot", storage.MonthOf(t0))
			if err != nil {
				t.Fatal(err)
			}
			if tot.Evaluations != limit || tot.LimitHits != clients*each-limit {
				t.Fatalf("stored totals %+v", tot)
			}
			if tc.monthly && mc.Used+mc.Lookups != limit {
				t.Fatalf("stored month %+v", mc)
			}
		})
	}
}

// chargeLoad runs clients charging one account until stop, counting the
// acknowledged charges.
func chargeLoad(t *testing.T, c *Client, clients int, acked *atomic.Int64, stop *atomic.Bool) *sync.WaitGroup {
	var wg sync.WaitGroup
	l := custom(-1, -1)
	for g := 0; g < clients; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				res, err := c.Charge(Charge{Account: "acct", Limits: l, Hourly: true, Monthly: true, Total: true, Now: t0})
				if err != nil || !res.Allowed {
					t.Errorf("charge: %+v %v", res, err)
					return
				}
				acked.Add(1)
			}
		}()
	}
	return &wg
}

// crashedUsage reads the account's month_used and total from a crash image.
func crashedUsage(t *testing.T, crashed vfs.FS) (int64, int64) {
	t.Helper()
	db := openMem(t, crashed)
	defer db.Close()
	mc, tot, err := db.LoadUsage("acct", storage.MonthOf(t0))
	if err != nil {
		t.Fatal(err)
	}
	return mc.Used, tot.Evaluations
}

// TestQuotaCrashStrictLosesNothing takes a crash image of a strict store
// (only what was synced survives) while clients charge, and checks that
// every charge acknowledged before the image is in it.
func TestQuotaCrashStrictLosesNothing(t *testing.T) {
	rounds := 5
	if testing.Short() {
		rounds = 2
	}
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	for r := 0; r < rounds; r++ {
		fs := vfs.NewCrashableMem()
		db, err := storage.Open("q", storage.Options{FS: fs, Durability: storage.Strict})
		if err != nil {
			t.Fatal(err)
		}
		c := New(quietSystem().Root, Config{Shards: 4, Store: db})
		const clients = 64
		var acked atomic.Int64
		var stop atomic.Bool
		wg := chargeLoad(t, c, clients, &acked, &stop)
		time.Sleep(time.Duration(5+rng.IntN(30)) * time.Millisecond)
		before := acked.Load()
		crashed := fs.CrashClone(vfs.CrashCloneCfg{})
		after := acked.Load()
		stop.Store(true)
		wg.Wait()
		c.Stop()
		db.Close()
		used, total := crashedUsage(t, crashed)
		if used < before || used > after+clients || total != used {
			t.Fatalf("seed %d round %d: crash image has month_used %d totals %d; acknowledged %d before the crash, %d after",
				seed, r, used, total, before, after)
		}
		t.Logf("round %d: acknowledged %d before crash, %d stored", r, before, used)
	}
}

// TestQuotaCrashIntervalLosesOnlyAfterSync: in interval mode a crash image
// keeps every charge acknowledged before the last group sync began; what is
// lost was committed after it. The loop's ticks are pushed out of the way
// (an hour) and the test runs the sync itself, at a random moment under
// load. (storage's TestDurabilityModes pins the exact loss without load.)
func TestQuotaCrashIntervalLosesOnlyAfterSync(t *testing.T) {
	rounds := 5
	if testing.Short() {
		rounds = 2
	}
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 2))
	for r := 0; r < rounds; r++ {
		fs := vfs.NewCrashableMem()
		db, err := storage.Open("q", storage.Options{FS: fs, SyncInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		c := New(quietSystem().Root, Config{Shards: 4, Store: db})
		const clients = 64
		var acked atomic.Int64
		var stop atomic.Bool
		wg := chargeLoad(t, c, clients, &acked, &stop)
		time.Sleep(time.Duration(5+rng.IntN(30)) * time.Millisecond)
		syncFrom := acked.Load() // acknowledged, so committed, before the sync began
		if err := db.Sync(); err != nil {
			t.Fatal(err)
		}
		syncTo := acked.Load()
		time.Sleep(time.Duration(2+rng.IntN(10)) * time.Millisecond)
		before := acked.Load()
		crashed := fs.CrashClone(vfs.CrashCloneCfg{})
		after := acked.Load()
		stop.Store(true)
		wg.Wait()
		c.Stop()
		db.Close()
		used, total := crashedUsage(t, crashed)
		// Kept: everything acknowledged before the sync began. Never more
		// than was acknowledged, plus the charges in flight. (Pebble may sync
		// on its own in between, when a memtable fills and its WAL rotates,
		// so the loss can be smaller than everything after the sync.)
		if used < syncFrom || used > after+clients || total != used {
			t.Fatalf("seed %d round %d: crash image has month_used %d totals %d; acknowledged %d when the sync began, %d at the crash",
				seed, r, used, total, syncFrom, after)
		}
		t.Logf("round %d: acknowledged %d when the sync began, %d when it ended, %d at the crash; %d stored, %d lost",
			r, syncFrom, syncTo, before, used, max(before-used, 0))
	}
}

func TestQuotaEvictionReloads(t *testing.T) {
	db := openMem(t, vfs.NewMem())
	defer db.Close()
	c := New(quietSystem().Root, Config{Shards: 1, Store: db, IdleAfter: time.Hour})
	defer c.Stop()
	l := custom(5, 50)
	for i := 0; i < 3; i++ {
		if _, err := c.Charge(Charge{Account: "a", Limits: l, Hourly: true, Monthly: true, Total: true, Now: t0}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Charge(Charge{Account: "b", Limits: l, Hourly: true, Now: t0.Add(80 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	c.Sweep(t0.Add(59 * time.Minute)) // window still running: nothing goes
	if n := c.resident(); n != 2 {
		t.Fatalf("resident %d, want 2", n)
	}
	later := t0.Add(90 * time.Minute)
	stored(t, c)
	c.Sweep(later) // a is idle; b was touched 10 minutes ago
	if n := c.resident(); n != 1 {
		t.Fatalf("resident after sweep %d, want 1", n)
	}
	u, err := c.Usage(Usage{Account: "a", Limits: l, Now: later})
	if err != nil || u.MonthUsed != 3 || u.TotalEvaluations != 3 || u.UsedThisHour != 0 {
		t.Fatalf("after eviction: %+v %v", u, err)
	}
}

// TestQuotaDropStoresThenForgets: Drop forgets only the accounts it selects,
// and when it returns every charge answered before it is in the store, so
// a reader of the store (a cluster's next owner of the shard) sees them all
// and a later touch here loads the stored count, not a stale one.
func TestQuotaDropStoresThenForgets(t *testing.T) {
	db := openMem(t, vfs.NewMem())
	defer db.Close()
	c := New(quietSystem().Root, Config{Shards: 2, Store: db})
	defer c.Stop()
	l := custom(1000, 10000)
	var wg sync.WaitGroup
	for _, acc := range []string{"a", "b"} {
		for range 20 {
			wg.Go(func() {
				if r, err := c.Charge(Charge{Account: acc, Limits: l, Hourly: true, Monthly: true, Total: true, Now: t0}); err != nil || !r.Allowed {
					t.Errorf("charge %s: %+v %v", acc, r, err)
				}
			})
		}
	}
	wg.Wait()
	handed, err := c.Drop(func(acc string) bool { return acc == "a" }, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(handed) != 1 || handed[0].Account != "a" || !handed[0].Hour[Live].Start.Equal(t0) || handed[0].Hour[Live].N != 20 || handed[0].Hour[Test].N != 0 {
		t.Fatalf("Drop handed %+v; want a's live window of 20 from t0", handed)
	}
	if n := c.resident(); n != 1 {
		t.Fatalf("resident after dropping a: %d, want 1 (b)", n)
	}
	counts, _, err := db.LoadUsage("a", storage.MonthOf(t0))
	if err != nil || counts.Used != 20 {
		t.Fatalf("stored for a after Drop: %+v %v; want 20 used", counts, err)
	}
	// Another node charges a meanwhile (its share, in the store here for
	// the test); the next touch loads the sum, not the dropped 20.
	if err := db.ApplyUsage([]storage.UsageDelta{{Account: "a", Month: storage.MonthOf(t0), Counts: storage.MonthCounts{Used: 5}}}); err != nil {
		t.Fatal(err)
	}
	u, err := c.Usage(Usage{Account: "a", Limits: l, Now: t0})
	if err != nil || u.MonthUsed != 25 {
		t.Fatalf("after the drop: %+v %v; want 25 used", u, err)
	}
}

// windowStore hands the same windows to every account it loads, as a
// cluster node's store does with those the shard's last owner handed over.
type windowStore struct {
	*storage.DB
	hour [2]HourWindow
	// loads, when set, counts the loads and tags each with its number.
	loads *atomic.Uint64
}

func (w windowStore) LoadAccount(account string, m storage.Month, now time.Time) (Loaded, error) {
	c, t, err := w.LoadUsage(account, m)
	l := Loaded{Counts: c, Totals: t, Hour: w.hour}
	if w.loads != nil {
		l.Tag, l.From = w.loads.Add(1), []string{"m"}
	}
	return l, err
}

// TestQuotaResumesHandedWindows: an account loaded from a WindowLoader
// resumes the running windows it answers (the hourly cap counts what the
// last owner admitted this hour) and ignores one that is over.
func TestQuotaResumesHandedWindows(t *testing.T) {
	db := openMem(t, vfs.NewMem())
	defer db.Close()
	now := t0.Add(30 * time.Minute)
	store := windowStore{DB: db, hour: [2]HourWindow{
		Test: {Start: t0.Add(-2 * time.Hour), N: 9}, // over
		Live: {Start: t0, N: 8},
	}}
	c := New(quietSystem().Root, Config{Shards: 2, Store: store})
	defer c.Stop()
	l := custom(10, 10000)
	allowed := map[Bucket]int{}
	for _, b := range []Bucket{Test, Live} {
		for range 10 {
			r, err := c.Charge(Charge{Account: "a", Bucket: b, Limits: l, Hourly: true, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			if r.Allowed {
				allowed[b]++
			}
		}
	}
	if allowed[Live] != 2 || allowed[Test] != 10 {
		t.Fatalf("admitted %v; want live 2 (8 of 10 handed over), test 10 (its handed window was over)", allowed)
	}
	u, err := c.Usage(Usage{Account: "a", Bucket: Live, Limits: l, Now: now})
	if err != nil || u.UsedThisHour != 10 || u.ResetsAt == nil || !u.ResetsAt.Equal(t0.Add(Window)) {
		t.Fatalf("live usage: %+v %v; want 10 used, resetting an hour after the handed window's start", u, err)
	}
}
