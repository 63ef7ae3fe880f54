package actors

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

type poison struct{}

type note struct{ n int }

// crashy answers calls with its shard's generation and panics on poison.
type crashy struct {
	gen   int
	notes *[]int
	mu    *sync.Mutex
}

func (c crashy) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *probe:
		m.Reply(c.gen, nil)
	case poison:
		panic("injected panic")
	case note:
		c.mu.Lock()
		*c.notes = append(*c.notes, m.n)
		c.mu.Unlock()
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestShardStoppedBySupervisorRestarts: a shard that keeps panicking is
// restarted in place (OnRestart runs each time), then stopped by protoactor's
// supervisor; it is reported down, calls to it fail at once while others
// work, its fire-and-forget messages wait, and it comes back by itself.
func TestShardStoppedBySupervisorRestarts(t *testing.T) {
	sys := quiet()
	sup := SupervisionOf(sys.Root.ActorSystem())
	sup.SetRestartDelays(200*time.Millisecond, time.Second)
	gens := make([]int, 2)
	var restarts atomic.Int32
	var mu sync.Mutex
	var notes []int
	s := SpawnShards(sys.Root, 2, func(i int) actor.Actor { return crashy{gen: gens[i], notes: &notes, mu: &mu} },
		Named("crashy"), OnRestart(func(i int) { restarts.Add(1); gens[i]++ }), WithLogger(slog.New(slog.DiscardHandler)))
	defer s.Stop()
	calls := NewCalls[int, int](5 * time.Second)
	ask := func(h uint64) (int, error) {
		c := calls.Get(0)
		s.Send(h, c)
		return calls.Wait(c)
	}
	if g, err := ask(1); err != nil || g != 0 {
		t.Fatalf("before: %d %v", g, err)
	}
	// protoactor restarts a panicking actor up to 10 times in 10 s and stops
	// it at the 11th.
	for i := 0; i < 11; i++ {
		s.Send(1, poison{})
	}
	waitFor(t, "the shard to be reported down", func() bool { return len(sup.Down()) == 1 })
	if d := sup.Down(); d[0] != "crashy" || s.Down() != 1 {
		t.Fatalf("down: %v %d", d, s.Down())
	}
	if n := restarts.Load(); n != 10 {
		t.Fatalf("%d restarts before the stop, want 10", n)
	}
	start := time.Now()
	if _, err := ask(1); !errors.Is(err, ErrShardDown) || !errors.Is(err, ErrUnavailable) || time.Since(start) > time.Second {
		t.Fatalf("call to a down shard: %v after %s", err, time.Since(start))
	}
	if _, err := ask(0); err != nil {
		t.Fatalf("the other shard: %v", err)
	}
	s.Send(1, note{1})
	s.Send(1, note{2})

	waitFor(t, "the shard to come back", func() bool { return len(sup.Down()) == 0 })
	g, err := ask(1)
	if err != nil || g != 11 {
		t.Fatalf("after the restart: generation %d, %v (want 11: OnRestart ran before the new actor)", g, err)
	}
	mu.Lock()
	got := append([]int(nil), notes...)
	mu.Unlock()
	if len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("messages sent while down: %v", got)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if d := sup.Down(); len(d) != 0 {
		t.Fatalf("stopped set still listed: %v", d)
	}
}

// TestCallsToAStuckShardAreBounded: a shard that never answers makes every
// call return ErrTimeout within the bound, not hang.
func TestCallsToAStuckShardAreBounded(t *testing.T) {
	sys := quiet()
	block := make(chan struct{})
	defer close(block)
	s := SpawnShards(sys.Root, 1, func(int) actor.Actor {
		return actor.ReceiveFunc(func(ctx actor.Context) {
			if _, ok := ctx.Message().(*probe); ok {
				<-block
			}
		})
	}, Named("stuck"))
	calls := NewCalls[int, int](100 * time.Millisecond)
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			c := calls.Get(0)
			s.Send(0, c)
			if _, err := calls.Wait(c); !errors.Is(err, ErrTimeout) || !errors.Is(err, ErrUnavailable) {
				t.Errorf("want ErrTimeout, got %v", err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("call took %s", d)
			}
		}()
	}
	wg.Wait()
}

// startFails panics on Started while fails is above zero (taking one off)
// and on poison, and answers calls.
type startFails struct{ fails *atomic.Int32 }

func (a startFails) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		if a.fails.Add(-1) >= 0 {
			panic("injected panic on start")
		}
	case poison:
		panic("injected panic")
	case *probe:
		m.Reply(1, nil)
	}
}

