package storage

import (
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestSightingsPeriods(t *testing.T) {
	db, err := Open("d", Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	t0 := time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
	h := &Sightings{Visitor: "vis1", FirstSeen: t0, LastSeen: t0, TimesSeen: 1}
	if err := db.WriteDevice(DeviceWrite{Sightings: []*Sightings{h}}); err != nil {
		t.Fatal(err)
	}
	// Seen again in the next period: found in the previous one, moved forward.
	t1 := t0.Add(SightingsPeriod + 24*time.Hour)
	got, ok, err := db.LoadSightings("vis1", t1)
	if err != nil || !ok || got.TimesSeen != 1 || !got.FirstSeen.Equal(t0) {
		t.Fatalf("load from previous period: %v %v %+v", err, ok, got)
	}
	got.LastSeen, got.TimesSeen = t1, 2
	if err := db.WriteDevice(DeviceWrite{Sightings: []*Sightings{&got}}); err != nil {
		t.Fatal(err)
	}
	if err := db.PruneSightings(t1.Add(SightingsPeriod)); err != nil {
		t.Fatal(err)
	}
	if got, ok, _ := db.LoadSightings("vis1", t1.Add(SightingsPeriod)); !ok || got.TimesSeen != 2 {
		t.Fatalf("moved record lost: %v %+v", ok, got)
	}
	// Unseen for two periods: pruned.
	later := t1.Add(2*SightingsPeriod + 24*time.Hour)
	if err := db.PruneSightings(later); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := db.LoadSightings("vis1", t1); ok {
		t.Fatal("sightings unseen for 180 days survived")
	}
	if _, _, err := db.LoadSightings(string(make([]byte, MaxVisitorLen+1)), t0); err == nil {
		t.Fatal("overlong visitor accepted")
	}
}
