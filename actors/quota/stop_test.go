package quota

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/internal/logrec"
	"github.com/fraudd/fraudd/storage"
)

// stuckLoadStore holds LoadUsage of the account "stuck" at a gate: a store
// stall that keeps a shard's handler busy past the shards' stop timeout.
type stuckLoadStore struct {
	*aheadStore
	gate    chan struct{}
	entered chan struct{}
}

func (s *stuckLoadStore) LoadUsage(a string, m storage.Month) (storage.MonthCounts, storage.Totals, error) {
	if a == "stuck" {
		close(s.entered)
		<-s.gate
	}
	return s.aheadStore.LoadUsage(a, m)
}

// TestStopAfterAStuckShard: a shard still stuck in a handler when Stop gives
// up on it (actors.StopTimeout) goes on after Stop has closed the group
// committer. Its charges, and those queued behind it, must then be refused
// with an error (nothing acknowledged that the store will not get), not
// panic on the closed committer; Stop says which shard did not stop.
func TestStopAfterAStuckShard(t *testing.T) {
	old := actors.StopTimeout
	actors.StopTimeout = 100 * time.Millisecond
	defer func() { actors.StopTimeout = old }()

	s := &stuckLoadStore{aheadStore: newAheadStore(t), gate: make(chan struct{}), entered: make(chan struct{})}
	release := sync.OnceFunc(func() { close(s.gate) })
	defer release()
	rec := &logrec.Recorder{}
	sys := quietSystem()
	c := New(sys.Root, Config{Shards: 1, Store: s, Timeout: 3 * time.Second, Logger: rec.Logger()})
	l := custom(10, 100)

	type result struct {
		res ChargeResult
		err error
	}
	stuckDone := make(chan result, 1)
	go func() {
		r, err := c.Charge(Charge{Account: "stuck", Limits: l, Hourly: true, Monthly: true, Total: true, Now: t0})
		stuckDone <- result{r, err}
	}()
	<-s.entered
	// Queued behind the stuck charge, in the same shard's mailbox.
	queuedDone := make(chan result, 1)
	go func() {
		r, err := c.Charge(Charge{Account: "a", Limits: l, Hourly: true, Monthly: true, Total: true, Now: t0})
		queuedDone <- result{r, err}
	}()
	// It must be in the mailbox before Stop refuses new calls.
	deadline := time.Now().Add(5 * time.Second)
	for depth := 0; depth == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the second charge never reached the stuck shard's mailbox")
		}
		time.Sleep(time.Millisecond)
		actors.KindsOf(sys).Depths(func(_ string, d int) { depth += d })
	}

	err := c.Stop()
	if !errors.Is(err, actors.ErrStopTimeout) {
		t.Fatalf("Stop with a stuck shard: %v; want ErrStopTimeout", err)
	}
	release()
	for name, ch := range map[string]chan result{"stuck": stuckDone, "queued": queuedDone} {
		r := <-ch
		if r.err == nil || r.res.Allowed {
			t.Errorf("%s charge after the committer closed: %+v %v; want refused", name, r.res, r.err)
		}
		if errors.Is(r.err, actors.ErrTimeout) {
			t.Errorf("%s charge never answered: %v", name, r.err)
		}
	}
	if p := rec.Find("panic"); len(p) > 0 {
		t.Errorf("panics after Stop: %q", p)
	}
	if l := rec.Find("outlived Stop"); len(l) != 1 {
		t.Errorf("logged about the shard that outlived Stop: %q; want one line", l)
	}
	for _, a := range []string{"stuck", "a"} {
		if cnt, _, err := s.DB.LoadUsage(a, storage.MonthOf(t0)); err != nil || cnt.Used != 0 {
			t.Errorf("stored for %s: %+v %v; want nothing (refused)", a, cnt, err)
		}
	}
}
