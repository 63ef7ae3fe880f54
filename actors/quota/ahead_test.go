package quota

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/storage"
)

// aheadStore is an AheadStore over a real store whose answer to
// AnswerAhead, and whose ApplyUsage (held at a gate, or failing), the test
// sets.
type aheadStore struct {
	*storage.DB
	ahead   atomic.Bool
	fail    atomic.Bool
	marked  atomic.Int64 // AnsweredAhead calls
	held    atomic.Pointer[chan struct{}]
	entered chan struct{} // a held ApplyUsage arrived at its gate
}

func (s *aheadStore) AnswerAhead() bool { return s.ahead.Load() }

// AnsweredAhead counts the charges answered ahead (marked for the lag
// checks) besides marking them.
func (s *aheadStore) AnsweredAhead() {
	s.marked.Add(1)
	s.DB.AnsweredAhead()
}

func (s *aheadStore) ApplyUsage(d []storage.UsageDelta) error {
	if g := s.held.Load(); g != nil {
		select {
		case s.entered <- struct{}{}:
		default:
		}
		<-*g
	}
	if s.fail.Load() {
		return errDisk
	}
	return s.DB.ApplyUsage(d)
}

// hold makes ApplyUsage wait until the returned func is called (again
// calls do nothing, so a test may also defer it: a failed test's Stop
// would otherwise wait on the held commit).
func (s *aheadStore) hold() (release func()) {
	g := make(chan struct{})
	s.held.Store(&g)
	return sync.OnceFunc(func() { s.held.Store(nil); close(g) })
}

