package accounts

import (
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/internal/clock"
)

// TestPatchLimitsFollowThePlanAtWrite: the admin API checks a patch's
// limits against the plan it read before the write, and two operators'
// patches can cross between that read and the actor's write. A limit
// checked against a custom plan that another patch has since made a fixed
// one must not be stored on it (a figure shown that nothing enforces,
// enforced again on the next switch to custom), and a fixed plan set while
// another patch made the account custom must drop the limits it brought.
func TestPatchLimitsFollowThePlanAtWrite(t *testing.T) {
	s, db := start(t, vfs.NewMem(), clock.NewOffset())
	defer func() { s.Stop(); db.Close() }()
	n100, n5 := int64(100), int64(5)
	c, err := s.Create(NewAccount{Email: "c@b.co", Plan: "custom", HourlyLimit: &n100, MonthlyLimit: &n100})
	if err != nil {
		t.Fatal(err)
	}
	id := c.View.ID
	// Operator 1: {"plan": "starter"} (read custom: drops the limits).
	starter := "starter"
	var none *int64
	if _, err := s.Update(id, Patch{Plan: &starter, HourlyLimit: &none, MonthlyLimit: &none}); err != nil {
		t.Fatal(err)
	}
	// Operator 2: {"hourly_limit": 5}, checked against the custom plan it read.
	lim := &n5
	if _, err := s.Update(id, Patch{HourlyLimit: &lim}); !errors.Is(err, ErrConflict) {
		t.Fatalf("a limit patched onto a plan that is no longer custom: %v, want ErrConflict", err)
	}
	if v := s.Get(id); v.Plan != "starter" || v.HourlyLimit != nil || v.MonthlyLimit != nil {
		t.Fatalf("after the refused patch: plan %s hourly %v monthly %v", v.Plan, v.HourlyLimit, v.MonthlyLimit)
	}

	// The other crossing: {"plan": "custom", "hourly_limit": 5} lands
	// between the read and the write of {"plan": "growth"}, which read
	// starter and so dropped nothing.
	custom := "custom"
	if _, err := s.Update(id, Patch{Plan: &custom, HourlyLimit: &lim}); err != nil {
		t.Fatal(err)
	}
	growth := "growth"
	v, err := s.Update(id, Patch{Plan: &growth})
	if err != nil {
		t.Fatal(err)
	}
	if v.Plan != "growth" || v.HourlyLimit != nil || v.MonthlyLimit != nil {
		t.Fatalf("a fixed plan kept the custom limits: plan %s hourly %v monthly %v", v.Plan, v.HourlyLimit, v.MonthlyLimit)
	}
}
