package webhook

import (
	"testing"
	"time"

	"github.com/fraudd/fraudd/storage/storagetest"
)

// failingFixture is a fixture whose store can be stopped: breakStore syncs
// what was written so far (the sync interval would have), then fails a
// synced write, which stops the store's instance (reads and writes answer
// ErrUnavailable) until the health probe reopens it (f.db.Probe).
func failingFixture(t *testing.T, cfg Config) (*fixture, func()) {
	t.Helper()
	fs, failing := storagetest.FailingWrites()
	f := newFixtureOn(t, cfg, fs)
	return f, func() {
		t.Helper()
		if err := f.db.Sync(); err != nil {
			t.Fatal(err)
		}
		failing.Store(true)
		defer failing.Store(false)
		if err := f.db.Probe(); err == nil {
			t.Fatal("a synced write on a failing disk succeeded")
		}
	}
}

// TestStreakNotResetByFailedRead: SPEC §6, the owner is emailed after 5
// consecutive failed deliveries. An account loaded again (here after a
// restart) while the store cannot be read must not take its stored streak
// of 4 for 0: the 5th failed event sends the notice, though the store was
// down when the account was loaded.
func TestStreakNotResetByFailedRead(t *testing.T) {
	f, breakStore := failingFixture(t, Config{AllowPrivate: true})
	rcv := newReceiver(t, 500)
	f.dir.set("acc_f", rcv.URL, "whsec_x")
	round := 0
	failEvents(t, f, &round, 4)
	f.restart(t)

	breakStore()
	before := len(rcv.got())
	ev := threat("acc_f")
	ev.At = t0.Add(time.Hour)
	f.svc.Notify(ev) // loads the account while its log cannot be read
	eventually(t, "first attempt", func() bool { return len(rcv.got()) > before })
	if err := f.db.Probe(); err != nil {
		t.Fatal(err)
	}
	logged := func(attempt int) func() bool {
		return func() bool {
			ds, _ := f.db.Deliveries("acc_f", time.Time{}, 1000)
			for _, d := range ds {
				if d.EventAt.Equal(ev.At) && d.Attempt == attempt {
					return true
				}
			}
			return false
		}
	}
	eventually(t, "retry due", func() bool { return f.svc.settled(time.Second) })
	f.clk.Advance(Backoff[0])
	eventually(t, "second attempt", logged(2))
	f.clk.Advance(Backoff[1])
	eventually(t, "third attempt", logged(3))
	time.Sleep(200 * time.Millisecond)
	if f.mail.count() != 1 {
		t.Fatalf("5 consecutive failed deliveries (the 5th loaded its account while the store was down): %d notices, want 1", f.mail.count())
	}

	// The notice went out once: 5 more failures in the same streak send none.
	failEvents(t, f, &round, 5)
	time.Sleep(200 * time.Millisecond)
	if f.mail.count() != 1 {
		t.Fatalf("the streak went on to 10: %d notices, want 1", f.mail.count())
	}
}
