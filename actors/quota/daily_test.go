package quota

import (
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestDailyCounts: every counted charge lands on its UTC day, in the same
// batch as the month's count; Daily lists n days ending today, zeros
// included.
func TestDailyCounts(t *testing.T) {
	db := openMem(t, vfs.NewMem())
	defer db.Close()
	c := New(quietSystem().Root, Config{Shards: 2, Store: db})
	defer c.Stop()
	l := custom(-1, -1)
	charge := func(at time.Time, kind Kind, monthly bool) {
		t.Helper()
		if r, err := c.Charge(Charge{Account: "acct", Kind: kind, Limits: l, Hourly: true, Monthly: monthly, Now: at}); err != nil || !r.Allowed {
			t.Fatalf("charge: %+v %v", r, err)
		}
	}
	charge(t0.Add(-49*time.Hour), Evaluate, true)
	charge(t0, Evaluate, true)
	charge(t0, Evaluate, true)
	charge(t0, Lookup, true)
	charge(t0, Evaluate, false) // a test token: hourly only, no day
	days, err := c.Daily("acct", t0, 4)
	if err != nil {
		t.Fatal(err)
	}
	got := ""
	for _, d := range days {
		got += fmt.Sprintf("%s %d/%d ", d.Day.Format(time.DateOnly), d.Used, d.Lookups)
	}
	if want := "2026-12-07 0/0 2026-12-08 1/0 2026-12-09 0/0 2026-12-10 2/1 "; got != want {
		t.Fatalf("days: %s, want %s", got, want)
	}
	mem := New(quietSystem().Root, Config{Shards: 1})
	defer mem.Stop()
	if days, err := mem.Daily("acct", t0, 30); err != nil || len(days) != 30 || days[29].Used != 0 {
		t.Fatalf("memory only: %d %v", len(days), err)
	}
}
