package quota

import (
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestCollectBudgetFor(t *testing.T) {
	at := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	created := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	hourly, monthly := int64(100), int64(300_000)
	for _, c := range []struct {
		name   string
		l      Limits
		events int64
	}{
		{"free", LimitsFor(PlanFree, nil, nil, created, at), 3_333},
		{"starter", LimitsFor(PlanStarter, nil, nil, created, at), 16_666},
		{"growth", LimitsFor(PlanGrowth, nil, nil, created, at), 83_333},
		{"scale", LimitsFor(PlanScale, nil, nil, created, at), 333_333},
		{"grandfathered", LimitsFor(PlanFree, nil, nil, created.AddDate(0, -2, 0), created), 24_000},
		{"custom, hourly only", LimitsFor(PlanCustom, &hourly, nil, created, at), 2_400},
		{"custom, small month, big hour", LimitsFor(PlanCustom, &monthly, &hourly, created, at), 300_000},
		{"public interest", LimitsFor(PlanPublicInterest, nil, nil, created, at), CollectCeilingEvents},
	} {
		b := CollectBudgetFor(c.l)
		if b.Events != c.events || b.Bytes != c.events*CollectBytesPerEvent {
			t.Errorf("%s: %+v, want %d events", c.name, b, c.events)
		}
	}
}

// TestCollectBudget: exactly the budget is admitted, by events or by bytes
// whichever runs out first; the refusal waits until 00:00 UTC; the next day
// starts afresh; and an idle sweep does not forget the day's counts.
func TestCollectBudget(t *testing.T) {
	db := openMem(t, vfs.NewMem())
	defer db.Close()
	c := New(quietSystem().Root, Config{Shards: 2, Store: db, IdleAfter: time.Hour})
	defer c.Stop()
	now := time.Date(2026, 12, 5, 20, 0, 0, 0, time.UTC)
	take := func(acct string, b CollectBudget, n int64, at time.Time) CollectResult {
		t.Helper()
		r, err := c.Collect(Collect{Account: acct, Budget: b, Bytes: n, Now: at})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	ev := CollectBudget{Events: 5, Bytes: 1 << 20}
	for i := 0; i < 5; i++ {
		if r := take("a", ev, 100, now); !r.Allowed {
			t.Fatalf("event %d refused", i)
		}
	}
	if r := take("a", ev, 100, now.Add(30*time.Minute)); r.Allowed || r.RetryAfter != 3*3600+1800 {
		t.Fatalf("sixth event: %+v", r)
	}
	// Idle for longer than IdleAfter, still the same day: the counts stay.
	c.Sweep(now.Add(2 * time.Hour))
	if n := c.resident(); n != 1 {
		t.Fatalf("%d accounts resident after the sweep, want the collecting one", n)
	}
	if r := take("a", ev, 100, now.Add(3*time.Hour+59*time.Minute+59*time.Second)); r.Allowed || r.RetryAfter != 1 {
		t.Fatalf("after a sweep: %+v", r)
	}
	if r := take("a", ev, 100, now.Add(4*time.Hour)); !r.Allowed {
		t.Fatalf("next day: %+v", r)
	}

	by := CollectBudget{Events: 1000, Bytes: 1000}
	if r := take("b", by, 600, now); !r.Allowed {
		t.Fatal("first 600 bytes refused")
	}
	if r := take("b", by, 401, now); r.Allowed {
		t.Fatal("1,001 bytes admitted")
	}
	if r := take("b", by, 400, now); !r.Allowed {
		t.Fatal("exactly 1,000 bytes refused")
	}
	if r := take("b", by, 1, now); r.Allowed {
		t.Fatal("a byte past the budget admitted")
	}
	// Accounts are apart.
	if r := take("c", by, 1000, now); !r.Allowed {
		t.Fatal("another account refused")
	}
}
