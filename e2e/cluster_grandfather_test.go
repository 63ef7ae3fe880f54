package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// TestClusterGrandfatheringEndsAtTheOwnersClock: a charge runs at its
// owner's clock (docs/cluster.md), so its limits must be those of the
// owner's instant too. At the end of grandfathering (SPEC §8: "Accounts
// created before 2026-10-01 keep 1,000 checks/hour with no monthly cap
// until the end of 30 November 2026"), a node whose clock already reads
// 1 December asks the owner, whose clock still reads 30 November, to
// charge a grandfathered account that used 10,000 checks in November:
// that is a November check with no monthly cap, not one over December's
// 10,000 (a 429 monthly_quota_exceeded and a "this month's visitor checks
// are used up" mail to the owner). Each node in turn is the one ahead, so
// whichever owns the account, the others ask it.
func TestClusterGrandfatheringEndsAtTheOwnersClock(t *testing.T) {
	// No slices: the fill below must reach each hourly cap exactly.
	c := StartCluster(t, bin, ClusterOptions{Args: []string{"--cluster-lease-after", "0"}})
	a := c.Nodes[0].CreateAccount(t, map[string]any{"email": "old@example.com", "plan": "free", "created_at": "2026-09-01T00:00:00Z"})
	usageEverywhere(t, c.Nodes, a.LiveKey)
	setAll := func(at string) {
		for _, s := range c.Nodes {
			s.SetClock(t, at)
		}
	}
	// 10,000 counted checks in November: five hourly windows (two hours
	// apart) of 1,000 on the live key and 1,000 on the test key, which has
	// its own window and counts toward the month.
	for h := 14; h <= 22; h += 2 {
		setAll(fmt.Sprintf("2026-11-30T%02d:00:00Z", h))
		var wg sync.WaitGroup
		for i, s := range c.Nodes {
			for _, key := range []string{a.LiveKey, a.TestKey} {
				for range 2 { // 1,000 a key: 167 × 4 + 166 × 2
					n := 167
					if i == 2 {
						n = 166
					}
					wg.Go(func() {
						for range n {
							if r := evaluate(s, t, key, map[string]any{}, nil); r.Status != 200 {
								t.Errorf("November check at %02d:00: %d %s", h, r.Status, r.Body)
								return
							}
						}
					})
				}
			}
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
	}
	if got := monthUsed(t, c.Nodes[0], a.LiveKey); got != 10000 {
		t.Fatalf("month_used %d in November, want 10000", got)
	}
	for i, s := range c.Nodes {
		for j, o := range c.Nodes {
			if j == i {
				o.SetClock(t, "2026-12-01T00:00:05Z")
			} else {
				o.SetClock(t, "2026-11-30T23:59:30Z")
			}
		}
		for _, key := range []string{a.LiveKey, a.TestKey} {
			if r := evaluate(s, t, key, map[string]any{}, nil); r.Status != 200 {
				t.Fatalf("node %d ahead in December, the owner in November: %d %s", i+1, r.Status, r.Body)
			}
		}
	}
	for i, s := range c.Nodes {
		for _, m := range mails(t, s) {
			if strings.HasPrefix(m.Kind, "usage_monthly") {
				t.Fatalf("node %d sent %s at %s: %s", i+1, m.Kind, m.At, m.Body)
			}
		}
	}
	// The checks sent while another node was ahead are the owner's
	// November's; the two sent while the owner itself was ahead, its
	// December's. November's checks are not December's.
	setAll("2026-11-30T23:59:40Z")
	if u := c.Nodes[1].Do(t, Req{Path: "/v1/usage", Bearer: a.LiveKey}).JSON(t); num(t, u, "month_used") != 10004 || u["monthly_limit"] != nil {
		t.Fatalf("November usage: %v", u)
	}
	setAll("2026-12-01T00:00:10Z")
	for i, s := range c.Nodes {
		if r := evaluate(s, t, a.LiveKey, map[string]any{}, nil); r.Status != 200 {
			t.Fatalf("node %d in December: %d %s", i+1, r.Status, r.Body)
		}
	}
	u := c.Nodes[2].Do(t, Req{Path: "/v1/usage", Bearer: a.LiveKey}).JSON(t)
	if num(t, u, "month_used") != 2+3 || num(t, u, "monthly_limit") != 10000 || u["grandfathered_until"] != "2026-11-30T23:59:59Z" {
		t.Fatalf("December usage: %v", u)
	}
}

type mail struct {
	Kind string `json:"kind"`
	At   string `json:"at"`
	Body string `json:"body"`
}

func mails(t *testing.T, s *Server) []mail {
	t.Helper()
	r := s.Admin(t, "GET", "/admin/v1/mail", nil)
	var out []mail
	if r.Status != 200 || json.Unmarshal(r.Body, &out) != nil {
		t.Fatalf("mail outbox: %d %s", r.Status, r.Body)
	}
	return out
}