// newAheadStore opens one whose group sync never runs by itself (an hour's
// interval), so that no sync's barrier (beforeSync) joins the committer's
// queue in the middle of a test.
func newAheadStore(t *testing.T) *aheadStore {
	db, err := storage.Open("q", storage.Options{FS: vfs.NewMem(), SyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s := &aheadStore{DB: db, entered: make(chan struct{}, 1)}
	s.ahead.Store(true)
	return s
}

// async runs fn and reports whether it returned within a short wait; the
// caller then reads its result from done.
func async(fn func()) (done chan struct{}) {
	done = make(chan struct{})
	go func() { fn(); close(done) }()
	return done
}

// waitsForCommit checks that ch is answered only once its commit, held
// meanwhile, goes through, and that it is then allowed.
func waitsForCommit(t *testing.T, s *aheadStore, c *Client, ch Charge, why string) {
	t.Helper()
	release := s.hold()
	defer release()
	var res ChargeResult
	var err error
	charged := async(func() { res, err = c.Charge(ch) })
	if returned(charged, 50*time.Millisecond) {
		t.Fatalf("%s: answered before its commit: %+v %v", why, res, err)
	}
	release()
	<-charged
	if err != nil || !res.Allowed {
		t.Fatalf("%s: after its commit: %+v %v", why, res, err)
	}
}

func returned(done chan struct{}, within time.Duration) bool {
	select {
	case <-done:
		return true
	case <-time.After(within):
		return false
	}
}

// TestChargeAnsweredAhead: while the store answers ahead, an allowed charge
// is answered as soon as it is counted, its commit still held; the count is
// in memory at once, and Daily, which must hold every acknowledged charge,
// waits for the commit. Without AnswerAhead the charge waits for it.
func TestChargeAnsweredAhead(t *testing.T) {
	s := newAheadStore(t)
	c := New(quietSystem().Root, Config{Shards: 1, Store: s})
	defer c.Stop()
	l := custom(10, 100)
	ch := Charge{Account: "a", Limits: l, Hourly: true, Monthly: true, Total: true, Now: t0}

	release := s.hold()
	defer release()
	res, err := c.Charge(ch)
	if err != nil || !res.Allowed {
		t.Fatalf("charge with its commit held: %+v %v", res, err)
	}
	if u, err := c.Usage(Usage{Account: "a", Limits: l, Now: t0}); err != nil || u.MonthUsed != 1 || u.UsedThisHour != 1 {
		t.Fatalf("in memory before the commit: %+v %v", u, err)
	}
	var days []DayCount
	daily := async(func() { days, err = c.Daily("a", t0, 1) })
	if returned(daily, 50*time.Millisecond) {
		t.Fatalf("Daily returned before the acknowledged charge was stored: %+v %v", days, err)
	}
	release()
	<-daily
	if err != nil || len(days) != 1 || days[0].Used != 1 {
		t.Fatalf("Daily after the commit: %+v %v", days, err)
	}
	if cnt, _, err := s.LoadUsage("a", storage.MonthOf(t0)); err != nil || cnt.Used != 1 {
		t.Fatalf("stored: %+v %v", cnt, err)
	}

	// The store says no (Strict, or a late sync): the answer waits.
	s.ahead.Store(false)
	waitsForCommit(t, s, c, ch, "the store said no")
	if cnt, _, err := s.LoadUsage("a", storage.MonthOf(t0)); err != nil || cnt.Used != 2 {
		t.Fatalf("stored when answered: %+v %v", cnt, err)
	}
}

// TestChargeAheadStoreFailure: a charge answered ahead whose commit fails
// was served, so it stays counted in memory (the limits stay exact) and is
// lost to the store as in a crash. The charges after the failure wait for
// their own commit and hear its error, with nothing counted, until a group
// succeeds; then charges are answered ahead again.
func TestChargeAheadStoreFailure(t *testing.T) {
	s := newAheadStore(t)
	c := New(quietSystem().Root, Config{Shards: 1, Store: s, Logger: slog.New(slog.DiscardHandler)})
	defer c.Stop()
	l := custom(10, 100)
	ch := Charge{Account: "a", Limits: l, Hourly: true, Monthly: true, Total: true, Now: t0}
	if _, err := c.Charge(ch); err != nil { // loaded and stored
		t.Fatal(err)
	}
	stored(t, c)

	s.fail.Store(true)
	if res, err := c.Charge(ch); err != nil || !res.Allowed {
		t.Fatalf("charge answered ahead of a failing commit: %+v %v", res, err)
	}
	stored(t, c) // the failed group is done
	if u, err := c.Usage(Usage{Account: "a", Limits: l, Now: t0}); err != nil || u.MonthUsed != 2 || u.UsedThisHour != 2 {
		t.Fatalf("the served charge left memory: %+v %v", u, err)
	}
	if res, err := c.Charge(ch); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("charge after a failed group, store still failing: %+v %v; want ErrUnavailable", res, err)
	}
	if u, err := c.Usage(Usage{Account: "a", Limits: l, Now: t0}); err != nil || u.MonthUsed != 2 || u.UsedThisHour != 2 {
		t.Fatalf("the refused charge stayed counted: %+v %v", u, err)
	}

	s.fail.Store(false)
	waitsForCommit(t, s, c, ch, "right after a failed group")
	release := s.hold()
	defer release()
	var res ChargeResult
	var err error
	if !returned(async(func() { res, err = c.Charge(ch) }), 5*time.Second) || err != nil || !res.Allowed {
		t.Fatalf("not answered ahead after a group succeeded: %+v %v", res, err)
	}
}

// TestChargeQueueFull: with the committer stuck and its queue full, a
// charge fails at once with ErrUnavailable and is undone in memory, rather
// than block the goroutine the shard runs on (a caller's, inline), whose
// deadline could not fire.
func TestChargeQueueFull(t *testing.T) {
	s := newAheadStore(t)
	// No linger: the first charge's commit is the stuck one.
	c := New(quietSystem().Root, Config{Shards: 1, Store: s, Group: actors.GroupConfig{Queue: 1, Linger: -1}})
	defer c.Stop()
	l := custom(10, 100)
	ch := Charge{Account: "a", Limits: l, Hourly: true, Monthly: true, Total: true, Now: t0}
	release := s.hold()
	defer release()
	if res, err := c.Charge(ch); err != nil || !res.Allowed { // in the held ApplyUsage
		t.Fatalf("first charge: %+v %v", res, err)
	}
	<-s.entered
	if res, err := c.Charge(ch); err != nil || !res.Allowed { // in the queue
		t.Fatalf("second charge: %+v %v", res, err)
	}
	start := time.Now()
	if res, err := c.Charge(ch); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("charge with the queue full: %+v %v; want ErrUnavailable", res, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the refusal took %v: it waited for the queue", d)
	}
	if u, err := c.Usage(Usage{Account: "a", Limits: l, Now: t0}); err != nil || u.MonthUsed != 2 || u.UsedThisHour != 2 {
		t.Fatalf("after the refused charge: %+v %v; want the two served", u, err)
	}
}

// TestStrictNeverAnswersAhead: a store opened in Strict mode is never used
// to answer ahead, whatever AnswerAhead says.
func TestStrictNeverAnswersAhead(t *testing.T) {
	db, err := storage.Open("q", storage.Options{FS: vfs.NewMem(), Durability: storage.Strict})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := &aheadStore{DB: db, entered: make(chan struct{}, 1)}
	s.ahead.Store(true)
	c := New(quietSystem().Root, Config{Shards: 1, Store: s})
	defer c.Stop()
	waitsForCommit(t, s, c, Charge{Account: "a", Limits: custom(10, 100), Hourly: true, Monthly: true, Total: true, Now: t0}, "strict")
}

// TestDailyAfterStop: Daily after Stop answers an error; it must not wait
// on the closed committer.
func TestDailyAfterStop(t *testing.T) {
	s := newAheadStore(t)
	c := New(quietSystem().Root, Config{Shards: 1, Store: s})
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Daily("a", t0, 7); !errors.Is(err, ErrStopped) {
		t.Fatalf("Daily after Stop: %v; want ErrStopped", err)
	}
	if _, err := c.Drop(func(string) bool { return true }, time.Second); !errors.Is(err, ErrStopped) {
		t.Fatalf("Drop after Stop: %v; want ErrStopped", err)
	}
}

// TestChargeAheadHeldBack: once aheadQueue increments wait for a stuck
// committer, charges wait for their commit again, so their callers are
// held back instead of filling the queue.
func TestChargeAheadHeldBack(t *testing.T) {
	s := newAheadStore(t)
	// No linger: the first charge's commit is the stuck one.
	c := New(quietSystem().Root, Config{Shards: 1, Store: s, Group: actors.GroupConfig{Linger: -1}})
	defer c.Stop()
	ch := Charge{Account: "a", Limits: custom(-1, -1), Monthly: true, Total: true, Now: t0}
	release := s.hold()
	defer release()
	if _, err := c.Charge(ch); err != nil { // in the held ApplyUsage
		t.Fatal(err)
	}
	<-s.entered
	// Charges are answered ahead until aheadQueue items wait.
	var res ChargeResult
	var err error
	var charged chan struct{}
	ahead := 0
	for ; ahead <= aheadQueue; ahead++ {
		charged = async(func() { res, err = c.Charge(ch) })
		if !returned(charged, time.Second) {
			break
		}
		if err != nil || !res.Allowed {
			t.Fatalf("charge %d of the queue: %+v %v", ahead, res, err)
		}
	}
	if ahead != aheadQueue {
		t.Fatalf("%d charges answered ahead of a stuck committer; want %d", ahead, aheadQueue)
	}
	release()
	<-charged
	if err != nil || !res.Allowed {
		t.Fatalf("after the commit: %+v %v", res, err)
	}
}

// TestChargesAheadWaitForTheSync: the increments of charges answered ahead
// linger in the committer until the group sync's barrier takes them, as
// one batch; a charge whose caller waits for its commit takes the group
// with it at once.
func TestChargesAheadWaitForTheSync(t *testing.T) {
	s := newAheadStore(t) // its group sync runs only when asked (Sync)
	c := New(quietSystem().Root, Config{Shards: 2, Store: s})
	defer c.Stop()
	l := custom(100, 1000)
	for i := range 10 {
		ch := Charge{Account: fmt.Sprint("a", i%2), Limits: l, Hourly: true, Monthly: true, Total: true, Now: t0}
		if res, err := c.Charge(ch); err != nil || !res.Allowed {
			t.Fatalf("charge %d: %+v %v", i, res, err)
		}
	}
	if n := s.marked.Load(); n != 10 {
		t.Fatalf("%d charges marked as answered ahead; want 10 (the lag checks count from them)", n)
	}
	before := s.WriteStats().Commits
	time.Sleep(50 * time.Millisecond)
	if n := s.WriteStats().Commits - before; n != 0 {
		t.Fatalf("%d commits before the sync; the increments should linger", n)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if n := s.WriteStats().Commits - before; n != 1 {
		t.Fatalf("the sync took %d commits; want the ten increments as one", n)
	}
	for _, a := range []string{"a0", "a1"} {
		if cnt, _, err := s.LoadUsage(a, storage.MonthOf(t0)); err != nil || cnt.Used != 5 {
			t.Fatalf("%s stored after the sync: %+v %v", a, cnt, err)
		}
	}

	// A lingering increment goes with the next charge that waits.
	ch := Charge{Account: "a0", Limits: l, Hourly: true, Monthly: true, Total: true, Now: t0}
	if _, err := c.Charge(ch); err != nil {
		t.Fatal(err)
	}
	s.ahead.Store(false)
	before = s.WriteStats().Commits
	if !returned(async(func() { _, _ = c.Charge(ch) }), 5*time.Second) {
		t.Fatal("a charge that waits for its commit waited for the sync")
	}
	if n := s.WriteStats().Commits - before; n != 1 {
		t.Fatalf("%d commits for the lingering increment and the waiting charge; want one batch", n)
	}
	if cnt, _, err := s.LoadUsage("a0", storage.MonthOf(t0)); err != nil || cnt.Used != 7 {
		t.Fatalf("stored with the waiting charge: %+v %v", cnt, err)
	}
}

// TestLentChargeAnsweredAhead: a charge made from a slice another node
// lent (Charge.Lent: no check, no account loaded) is answered ahead of its
// commit like any other, and Flush returns once it is stored; without
// AnswerAhead it waits for its commit.
func TestLentChargeAnsweredAhead(t *testing.T) {
	s := newAheadStore(t)
	c := New(quietSystem().Root, Config{Shards: 1, Store: s})
	defer c.Stop()
	ch := Charge{Account: "a", Limits: custom(10, 100), Monthly: true, Total: true, Now: t0, Lent: true}

	release := s.hold()
	defer release()
	res, err := c.Charge(ch)
	if err != nil || !res.Allowed {
		t.Fatalf("lent charge with its commit held: %+v %v", res, err)
	}
	var ferr error
	flushed := async(func() { ferr = c.Flush(5 * time.Second) })
	if returned(flushed, 50*time.Millisecond) {
		t.Fatalf("Flush returned before the lent charge was stored: %v", ferr)
	}
	release()
	<-flushed
	if ferr != nil {
		t.Fatal(ferr)
	}
	if cnt, _, err := s.LoadUsage("a", storage.MonthOf(t0)); err != nil || cnt.Used != 1 {
		t.Fatalf("stored after Flush: %+v %v", cnt, err)
	}

	s.ahead.Store(false)
	waitsForCommit(t, s, c, ch, "a lent charge, the store said no")
}

// TestMonthReloadFindsQueuedIncrements: a clock that goes back across a
// month's start and forward again makes the shard load the later month
// twice; its second load must count that month's charges still queued for
// the committer (answered ahead, lingering until the sync). Found by
// TestQuotaMetamorphic (seed 1795794834126666923).
func TestMonthReloadFindsQueuedIncrements(t *testing.T) {
	s := newAheadStore(t)
	c := New(quietSystem().Root, Config{Shards: 1, Store: s})
	defer c.Stop()
	l := custom(1000, 100000)
	june := time.Date(2027, 6, 1, 0, 21, 0, 0, time.UTC)
	may := june.Add(-time.Hour)
	for _, ch := range []Charge{
		{Account: "e", Kind: Lookup, Monthly: true, Limits: l, Now: june},
		{Account: "e", Kind: Evaluate, Monthly: true, Limits: l, Now: may},
		{Account: "e", Kind: Evaluate, Monthly: true, Limits: l, Now: june.Add(time.Hour)},
	} {
		if res, err := c.Charge(ch); err != nil || !res.Allowed {
			t.Fatalf("charge at %v: %+v %v", ch.Now, res, err)
		}
	}
	u, err := c.Usage(Usage{Account: "e", Limits: l, Now: june.Add(2 * time.Hour)})
	if err != nil || u.MonthUsed != 1 || u.MonthLookupsUsed != 1 {
		t.Fatalf("June after a visit to May: %d checks and %d lookups (err %v); want 1 and 1", u.MonthUsed, u.MonthLookupsUsed, err)
	}
}

// aheadWindowStore is an aheadStore that is also a WindowLoader, as a
// cluster node's SharedStore is (no windows handed over).
type aheadWindowStore struct{ *aheadStore }

func (s aheadWindowStore) LoadAccount(account string, m storage.Month, now time.Time) (Loaded, error) {
	c, t, err := s.LoadUsage(account, m)
	return Loaded{Counts: c, Totals: t}, err
}

// TestFirstTouchFindsLingeringIncrements: on a cluster node an account
// forgotten (Forget: a claim) while its increment still lingers in the
// committer — taken off the queue, so Queued reads 0, but not yet applied —
// must load that increment on its next touch, or the cap admits one more.
func TestFirstTouchFindsLingeringIncrements(t *testing.T) {
	s := aheadWindowStore{newAheadStore(t)}
	c := New(quietSystem().Root, Config{Shards: 1, Store: s})
	defer c.Stop()
	l := custom(-1, 1)
	ch := Charge{Account: "a", Limits: l, Monthly: true, Now: t0}
	if res, err := c.Charge(ch); err != nil || !res.Allowed {
		t.Fatalf("first charge: %+v %v", res, err)
	}
	// The increment lingers in the committer (the sync runs hourly).
	deadline := time.Now().Add(5 * time.Second)
	for c.commit.Queued() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if _, err := c.Forget(func(string) bool { return true }, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if res, err := c.Charge(ch); err != nil || res.Allowed {
		t.Fatalf("second charge of a monthly cap of 1 after a Forget: %+v %v; want refused", res, err)
	}
}

// TestRollbackAfterAMonthReload: a charge whose commit fails while the
// clock goes back across a month's start and forward again is rolled back
// after the shard reloaded its month from the store, which never held it:
// the rollback must not take it out of the reloaded count a second time.
func TestRollbackAfterAMonthReload(t *testing.T) {
	s := newAheadStore(t)
	s.ahead.Store(false) // charges wait for their commit: a failure rolls back
	c := New(quietSystem().Root, Config{Shards: 1, Store: s, Logger: slog.New(slog.DiscardHandler)})
	defer c.Stop()
	l := custom(-1, 100)
	june := time.Date(2027, 6, 1, 0, 21, 0, 0, time.UTC)
	may := june.Add(-time.Hour)
	if err := s.DB.ApplyUsage([]storage.UsageDelta{{Account: "a", Month: storage.MonthOf(june), Counts: storage.MonthCounts{Used: 5}}}); err != nil {
		t.Fatal(err)
	}
	usage := func(now time.Time) int64 {
		t.Helper()
		u, err := c.Usage(Usage{Account: "a", Limits: l, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		return u.MonthUsed
	}
	if n := usage(june); n != 5 {
		t.Fatalf("June loaded: %d; want 5", n)
	}

	release := s.hold()
	defer release()
	s.fail.Store(true)
	charged := async(func() {
		if _, err := c.Charge(Charge{Account: "a", Limits: l, Monthly: true, Now: june}); !errors.Is(err, ErrUnavailable) {
			t.Errorf("charge whose commit fails: %v; want ErrUnavailable", err)
		}
	})
	<-s.entered // its commit is held
	// May: the shard waits for the charge's commit before it loads May...
	inMay := async(func() { usage(may) })
	for deadline := time.Now().Add(5 * time.Second); c.commit.Queued() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	// ...and June again is queued behind it, ahead of the rollback.
	backInJune := async(func() { usage(june) })
	time.Sleep(100 * time.Millisecond)
	release()
	<-charged
	<-inMay
	<-backInJune
	s.fail.Store(false)
	if n := usage(june); n != 5 {
		t.Fatalf("June after the failed charge: %d; want the stored 5", n)
	}
}

// TestMonthlyWarningOnceAfterALostBatch: a charge answered ahead that
// crosses 80% warns and marks the month in memory; its batch fails, so
// the store lacks the mark until the account's next delta carries it, and
// an eviction and reload do not send the warning again. Before, only
// memory held the mark, and every reload warned anew.
func TestMonthlyWarningOnceAfterALostBatch(t *testing.T) {
	s := newAheadStore(t)
	rec := &recorder{}
	c := New(quietSystem().Root, Config{Shards: 1, Store: s, Notifier: rec, IdleAfter: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	defer c.Stop()
	l := custom(-1, 10)
	ch := func(now time.Time) ChargeResult {
		r, err := c.Charge(Charge{Account: "a", Limits: l, Monthly: true, Total: true, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for range 7 {
		ch(t0)
	}
	stored(t, c)
	s.fail.Store(true)
	ch(t0) // 8th: crosses 80%, answered ahead, batch fails
	stored(t, c)
	s.fail.Store(false)
	ch(t0) // 9th: waits for its commit, succeeds
	stored(t, c)
	if cnt, _, err := s.DB.LoadUsage("a", storage.MonthOf(t0)); err != nil || cnt.Warned&warnBit(WarnMonthly80) == 0 {
		t.Fatalf("stored after the next delta: %+v %v; want the 80%% mark", cnt, err)
	}
	later := t0.Add(3 * time.Hour)
	c.Sweep(later)
	if n := c.resident(); n != 0 {
		t.Fatalf("resident %d", n)
	}
	ch(later) // 10th
	stored(t, c)
	var kinds []WarnKind
	for _, w := range rec.get() {
		kinds = append(kinds, w.Kind)
	}
	n80 := 0
	for _, k := range kinds {
		if k == WarnMonthly80 {
			n80++
		}
	}
	if n80 != 1 {
		t.Errorf("monthly_80 sent %d times in one month", n80)
	}
}