// TestShardStoppedWhileStartingRestarts: a shard its supervisor stops
// before its spawn returned (it panics as it starts; with InlineRuns that
// all happens inside the spawn) is reported down and spawned again, at
// the first spawn and at a respawn, not left up with a dead PID.
func TestShardStoppedWhileStartingRestarts(t *testing.T) {
	sys := quiet()
	defer sys.Shutdown()
	SupervisionOf(sys).SetRestartDelays(20*time.Millisecond, 50*time.Millisecond)
	fails := new(atomic.Int32)
	fails.Store(11) // the first start and its 10 restarts: stopped at spawn
	s := SpawnShards(sys.Root, 1, func(int) actor.Actor { return startFails{fails} }, InlineRuns(),
		WithLogger(slog.New(slog.DiscardHandler)))
	defer s.Stop()
	calls := NewCalls[int, int](200 * time.Millisecond)
	up := func(what string) {
		t.Helper()
		waitFor(t, what, func() bool {
			c := calls.Get(0)
			s.Send(0, c)
			v, err := calls.Wait(c)
			return err == nil && v == 1
		})
	}
	up("the shard stopped at its first spawn to come back")

	// A panic (1) and 10 failed restarts stop it; its respawn then fails
	// 11 starts inside the spawn, and the one after that starts.
	fails.Store(21)
	s.Send(0, poison{})
	up("the shard stopped during its respawn to come back")
	if s.Down() != 0 {
		t.Fatalf("answering shard reported down")
	}
}

// gated is crashy with a gate: a chan struct{} message holds its shard
// until the channel is closed, so that what is sent meanwhile queues.
type gated struct{ crashy }

func (g gated) Receive(ctx actor.Context) {
	if m, ok := ctx.Message().(chan struct{}); ok {
		<-m
		return
	}
	g.crashy.Receive(ctx)
}

// TestQueuedBehindAFinalStop: messages already in a shard's mailbox when
// its supervisor stops it for good are not left there: a call is answered
// ErrShardDown at once instead of waiting out its caller's timeout, and a
// fire-and-forget message goes to the restarted shard, ahead of what was
// sent while it was down.
func TestQueuedBehindAFinalStop(t *testing.T) {
	sys := quiet()
	sup := SupervisionOf(sys)
	sup.SetRestartDelays(200*time.Millisecond, time.Second)
	var mu sync.Mutex
	var notes []int
	s := SpawnShards(sys.Root, 1, func(int) actor.Actor { return gated{crashy{notes: &notes, mu: &mu}} },
		Named("gated"), WithLogger(slog.New(slog.DiscardHandler)))
	defer s.Stop()
	calls := NewCalls[int, int](3 * time.Second)

	gate := make(chan struct{})
	s.Send(0, gate)
	for range 11 { // the 11th panic in 10 s stops the shard for good
		s.Send(0, poison{})
	}
	queued := calls.Get(0)
	s.Send(0, queued)
	s.Send(0, note{1})
	close(gate)
	start := time.Now()
	if _, err := calls.Wait(queued); !errors.Is(err, ErrShardDown) || time.Since(start) > time.Second {
		t.Fatalf("call queued behind the final stop: %v after %s; want ErrShardDown at once", err, time.Since(start))
	}
	waitFor(t, "the shard to be reported down", func() bool { return s.Down() == 1 })
	s.Send(0, note{2})
	waitFor(t, "the shard to come back", func() bool { return s.Down() == 0 })
	c := calls.Get(0)
	s.Send(0, c)
	if _, err := calls.Wait(c); err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	mu.Lock()
	got := append([]int(nil), notes...)
	mu.Unlock()
	if len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("notes the restarted shard got: %v; want [1 2]", got)
	}
}

// TestStoppedNamesOnlyTheShardsThatStopped: after Stop, Stopped is true for
// the shards whose actor stopped and false for one still stuck in a handler
// past StopTimeout, whose state its own goroutine still owns.
func TestStoppedNamesOnlyTheShardsThatStopped(t *testing.T) {
	old := StopTimeout
	StopTimeout = 100 * time.Millisecond
	defer func() { StopTimeout = old }()
	sys := quiet()
	block, entered := make(chan struct{}), make(chan struct{})
	defer close(block)
	s := SpawnShards(sys.Root, 2, func(i int) actor.Actor {
		return actor.ReceiveFunc(func(ctx actor.Context) {
			if _, ok := ctx.Message().(*probe); ok && i == 1 {
				close(entered)
				<-block
			}
		})
	}, Named("stuck"))
	if s.Stopped(0) || s.Stopped(1) {
		t.Fatal("shards reported stopped before Stop")
	}
	s.Send(1, &probe{})
	<-entered
	if err := s.Stop(); !errors.Is(err, ErrStopTimeout) {
		t.Fatalf("Stop with a stuck shard: %v; want ErrStopTimeout", err)
	}
	if !s.Stopped(0) {
		t.Error("shard 0 stopped, but Stopped(0) is false")
	}
	if s.Stopped(1) {
		t.Error("shard 1 is stuck in its handler, but Stopped(1) is true")
	}
}
