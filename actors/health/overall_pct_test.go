package health

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/internal/clock"
	"github.com/fraudd/fraudd/storage"
)

// TestDayPctCountsProbesWithEverythingUp: a day's pct is the share of its
// probes that found the API, storage and authentication all healthy (the
// console reads it as "% of N probes"). With the API down for three probes
// and the store for three others out of ten, four probes found the service
// up: 40, not the 70 that the smallest per-service count gave. The figure
// survives a restart.
func TestDayPctCountsProbesWithEverythingUp(t *testing.T) {
	db, err := storage.Open("d", storage.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	t0 := time.Date(2026, 11, 20, 1, 0, 0, 0, time.UTC)
	clk := clock.NewOffset()
	clk.Set(t0)
	var n atomic.Int32 // probe number, 1 = the start probe
	m, err := New(quiet().Root, Config{DB: db, Clock: clk, Interval: time.Hour, Checks: Checks{
		Storage: func() error {
			if k := n.Add(1); k >= 5 && k <= 7 {
				return errors.New("disk")
			}
			return nil
		},
		Actors: func() []string {
			if k := n.Load(); k >= 2 && k <= 4 {
				return []string{"events"}
			}
			return nil
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 10; i++ {
		m.shards.Send(0, actors.Tick{Now: t0.Add(time.Duration(i) * time.Minute)})
	}
	r, err := m.Report(t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	today := r.History[len(r.History)-1]
	if today.Samples != 10 || *today.APIPct != 70 || *today.AuthPct != 70 || *today.Pct != 40 {
		t.Fatalf("today: samples %d pct %v api %v auth %v; want 10, 40, 70, 70", today.Samples, *today.Pct, *today.APIPct, *today.AuthPct)
	}
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
	m2, err := New(quiet().Root, Config{DB: db, Clock: clk, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Stop()
	r2, err := m2.Report(t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// The restart's own start probe found everything up: 5 of 11.
	if got := r2.History[len(r2.History)-1]; got.Samples != 11 || *got.Pct != 45.45 {
		t.Fatalf("after restart: samples %d pct %v; want 11, 45.45", got.Samples, *got.Pct)
	}
}
