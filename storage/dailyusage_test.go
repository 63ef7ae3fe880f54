package storage

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestDayUsageFormatPinned fails when the on-disk daily usage format or key
// changes: a change must bump the version byte.
func TestDayUsageFormatPinned(t *testing.T) {
	if got := hex.EncodeToString(MarshalDayUsage(nil, DayUsage{Used: 300, Lookups: 5})); got != "01ac0205" {
		t.Fatalf("day usage format changed: %s", got)
	}
	if got := hex.EncodeToString(dayUsageKey(nil, "acc_1", 20414)); got != "22"+"05616363"+"5f31"+"00004fbe" {
		t.Fatalf("day usage key changed: %s", got)
	}
	b := MarshalDayUsage(nil, DayUsage{Used: 1 << 33, Lookups: 7})
	if u, err := UnmarshalDayUsage(b); err != nil || u.Used != 1<<33 || u.Lookups != 7 {
		t.Fatalf("round trip: %+v %v", u, err)
	}
	for n := range b {
		if _, err := UnmarshalDayUsage(b[:n]); err == nil {
			t.Fatalf("truncated (%d bytes) decoded", n)
		}
	}
	if _, err := UnmarshalDayUsage([]byte{2, 0, 0}); err == nil {
		t.Fatal("unknown version decoded")
	}
}

func dayCounts(us []DayUsage) string {
	s := ""
	for _, u := range us {
		s += fmt.Sprintf("%d/%d ", u.Used, u.Lookups)
	}
	return s
}

func TestDailyUsageRidesApplyUsage(t *testing.T) {
	db, err := Open("d", Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	t0 := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	d0 := DayOf(t0)
	apply := func(deltas ...UsageDelta) {
		t.Helper()
		if err := db.ApplyUsage(deltas); err != nil {
			t.Fatal(err)
		}
	}
	m := MonthOf(t0)
	apply(UsageDelta{Account: "acc_a", Month: m, Day: d0, Counts: MonthCounts{Used: 1}},
		UsageDelta{Account: "acc_a", Month: m, Day: d0, Counts: MonthCounts{Used: 1}},
		UsageDelta{Account: "acc_a", Month: m, Day: d0 - 2, Counts: MonthCounts{Lookups: 1}},
		UsageDelta{Account: "acc_a0", Month: m, Day: d0, Counts: MonthCounts{Used: 5}},
		// Totals alone and counts without a day add to no day.
		UsageDelta{Account: "acc_a", Month: m, Day: d0 - 1, Totals: Totals{LimitHits: 1}},
		UsageDelta{Account: "acc_a", Month: m, Counts: MonthCounts{Used: 1}})
	apply(UsageDelta{Account: "acc_a", Month: m, Day: d0, Counts: MonthCounts{Used: 1, Lookups: 2}})
	got, err := db.DailyUsage("acc_a", d0-3, d0)
	if err != nil || dayCounts(got) != "0/0 0/1 0/0 3/2 " || got[3].Day != d0 || got[0].Day != d0-3 {
		t.Fatalf("days: %s %v", dayCounts(got), err)
	}
	if mc, _, _ := db.LoadUsage("acc_a", m); mc.Used != 4 || mc.Lookups != 3 {
		t.Fatalf("month counts: %+v", mc)
	}
	if got, _ := db.DailyUsage("acc_a0", d0, d0); dayCounts(got) != "5/0 " {
		t.Fatalf("neighbour: %s", dayCounts(got))
	}
	if got, _ := db.DailyUsage("acc_a", d0, d0-1); len(got) != 0 {
		t.Fatalf("empty range: %v", got)
	}

	// The first write of a day drops the account's days past retention.
	later := d0 + DailyUsageDays
	apply(UsageDelta{Account: "acc_a", Month: m, Day: later, Counts: MonthCounts{Used: 1}})
	if got, _ := db.DailyUsage("acc_a", d0-3, later); dayCounts(got[:4]) != "0/0 0/0 0/0 0/0 " || got[len(got)-1].Used != 1 {
		t.Fatalf("after retention: %s", dayCounts(got))
	}
	if got, _ := db.DailyUsage("acc_a0", d0, d0); dayCounts(got) != "5/0 " {
		t.Fatalf("retention touched a neighbour: %s", dayCounts(got))
	}
}

// TestDailyUsageCorrupt: a damaged day record fails the batch that would
// add to it (nothing of the batch is written) and the read, never a panic.
func TestDailyUsageCorrupt(t *testing.T) {
	db, err := Open("d", Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b := db.newBatch()
	_ = b.Set(dayUsageKey(nil, "acc_a", 100), []byte{1, 0xff}, nil)
	if err := db.commit(b); err != nil {
		t.Fatal(err)
	}
	if err := db.ApplyUsage([]UsageDelta{{Account: "acc_a", Month: 202611, Day: 100, Counts: MonthCounts{Used: 1}}}); err == nil {
		t.Fatal("added to a corrupt day record")
	}
	if mc, _, _ := db.LoadUsage("acc_a", 202611); mc.Used != 0 {
		t.Fatalf("the failed batch was partly written: %+v", mc)
	}
	if _, err := db.DailyUsage("acc_a", 99, 101); err == nil {
		t.Fatal("corrupt day listed")
	}
}

// FuzzUnmarshalDayUsage: stored day records are outside input to the decoder.
func FuzzUnmarshalDayUsage(f *testing.F) {
	f.Add(MarshalDayUsage(nil, DayUsage{Used: 3, Lookups: 1}))
	f.Add([]byte{1, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		u, err := UnmarshalDayUsage(b)
		if err != nil {
			return
		}
		if again := MarshalDayUsage(nil, u); !bytes.Equal(again, b) {
			if u2, err := UnmarshalDayUsage(again); err != nil || u2 != u {
				t.Fatalf("re-encoding changed %+v: %+v %v", u, u2, err)
			}
		}
	})
}
