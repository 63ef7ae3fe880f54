package storage

import (
	"errors"
	"reflect"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestAdoptSharesKeepsTheLargestPerOrigin(t *testing.T) {
	fs := vfs.NewMem()
	db, err := Open("d", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	err = db.AdoptShares([]OriginShare{
		{Origin: "n3", Account: "a", Month: 202611, Counts: MonthCounts{Used: 10, Lookups: 2, Warned: 1}, Totals: Totals{Evaluations: 40}},
		{Origin: "n4", Account: "a", Month: 202611, Counts: MonthCounts{Used: 5}, Totals: Totals{Evaluations: 5, LimitHits: 1}},
		// The same origin twice in one call: the larger counts win.
		{Origin: "n3", Account: "a", Month: 202611, Counts: MonthCounts{Used: 7, Lookups: 3, Warned: 2}, Totals: Totals{Evaluations: 30}},
		// Another account whose id starts with the first's.
		{Origin: "n3", Account: "ab", Month: 202611, Counts: MonthCounts{Used: 100}},
		{Origin: "n3", Account: "a", Month: 202610, Counts: MonthCounts{Used: 1000}},
		{Origin: "n5", Account: "a", Totals: Totals{Evaluations: 9}},
	})
	if err != nil {
		t.Fatal(err)
	}
	// An older hand-over again changes nothing.
	if err := db.AdoptShares([]OriginShare{{Origin: "n3", Account: "a", Month: 202611, Counts: MonthCounts{Used: 1}, Totals: Totals{Evaluations: 1}}}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err = Open("d", Options{FS: fs}); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	got, err := db.AdoptedShares("a", 202611)
	if err != nil {
		t.Fatal(err)
	}
	want := []OriginShare{
		{Origin: "n3", Account: "a", Month: 202611, Counts: MonthCounts{Used: 10, Lookups: 3, Warned: 3}, Totals: Totals{Evaluations: 40}},
		{Origin: "n4", Account: "a", Month: 202611, Counts: MonthCounts{Used: 5}, Totals: Totals{Evaluations: 5, LimitHits: 1}},
		{Origin: "n5", Account: "a", Month: 202611, Totals: Totals{Evaluations: 9}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("adopted shares of a:\n got %+v\nwant %+v", got, want)
	}
	// Adopted shares are not this node's own.
	if c, tot, err := db.LoadUsage("a", 202611); err != nil || c != (MonthCounts{}) || tot != (Totals{}) {
		t.Fatalf("own share after adopting: %+v %+v %v", c, tot, err)
	}
	if got, err := db.AdoptedShares("nobody", 202611); err != nil || len(got) != 0 {
		t.Fatalf("adopted shares of an unknown account: %+v %v", got, err)
	}
}

func TestAdoptSharesRefusesBadShares(t *testing.T) {
	db, err := Open("d", Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, s := range []OriginShare{
		{Account: "a", Month: 202611},
		{Origin: "n", Month: 202611},
		{Origin: "n", Account: "a", Month: 202613},
		{Origin: "n", Account: "a", Month: 202611, Counts: MonthCounts{Used: -1}},
		{Origin: "n", Account: "a", Totals: Totals{LimitHits: -1}},
	} {
		// A good share beside it is not stored either.
		err := db.AdoptShares([]OriginShare{{Origin: "n", Account: "good", Month: 202611, Counts: MonthCounts{Used: 1}}, s})
		if !errors.Is(err, errInvalidShare) {
			t.Fatalf("%+v: %v, want an invalid share", s, err)
		}
	}
	if got, err := db.AdoptedShares("good", 202611); err != nil || len(got) != 0 {
		t.Fatalf("a refused batch stored %+v (%v)", got, err)
	}
}

func TestExportSharesOwnAndAdopted(t *testing.T) {
	db, err := Open("d", Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.ApplyUsage([]UsageDelta{
		{Account: "a", Month: 202611, Counts: MonthCounts{Used: 3}, Totals: Totals{Evaluations: 3}},
		{Account: "a", Month: 202610, Counts: MonthCounts{Used: 50}},
		{Account: "old", Month: 202601, Counts: MonthCounts{Used: 8}, Totals: Totals{Evaluations: 8}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.AdoptShares([]OriginShare{
		{Origin: "n9", Account: "a", Month: 202611, Counts: MonthCounts{Used: 4}, Totals: Totals{Evaluations: 6}},
		{Origin: "n9", Account: "b", Month: 202605, Counts: MonthCounts{Used: 4}, Totals: Totals{Evaluations: 2}},
	}); err != nil {
		t.Fatal(err)
	}
	var got []OriginShare
	if err := db.ExportShares("me", []Month{202611}, func(s OriginShare) error { got = append(got, s); return nil }); err != nil {
		t.Fatal(err)
	}
	want := []OriginShare{
		{Origin: "me", Account: "a", Month: 202611, Counts: MonthCounts{Used: 3}, Totals: Totals{Evaluations: 3}},
		{Origin: "me", Account: "old", Totals: Totals{Evaluations: 8}},
		{Origin: "n9", Account: "a", Month: 202611, Counts: MonthCounts{Used: 4}, Totals: Totals{Evaluations: 6}},
		{Origin: "n9", Account: "b", Totals: Totals{Evaluations: 2}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("export:\n got %+v\nwant %+v", got, want)
	}
	// What is exported adopts elsewhere into the same sums.
	other, err := Open("e", Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.AdoptShares(got); err != nil {
		t.Fatal(err)
	}
	if s, err := other.AdoptedShares("a", 202611); err != nil || len(s) != 2 || s[0].Counts.Used+s[1].Counts.Used != 7 {
		t.Fatalf("re-adopted shares of a: %+v %v", s, err)
	}
	stop := errors.New("stop")
	if err := db.ExportShares("me", []Month{202611}, func(OriginShare) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("export did not stop on fn's error: %v", err)
	}
}

// TestAdoptSharesKeepsTheLatestHourlyWarning: a handed-over share's hourly
// warning times merge by max with what is stored (an older hand-over does
// not move them back), and a time before 1970 is refused as invalid.
func TestAdoptSharesKeepsTheLatestHourlyWarning(t *testing.T) {
	db, err := Open("d", Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, hw := range [][2]int64{{100, 0}, {50, 70}} {
		if err := db.AdoptShares([]OriginShare{{Origin: "n3", Account: "a", Totals: Totals{Evaluations: 1, HourWarned: hw}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.AdoptShares([]OriginShare{{Origin: "n3", Account: "a", Totals: Totals{HourWarned: [2]int64{-1, 0}}}}); !errors.Is(err, errInvalidShare) {
		t.Fatalf("a negative warning time: %v", err)
	}
	got, err := db.AdoptedShares("a", 202611)
	if err != nil || len(got) != 1 || got[0].Totals != (Totals{Evaluations: 1, HourWarned: [2]int64{100, 70}}) {
		t.Fatalf("adopted %+v %v", got, err)
	}
}
