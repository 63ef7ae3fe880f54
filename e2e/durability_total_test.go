package e2e

import (
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"
)

// TestCrashStrictKeepsDegradedTotals: in strict mode total_evaluations after
// a SIGKILL covers every acknowledged evaluation that counts toward it,
// also a degraded one (no token) that is not the bare allow (here: a
// disposable email, answered review), whose total is counted after
// scoring. It was sent fire-and-forget and a kill right after the answer
// lost it: README Durability, strict: "a crash loses nothing that was
// acknowledged", for billing from total_evaluations too.
func TestCrashStrictKeepsDegradedTotals(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	s := Start(t, bin, "--durability", "strict")
	a := s.CreateAccount(t, map[string]any{"email": "strict-total@example.com", "plan": "public_interest"})
	var acked, unanswered atomic.Int64
	killUnderLoad(s, time.Now(), 8, time.Duration(300+rand.IntN(500))*time.Millisecond, func(w, i int) bool {
		r, err := s.try(Req{Method: "POST", Path: "/v1/evaluate", Bearer: a.LiveKey, Body: map[string]any{"email": "x@mailinator.com"}})
		if err != nil {
			unanswered.Add(1)
			return false
		}
		if r.Status == 200 {
			acked.Add(1)
		}
		return true
	})
	if acked.Load() == 0 {
		t.Fatal("no evaluation acknowledged before the kill")
	}
	s.start()
	u := s.Do(t, Req{Path: "/v1/usage", Bearer: a.LiveKey}).JSON(t)
	total, used := num(t, u, "total_evaluations"), num(t, u, "month_used")
	n, in := acked.Load(), unanswered.Load()
	if total < n || total > n+in || used < n || used > n+in {
		t.Fatalf("strict: total_evaluations %d, month_used %d after SIGKILL; %d acknowledged, %d unanswered", total, used, n, in)
	}
	t.Logf("strict: acknowledged %d, total_evaluations %d, month_used %d (%d unanswered)", n, total, used, in)
}
