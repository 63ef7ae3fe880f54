package actors

import (
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// kindsProbe panics on "panic", blocks on a channel, and counts the rest.
type kindsProbe struct{}

func (p kindsProbe) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case string:
		if m == "panic" {
			panic("kinds test")
		}
	case chan struct{}:
		<-m
	}
}

func TestKindsDownAndDepth(t *testing.T) {
	sys := quiet()
	defer sys.Shutdown()
	s := SpawnShards(sys.Root, 2, func(int) actor.Actor { return kindsProbe{} })
	defer s.Stop()
	k := KindsOf(sys)
	if KindsOf(sys) != k {
		t.Fatal("KindsOf made a second registry for one system")
	}
	if d := k.Down(); len(d) != 0 {
		t.Fatalf("fresh shards down: %v", d)
	}
	var kinds []string
	k.Depths(func(kind string, _ int) { kinds = append(kinds, kind) })
	if len(kinds) != 1 || kinds[0] != "actors" {
		t.Fatalf("kinds: %v (the kind is the actor type's package)", kinds)
	}

	// A blocked shard queues its messages (depth) and, past StuckAfter,
	// counts as down.
	old := StuckAfter
	StuckAfter = 50 * time.Millisecond
	defer func() { StuckAfter = old }()
	release := make(chan struct{})
	s.Send(0, release)
	for i := 0; i < 5; i++ {
		s.Send(0, "count")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		depth := 0
		k.Depths(func(_ string, d int) { depth += d })
		down := k.Down()
		if depth == 5 && len(down) == 1 && strings.Contains(down[0], "actors shard 0 stuck") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("blocked shard: depth %d, down %v", depth, down)
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	for len(k.Down()) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("released shard still down: %v", k.Down())
		}
		time.Sleep(10 * time.Millisecond)
	}

	// protoactor's default supervisor stops a shard that keeps panicking.
	for i := 0; i < 20; i++ {
		s.Send(1, "panic")
	}
	for {
		down := k.Down()
		if len(down) == 1 && down[0] == "actors shard 1 stopped" {
			break
		}
		if time.Now().After(deadline.Add(5 * time.Second)) {
			t.Fatalf("panicking shard: down %v", down)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Shards stopped on purpose are not down.
	s2 := SpawnShards(sys.Root, 1, func(int) actor.Actor { return kindsProbe{} })
	_ = s2.Stop()
	if d := k.Down(); len(d) != 1 {
		t.Fatalf("after a deliberate stop: %v", d)
	}
}

// busyEcho answers each call after a little work.
type busyEcho struct{}

func (busyEcho) Receive(c actor.Context) {
	if m, ok := c.Message().(*probe); ok {
		for range 20 {
			runtime.Gosched()
		}
		m.Reply(m.Req, nil)
	}
}

// TestKindsBusyShardIsNotStuck: a shard that keeps answering calls, its
// mailbox never empty for longer than StuckAfter (so its run never ends),
// is not reported stuck: a hot shard under load would fail readiness.
func TestKindsBusyShardIsNotStuck(t *testing.T) {
	old := StuckAfter
	StuckAfter = 250 * time.Millisecond
	defer func() { StuckAfter = old }()
	for _, inline := range []bool{false, true} {
		sys := quiet()
		var opts []ShardOption
		if inline {
			opts = append(opts, InlineRuns())
		}
		s := SpawnShards(sys.Root, 1, func(int) actor.Actor { return busyEcho{} }, opts...)
		calls := NewCalls[int, int](time.Second)
		var stop atomic.Bool
		var answered atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					c := calls.Get(1)
					s.Send(0, c)
					if _, err := calls.Wait(c); err != nil {
						t.Error(err)
						return
					}
					answered.Add(1)
				}
			}()
		}
		var down []string
		for range 8 {
			time.Sleep(StuckAfter / 2)
			if d := KindsOf(sys).Down(); len(d) > 0 {
				down = d
			}
		}
		stop.Store(true)
		wg.Wait()
		_ = s.Stop()
		sys.Shutdown()
		if len(down) > 0 {
			t.Fatalf("InlineRuns %v: %v while it answered %d calls", inline, down, answered.Load())
		}
	}
}

// TestKindsOfAFunctionActor: a shard set whose actor is a bare function
// (actor.ReceiveFunc, as the mailer's is) is of protoactor's own package,
// which names no kind; its kind is the name it was given, so that
// fraudd_actor_mailbox_depth{kind} and /readyz's hint say "mailer", not
// "actor".
func TestKindsOfAFunctionActor(t *testing.T) {
	sys := quiet()
	defer sys.Shutdown()
	s := SpawnShards(sys.Root, 1, func(int) actor.Actor { return actor.ReceiveFunc(func(actor.Context) {}) }, Named("mailer"))
	defer s.Stop()
	var kinds []string
	KindsOf(sys).Depths(func(kind string, _ int) { kinds = append(kinds, kind) })
	if len(kinds) != 1 || kinds[0] != "mailer" {
		t.Fatalf("kinds: %v, want [mailer]", kinds)
	}
}
