package quota

import (
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/storage"
)

// aheadStore is an AheadStore over a real store whose answer to
// AnswerAhead, and whose ApplyUsage (held at a gate, or failing), the test
// sets.
type aheadStore struct {
	*storage.DB
	ahead atomic.Bool
	fail  atomic.Bool
	held  atomic.Pointer[chan struct{}]
}

func (s *aheadStore) AnswerAhead() bool { return s.ahead.Load() }

func (s *aheadStore) ApplyUsage(d []storage.UsageDelta) error {
	if g := s.held.Load(); g != nil {
		<-*g
	}
	if s.fail.Load() {
		return errDisk
	}
	return s.DB.ApplyUsage(d)
}

// hold makes ApplyUsage wait until the returned func is called.
func (s *aheadStore) hold() (release func()) {
	g := make(chan struct{})
	s.held.Store(&g)
	return func() { s.held.Store(nil); close(g) }
}

func newAheadStore(t *testing.T) *aheadStore {
	db := openMem(t, vfs.NewMem())
	t.Cleanup(func() { db.Close() })
	s := &aheadStore{DB: db}
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
	release = s.hold()
	charged := async(func() { res, err = c.Charge(ch) })
	if returned(charged, 50*time.Millisecond) {
		t.Fatalf("answered ahead although the store said no: %+v %v", res, err)
	}
	release()
	<-charged
	if err != nil || !res.Allowed {
		t.Fatalf("charge after its commit: %+v %v", res, err)
	}
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
	release := s.hold()
	var res ChargeResult
	var err error
	charged := async(func() { res, err = c.Charge(ch) })
	if returned(charged, 50*time.Millisecond) {
		t.Fatalf("answered ahead right after a failed group: %+v %v", res, err)
	}
	release()
	<-charged
	if err != nil || !res.Allowed {
		t.Fatalf("charge once the store takes writes: %+v %v", res, err)
	}
	release = s.hold()
	defer release()
	if !returned(async(func() { res, err = c.Charge(ch) }), 5*time.Second) || err != nil || !res.Allowed {
		t.Fatalf("not answered ahead after a group succeeded: %+v %v", res, err)
	}
}
