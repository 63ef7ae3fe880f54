package webhook

import (
	"sync"
	"testing"
	"time"

	"github.com/fraudd/fraudd/actors/mailer"
	"github.com/fraudd/fraudd/storage"
)

// streakAtSend is a Mailer that notes, at each Send, how many failed
// events the account's delivery log holds.
type streakAtSend struct {
	db      *storage.DB
	mu      sync.Mutex
	streaks []int
}

func (s *streakAtSend) Send(mailer.Message) {
	ds, _ := s.db.Deliveries("acc_f", time.Time{}, 1000)
	n := 0
	for _, d := range ds {
		if d.Attempt >= MaxAttempts && (d.Error != "" || d.StatusCode < 200 || d.StatusCode > 299) {
			n++
		}
	}
	s.mu.Lock()
	s.streaks = append(s.streaks, n)
	s.mu.Unlock()
}

// TestStreakNoticeAfterItsDeliveryIsLogged: the failure notice is handed
// to the mailer only once the attempt that completed the streak is in the
// delivery log. The mailer's outbox record is synced, but the delivery log
// is written behind (commitNoSync): logged after the notice, a kill -9
// before the group sync could keep the mail and lose the 5th failure, and
// the restart read back a streak of 4 (storedStreak), so the next failed
// event mailed the owner a second time for the same streak (README
// Webhooks: "emailed once … until a delivery succeeds again"). Logged
// first, the mail's synced commit makes it durable too.
func TestStreakNoticeAfterItsDeliveryIsLogged(t *testing.T) {
	f := newFixture(t, Config{AllowPrivate: true})
	m := &streakAtSend{db: f.db}
	f.cfg.Mail = m
	f.restart(t)
	rcv := newReceiver(t, 500)
	f.dir.set("acc_f", rcv.URL, "whsec_x")
	round := 0
	failEvents(t, f, &round, FailureStreak)
	eventually(t, "notice", func() bool { m.mu.Lock(); defer m.mu.Unlock(); return len(m.streaks) == 1 })
	if m.streaks[0] != FailureStreak {
		t.Fatalf("failed events in the delivery log when the notice was sent: %d, want %d", m.streaks[0], FailureStreak)
	}
}
