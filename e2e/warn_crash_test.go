package e2e

import (
	"testing"
	"time"
)

// usageMails counts the outbox's mails of each kind.
func usageMails(s *Server, t *testing.T) map[string]int {
	t.Helper()
	var mail []map[string]any
	if err := jsonUnmarshal(s.Admin(t, "GET", "/admin/v1/mail", nil).Body, &mail); err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, m := range mail {
		n[m["kind"].(string)]++
	}
	return n
}

// TestUsageWarningNotRepeatedAfterACrash: SPEC §6 mails each hourly
// warning at most once per 24 hours and each monthly one once a month. The
// outbox record is synced as it is written, but the mark that a warning
// went out rides the charge's delta, written behind with the counts
// (README Durability, interval mode); a kill -9 before the group sync lost
// the mark (and the counts) but not the mail, so reaching the same
// thresholds again after the restart mailed every warning a second time.
func TestUsageWarningNotRepeatedAfterACrash(t *testing.T) {
	s := Start(t, bin, "--sync-interval", "10s")
	s.SetClock(t, "2026-11-20T10:00:00Z")
	a := s.CreateAccount(t, map[string]any{"email": "wc@example.com", "plan": "custom", "hourly_limit": 10, "monthly_limit": 10})
	kinds := []string{"usage_hourly_80", "usage_hourly_cap", "usage_monthly_80", "usage_monthly_cap"}
	reach := func(when string) {
		t.Helper()
		for i := 0; i < 10; i++ {
			if r := evaluate(s, t, a.LiveKey, map[string]any{}, nil); r.Status != 200 {
				t.Fatalf("%s: call %d: %d %s", when, i, r.Status, r.Body)
			}
		}
	}
	waitOne := func(when string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			n := usageMails(s, t)
			done := true
			for _, k := range kinds {
				if n[k] > 1 {
					t.Fatalf("%s: %d %s mails, want 1: %v", when, n[k], k, n)
				}
				done = done && n[k] == 1
			}
			if done {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: mails %v, want one of each of %v", when, n, kinds)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	reach("first")
	waitOne("first")

	s.Kill() // before the group sync: the counts and the marks are lost
	s.start()
	s.SetClock(t, "2026-11-20T10:30:00Z")
	reach("after a SIGKILL")
	time.Sleep(300 * time.Millisecond) // a mail that should not come would by now
	waitOne("after a SIGKILL")
}
