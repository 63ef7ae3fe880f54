package webhook

import (
	"testing"
	"time"
)

// failEvents sends n events that fail every attempt and walks the clock
// through their retries, each step once the attempts are logged.
func failEvents(t *testing.T, f *fixture, round *int, n int) {
	t.Helper()
	*round++
	at := t0.Add(time.Duration(*round) * time.Millisecond)
	logged := func(attempt int) func() bool {
		return func() bool {
			ds, _ := f.db.Deliveries("acc_f", time.Time{}, 1000)
			c := 0
			for _, d := range ds {
				if d.EventAt.Equal(at) && d.Attempt == attempt {
					c++
				}
			}
			return c == n
		}
	}
	for i := 0; i < n; i++ {
		ev := threat("acc_f")
		ev.At = at
		f.svc.Notify(ev)
	}
	eventually(t, "first attempts", logged(1))
	f.clk.Advance(Backoff[0])
	eventually(t, "second attempts", logged(2))
	f.clk.Advance(Backoff[1])
	eventually(t, "third attempts", logged(3))
}

// TestStreakSurvivesRestart: SPEC §6, after 5 consecutive failed deliveries
// the owner is emailed: a restart between the 4th and the 5th keeps the
// streak (read back from the delivery log).
func TestStreakSurvivesRestart(t *testing.T) {
	f := newFixture(t, Config{AllowPrivate: true})
	rcv := newReceiver(t, 500)
	f.dir.set("acc_f", rcv.URL, "whsec_x")
	round := 0
	failEvents(t, f, &round, 4)
	f.restart(t)
	failEvents(t, f, &round, 1)
	time.Sleep(200 * time.Millisecond)
	if f.mail.count() != 1 {
		t.Fatalf("5 consecutive failed deliveries (restart after the 4th): %d notices, want 1", f.mail.count())
	}
}

// TestStreakNoticeOnceAcrossRestart: a streak already notified is not
// notified again after a restart inside it (no success in between).
func TestStreakNoticeOnceAcrossRestart(t *testing.T) {
	f := newFixture(t, Config{AllowPrivate: true})
	rcv := newReceiver(t, 500)
	f.dir.set("acc_f", rcv.URL, "whsec_x")
	round := 0
	failEvents(t, f, &round, 5)
	eventually(t, "notice", func() bool { return f.mail.count() == 1 })
	f.restart(t)
	failEvents(t, f, &round, 5)
	time.Sleep(200 * time.Millisecond)
	if f.mail.count() != 1 {
		t.Fatalf("one streak of 10 failed events with a restart inside: %d notices, want 1", f.mail.count())
	}
}
