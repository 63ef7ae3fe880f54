package storage

import (
	"encoding/hex"
	"math"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestUsageMonthOf(t *testing.T) {
	for _, c := range []struct {
		t     time.Time
		m     Month
		start string
		end   string
	}{
		{time.Date(2026, 11, 30, 23, 59, 59, 0, time.UTC), 202611, "2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z"},
		{time.Date(2026, 12, 31, 23, 0, 0, 0, time.UTC), 202612, "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"},
		{time.Date(2027, 1, 1, 0, 30, 0, 0, time.FixedZone("x", 3600)), 202612, "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"},
	} {
		if got := MonthOf(c.t); got != c.m {
			t.Errorf("MonthOf(%v) = %d, want %d", c.t, got, c.m)
		}
		if s := c.m.Start().Format(time.RFC3339); s != c.start {
			t.Errorf("%d.Start = %s, want %s", c.m, s, c.start)
		}
		if e := c.m.End().Format(time.RFC3339); e != c.end {
			t.Errorf("%d.End = %s, want %s", c.m, e, c.end)
		}
	}
}

// TestUsageFormatPinned fails when the on-disk usage format or key schema
// changes. A change must bump the version byte and keep decoding old records.
func TestUsageFormatPinned(t *testing.T) {
	for _, c := range []struct{ name, got, want string }{
		{"month counts", hex.EncodeToString(MarshalMonthCounts(nil, MonthCounts{Used: 300, Lookups: 5, Warned: 3})), "01ac020503"},
		{"zero counts", hex.EncodeToString(MarshalMonthCounts(nil, MonthCounts{})), "01000000"},
		{"totals", hex.EncodeToString(MarshalTotals(nil, Totals{Evaluations: 1 << 20, LimitHits: 2})), "0180804002"},
		// Version 2 only once an hourly warning was sent: 1, then 0 (never).
		{"totals warned", hex.EncodeToString(MarshalTotals(nil, Totals{Evaluations: 1 << 20, LimitHits: 2, HourWarned: [2]int64{1, 0}})), "02808040020100"},
		{"usage key", hex.EncodeToString(usageKey(nil, "acc_1", 202611)), "2005616363" + "5f31" + "00031773"},
		{"totals key", hex.EncodeToString(totalsKey(nil, "acc_1")), "216163635f31"},
	} {
		if c.got != c.want {
			t.Errorf("%s format changed:\n got %s\nwant %s", c.name, c.got, c.want)
		}
	}
}

func TestUsageCodecRoundTrip(t *testing.T) {
	c := MonthCounts{Used: 1234567, Lookups: 89, Warned: 0x0f}
	b := MarshalMonthCounts(nil, c)
	if got, err := UnmarshalMonthCounts(b); err != nil || got != c {
		t.Fatalf("month counts: %+v %v", got, err)
	}
	for n := range b {
		if _, err := UnmarshalMonthCounts(b[:n]); err == nil {
			t.Fatalf("truncated month counts (%d bytes) decoded", n)
		}
	}
	tt := Totals{Evaluations: 99, LimitHits: 1 << 40}
	b = MarshalTotals(nil, tt)
	if got, err := UnmarshalTotals(b); err != nil || got != tt {
		t.Fatalf("totals: %+v %v", got, err)
	}
	for n := range b {
		if _, err := UnmarshalTotals(b[:n]); err == nil {
			t.Fatalf("truncated totals (%d bytes) decoded", n)
		}
	}
	if _, err := UnmarshalTotals([]byte{9, 0, 0}); err == nil {
		t.Fatal("unknown version decoded")
	}
	tt.HourWarned = [2]int64{time.Date(2026, 11, 22, 12, 0, 0, 1, time.UTC).UnixNano(), math.MaxInt64}
	b = MarshalTotals(nil, tt)
	if got, err := UnmarshalTotals(b); err != nil || got != tt {
		t.Fatalf("totals with hourly warnings: %+v %v", got, err)
	}
	for n := range b {
		if _, err := UnmarshalTotals(b[:n]); err == nil {
			t.Fatalf("truncated totals (%d bytes) decoded", n)
		}
	}
	for name, bad := range map[string][]byte{
		"time past int64":  append(MarshalTotals(nil, Totals{})[:0:0], 2, 0, 0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0),
		"trailing bytes":   append(MarshalTotals(nil, tt), 0),
		"one time missing": {2, 1, 1, 5},
	} {
		if got, err := UnmarshalTotals(bad); err == nil {
			t.Errorf("%s: decoded as %+v", name, got)
		}
	}
}

// TestUsageOldTotalsRecord: a totals record written before the hourly
// warning times (version 1, as the builds before them wrote it) reads
// as never warned, and an hourly warning stored over it keeps its counts.
func TestUsageOldTotalsRecord(t *testing.T) {
	old, _ := hex.DecodeString("0180804002") // version 1: 1<<20 evaluations, 2 limit hits
	got, err := UnmarshalTotals(old)
	if err != nil || got != (Totals{Evaluations: 1 << 20, LimitHits: 2}) {
		t.Fatalf("version 1 totals: %+v %v", got, err)
	}
	db, err := Open("d", Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b := db.newBatch()
	_ = b.Set(totalsKey(nil, "a"), old, nil)
	if err := db.commit(b); err != nil {
		t.Fatal(err)
	}
	if _, tot, err := db.LoadUsage("a", 202611); err != nil || tot != (Totals{Evaluations: 1 << 20, LimitHits: 2}) {
		t.Fatalf("load of a version 1 record: %+v %v", tot, err)
	}
	at := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC).UnixNano()
	if err := db.ApplyUsage([]UsageDelta{{Account: "a", Totals: Totals{Evaluations: 1, HourWarned: [2]int64{at, 0}}}}); err != nil {
		t.Fatal(err)
	}
	if _, tot, err := db.LoadUsage("a", 202611); err != nil || tot != (Totals{Evaluations: 1<<20 + 1, LimitHits: 2, HourWarned: [2]int64{at, 0}}) {
		t.Fatalf("load after a warning: %+v %v", tot, err)
	}
}

func TestUsageApplyAndReopen(t *testing.T) {
	fs := vfs.NewMem()
	db, err := Open("d", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	if c, tot, err := db.LoadUsage("a", 202611); err != nil || c != (MonthCounts{}) || tot != (Totals{}) {
		t.Fatalf("empty load: %+v %+v %v", c, tot, err)
	}
	err = db.ApplyUsage([]UsageDelta{
		{Account: "a", Month: 202611, Counts: MonthCounts{Used: 1}, Totals: Totals{Evaluations: 1}},
		{Account: "a", Month: 202611, Counts: MonthCounts{Lookups: 2, Warned: 1}},
		{Account: "a", Month: 202612, Counts: MonthCounts{Used: 7}},
		{Account: "a", Totals: Totals{LimitHits: 3}},
		{Account: "ab", Month: 202611, Counts: MonthCounts{Used: 5, Warned: 4}},
		{Account: "zero"},
		// Hourly warning times merge by max, in one call and across calls.
		{Account: "w", Totals: Totals{HourWarned: [2]int64{50, 7}}},
		{Account: "w", Totals: Totals{HourWarned: [2]int64{40, 9}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.ApplyUsage([]UsageDelta{{Account: "a", Month: 202611, Counts: MonthCounts{Used: 10, Warned: 2}, Totals: Totals{Evaluations: 10}},
		{Account: "w", Totals: Totals{Evaluations: 1, HourWarned: [2]int64{30, 60}}}}); err != nil {
		t.Fatal(err)
	}
	if err := db.ApplyUsage(nil); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open("d", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, w := range []struct {
		acct string
		m    Month
		c    MonthCounts
		t    Totals
	}{
		{"a", 202611, MonthCounts{Used: 11, Lookups: 2, Warned: 3}, Totals{Evaluations: 11, LimitHits: 3}},
		{"a", 202612, MonthCounts{Used: 7}, Totals{Evaluations: 11, LimitHits: 3}},
		{"ab", 202611, MonthCounts{Used: 5, Warned: 4}, Totals{}},
		{"zero", 202611, MonthCounts{}, Totals{}},
		{"w", 202611, MonthCounts{}, Totals{Evaluations: 1, HourWarned: [2]int64{50, 60}}},
	} {
		c, tot, err := db.LoadUsage(w.acct, w.m)
		if err != nil || c != w.c || tot != w.t {
			t.Errorf("LoadUsage(%q, %d) = %+v %+v %v, want %+v %+v", w.acct, w.m, c, tot, err, w.c, w.t)
		}
	}
}

// BenchmarkUsageApply measures one group of 256 deltas over 64 accounts on
// the real filesystem, synced before it returns (strict: the fsync
// dominates) or left to the group sync (interval).
func BenchmarkUsageApply(b *testing.B) {
	for _, mode := range []Durability{Strict, Interval} {
		b.Run(mode.String(), func(b *testing.B) {
			db, err := Open(b.TempDir(), Options{Durability: mode})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			deltas := make([]UsageDelta, 256)
			for i := range deltas {
				deltas[i] = UsageDelta{Account: string(rune('a'+i%64)) + "cct", Month: 202611,
					Counts: MonthCounts{Used: 1}, Totals: Totals{Evaluations: 1}}
			}
			b.ResetTimer()
			for range b.N {
				if err := db.ApplyUsage(deltas); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*len(deltas))/b.Elapsed().Seconds(), "deltas/s")
		})
	}
}

func TestWriteStatsCount(t *testing.T) {
	db, err := Open("w", Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	before := db.WriteStats()
	m := MonthOf(time.Date(2026, 11, 3, 0, 0, 0, 0, time.UTC))
	if err := db.ApplyUsage([]UsageDelta{
		{Account: "a", Month: m, Counts: MonthCounts{Used: 1}, Totals: Totals{Evaluations: 1}},
		{Account: "a", Month: m, Counts: MonthCounts{Used: 1}, Totals: Totals{Evaluations: 1}},
		{Account: "b", Month: m, Totals: Totals{LimitHits: 1}},
	}); err != nil {
		t.Fatal(err)
	}
	got := db.WriteStats()
	if d := got.Commits - before.Commits; d != 1 {
		t.Errorf("commits +%d, want 1 (one batch)", d)
	}
	if d := got.Keys - before.Keys; d != 3 {
		t.Errorf("keys +%d, want 3 (a's month and totals, b's totals)", d)
	}
}
