package events

import (
	"slices"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// TestRecent: Recent names an account's events stored since a time, newest
// first, at most max; the ring keeps the newest KeepRecent of all
// accounts; with KeepRecent zero it names none.
func TestRecent(t *testing.T) {
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	c := New(sys.Root, Config{Shards: 2, KeepRecent: 4})
	defer c.Stop()
	store := func(account string, at time.Time) EventID {
		t.Helper()
		id, err := c.Store(event(account, "visitor", at))
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	a1 := store("acc_a", t0)
	b1 := store("acc_b", t0.Add(time.Second))
	a2 := store("acc_a", t0.Add(2*time.Second))
	a3 := store("acc_a", t0.Add(3*time.Second))
	if got := c.Recent("acc_a", t0, 10); !slices.Equal(got, []EventID{a3, a2, a1}) {
		t.Fatalf("acc_a: %x", got)
	}
	if got := c.Recent("acc_a", t0.Add(2*time.Second), 10); !slices.Equal(got, []EventID{a3, a2}) {
		t.Fatalf("acc_a since its second: %x", got)
	}
	if got := c.Recent("acc_a", t0, 1); !slices.Equal(got, []EventID{a3}) {
		t.Fatalf("acc_a, one: %x", got)
	}
	if got := c.Recent("acc_b", t0, 10); !slices.Equal(got, []EventID{b1}) {
		t.Fatalf("acc_b: %x", got)
	}
	// A fifth event pushes the oldest out.
	b2 := store("acc_b", t0.Add(4*time.Second))
	if got := c.Recent("acc_a", t0, 10); !slices.Equal(got, []EventID{a3, a2}) {
		t.Fatalf("acc_a after the ring turned: %x", got)
	}
	if got := c.Recent("acc_b", t0, 10); !slices.Equal(got, []EventID{b2, b1}) {
		t.Fatalf("acc_b after the ring turned: %x", got)
	}
	if got := c.Recent("acc_c", t0, 10); len(got) != 0 {
		t.Fatalf("an account with no events: %x", got)
	}

	off := New(sys.Root, Config{Shards: 2})
	defer off.Stop()
	if _, err := off.Store(event("acc_a", "visitor", t0)); err != nil {
		t.Fatal(err)
	}
	if got := off.Recent("acc_a", t0, 10); got != nil {
		t.Fatalf("kept with KeepRecent zero: %x", got)
	}
}
