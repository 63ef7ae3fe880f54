package quota

import (
	"testing"
	"time"
)

func i64(v int64) *int64 { return &v }

func TestLimitsFor(t *testing.T) {
	before := time.Date(2026, 9, 30, 23, 59, 59, 0, time.UTC)
	after := GrandfatherCutoff
	oct := time.Date(2026, 10, 15, 12, 0, 0, 0, time.UTC)
	lastSecond := GrandfatheredUntil
	dec := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	N := NoLimit
	for _, c := range []struct {
		name        string
		plan        string
		h, m        *int64
		created     time.Time
		now         time.Time
		want        Limits
		wantUncaped bool
	}{
		{"free", "free", nil, nil, after, oct, Limits{Plan: "free", Hourly: 1000, Monthly: 10000, MonthlyLookups: 100000}, false},
		{"starter", "starter", nil, nil, after, oct, Limits{Plan: "starter", Hourly: 5000, Monthly: 50000, MonthlyLookups: 500000}, false},
		{"growth", "growth", nil, nil, after, oct, Limits{Plan: "growth", Hourly: 20000, Monthly: 250000, MonthlyLookups: 2500000}, false},
		{"scale", "scale", nil, nil, after, oct, Limits{Plan: "scale", Hourly: 50000, Monthly: 1000000, MonthlyLookups: 10000000}, false},
		{"public interest", "public_interest", i64(5), i64(5), before, oct, Limits{Plan: "public_interest", Hourly: N, Monthly: N, MonthlyLookups: N}, true},
		{"custom both", "custom", i64(300), i64(7000), after, oct, Limits{Plan: "custom", Hourly: 300, Monthly: 7000, MonthlyLookups: 70000}, false},
		{"custom no hourly", "custom", nil, i64(7000), after, oct, Limits{Plan: "custom", Hourly: N, Monthly: 7000, MonthlyLookups: 70000}, false},
		{"custom no monthly", "custom", i64(300), nil, after, oct, Limits{Plan: "custom", Hourly: 300, Monthly: N, MonthlyLookups: N}, false},
		{"custom none", "custom", nil, nil, after, oct, Limits{Plan: "custom", Hourly: N, Monthly: N, MonthlyLookups: N}, true},
		{"custom not grandfathered", "custom", i64(300), i64(7000), before, oct, Limits{Plan: "custom", Hourly: 300, Monthly: 7000, MonthlyLookups: 70000}, false},
		{"enterprise is custom", "enterprise", i64(1), i64(2), after, oct, Limits{Plan: "custom", Hourly: 1, Monthly: 2, MonthlyLookups: 20}, false},
		{"unknown is free", "platinum", nil, nil, after, oct, Limits{Plan: "free", Hourly: 1000, Monthly: 10000, MonthlyLookups: 100000}, false},
		{"grandfathered free", "free", nil, nil, before, oct, Limits{Plan: "free", Hourly: 1000, Monthly: N, MonthlyLookups: N, Grandfathered: GrandfatheredUntilBefore}, false},
		{"grandfathered free, extended", "free", nil, nil, before, GrandfatherExtended, Limits{Plan: "free", Hourly: 1000, Monthly: N, MonthlyLookups: N, Grandfathered: GrandfatheredUntil}, false},
		{"grandfathered through the last second", "free", nil, nil, before, lastSecond.Add(999 * time.Millisecond), Limits{Plan: "free", Hourly: 1000, Monthly: N, MonthlyLookups: N, Grandfathered: GrandfatheredUntil}, false},
		{"grandfathered last second", "free", nil, nil, before, lastSecond, Limits{Plan: "free", Hourly: 1000, Monthly: N, MonthlyLookups: N, Grandfathered: GrandfatheredUntil}, false},
		{"grandfathering over", "free", nil, nil, before, lastSecond.Add(time.Second), Limits{Plan: "free", Hourly: 1000, Monthly: 10000, MonthlyLookups: 100000, Grandfathered: GrandfatheredUntil}, false},
		{"grandfathering over dec", "starter", nil, nil, before, dec, Limits{Plan: "starter", Hourly: 5000, Monthly: 50000, MonthlyLookups: 500000, Grandfathered: GrandfatheredUntil}, false},
		{"grandfathering over next year", "growth", nil, nil, before, dec.AddDate(1, 0, 0), Limits{Plan: "growth", Hourly: 20000, Monthly: 250000, MonthlyLookups: 2500000, Grandfathered: GrandfatheredUntil}, false},
		{"created at cutoff, december", "free", nil, nil, after, dec, Limits{Plan: "free", Hourly: 1000, Monthly: 10000, MonthlyLookups: 100000}, false},
		{"grandfathered scale keeps its hourly", "scale", nil, nil, before, oct, Limits{Plan: "scale", Hourly: 50000, Monthly: N, MonthlyLookups: N, Grandfathered: GrandfatheredUntilBefore}, false},
		{"created at cutoff", "free", nil, nil, after, oct, Limits{Plan: "free", Hourly: 1000, Monthly: 10000, MonthlyLookups: 100000}, false},
	} {
		got := LimitsFor(c.plan, c.h, c.m, c.created, c.now)
		if got != c.want || got.Uncapped() != c.wantUncaped {
			t.Errorf("%s: LimitsFor = %+v (uncapped %v), want %+v (uncapped %v)", c.name, got, got.Uncapped(), c.want, c.wantUncaped)
		}
		// In force exactly while the monthly cap is lifted by it.
		if in := got.GrandfatheredAt(c.now); in != (!c.want.Grandfathered.IsZero() && c.want.Monthly == N) {
			t.Errorf("%s: GrandfatheredAt = %v", c.name, in)
		}
	}
}
