package main

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/storage"
)

// hungStore is a quota store whose writes hang until release closes: a disk
// that stopped answering, so that a quota shard stays in its handler.
type hungStore struct {
	entered chan struct{}
	release chan struct{}
}

func (s hungStore) LoadUsage(string, storage.Month) (storage.MonthCounts, storage.Totals, error) {
	s.entered <- struct{}{}
	<-s.release
	return storage.MonthCounts{}, storage.Totals{}, nil
}

func (s hungStore) ApplyUsage([]storage.UsageDelta) error { return nil }

// syncBuffer is a log destination safe for the actors' goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestActorStopsKeepThePlan: the actor services stopped one after the other
// once the node-to-node service stopped each keep to the plan's end between
// them, not actors.StopTimeout apiece, when a shard of each is stuck; what
// was cut short is logged. The plan is read when the deferred stops run,
// not when they were deferred.
func TestActorStopsKeepThePlan(t *testing.T) {
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	release := make(chan struct{})
	defer close(release)
	var plan shutdownPlan // set later, as serve sets it on the signal
	now := time.Now()
	stops := func() {
		for i := range 3 {
			st := hungStore{entered: make(chan struct{}, 1), release: release}
			q := quota.New(sys.Root, quota.Config{Shards: 1, Store: st, Timeout: 20 * time.Second})
			go q.Charge(quota.Charge{Account: "acct", Kind: quota.Evaluate, Monthly: true, Now: now,
				Limits: quota.LimitsFor(quota.PlanCustom, nil, nil, now, now)})
			<-st.entered
			defer stopActors(log, "quota actors "+string(rune('a'+i)), q, &plan.end)
		}
		plan = shutdownPlan{end: time.Now().Add(300 * time.Millisecond)}
	}
	start := time.Now()
	stops()
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("three stuck services stopped by a plan ending in 300ms took %v", took)
	}
	if got := strings.Count(logs.String(), "shards did not stop in time"); got != 3 {
		t.Errorf("%d cut-short stops logged, want 3:\n%s", got, logs.String())
	}
}
