package actors

import (
	"errors"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// gate is an actor whose handler blocks on release: a shard stuck on a
// store that stopped answering.
type gate struct {
	entered chan struct{}
	release chan struct{}
}

func (g gate) Receive(ctx actor.Context) {
	if _, ok := ctx.Message().(string); ok {
		g.entered <- struct{}{}
		<-g.release
	}
}

// TestStopByKeepsTheDeadline: services stopped one after the other by a
// shared deadline (serve's shutdown plan) end by that deadline between
// them, not StopTimeout each, when their shards are stuck; a shard that
// stops in time is not reported.
func TestStopByKeepsTheDeadline(t *testing.T) {
	if StopTimeout < 5*time.Second {
		t.Fatalf("StopTimeout is %v: the test needs its default", StopTimeout)
	}
	sys := quiet()
	release := make(chan struct{})
	defer close(release)
	var stuck []*Shards
	for range 3 {
		g := gate{entered: make(chan struct{}, 1), release: release}
		s := SpawnShards(sys.Root, 1, func(int) actor.Actor { return g }, Named("stuck"))
		s.Send(0, "block")
		<-g.entered
		stuck = append(stuck, s)
	}
	healthy := SpawnShards(sys.Root, 2, func(int) actor.Actor { return counter{n: new(int)} }, Named("healthy"))

	start := time.Now()
	by := start.Add(200 * time.Millisecond)
	if err := healthy.StopBy(by); err != nil {
		t.Errorf("healthy shards: %v", err)
	}
	for i, s := range stuck {
		if err := s.StopBy(by); !errors.Is(err, ErrStopTimeout) {
			t.Errorf("stuck service %d: %v; want ErrStopTimeout", i, err)
		}
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("three stuck services stopped by a 200ms deadline took %v", took)
	}
}

// TestStopByPastTheDeadlineStillStopsHealthyShards: a service whose stop
// starts after the plan's deadline (the services before it took the time)
// still gives its shards the moment a healthy shard needs to finish its
// mailbox and stop, so they are not reported stuck: a stuck report makes
// the events and history clients leave that shard's unflushed changes
// unstored, which a late but clean stop must not lose.
func TestStopByPastTheDeadlineStillStopsHealthyShards(t *testing.T) {
	sys := quiet()
	healthy := SpawnShards(sys.Root, 4, func(int) actor.Actor { return counter{n: new(int)} }, Named("late"))
	for i := range 4 {
		healthy.Send(uint64(i), "note")
	}
	if err := healthy.StopBy(time.Now().Add(-time.Second)); err != nil {
		t.Fatalf("healthy shards stopped past the deadline: %v", err)
	}
	for i := range 4 {
		if !healthy.Stopped(i) {
			t.Errorf("shard %d not reported stopped", i)
		}
	}
}
