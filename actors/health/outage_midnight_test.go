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

// TestOutageAcrossMidnightSurvivesRestart: the failed probes of a store
// outage late in a day are stored with the next good probe, after midnight,
// so the day's figures survive a restart (they read 100% before).
func TestOutageAcrossMidnightSurvivesRestart(t *testing.T) {
	db, err := storage.Open("d", storage.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	d1 := time.Date(2026, 11, 20, 23, 0, 0, 0, time.UTC)
	clk := clock.NewOffset()
	clk.Set(d1)
	var failing atomic.Bool
	m, err := New(quiet().Root, Config{DB: db, Clock: clk, Interval: time.Hour, Checks: Checks{Storage: func() error {
		if failing.Load() {
			return errors.New("disk")
		}
		return nil
	}}})
	if err != nil {
		t.Fatal(err)
	}
	// start probe OK at 23:00; one more OK; then the store fails at 23:50.
	m.shards.Send(0, actors.Tick{Now: d1.Add(10 * time.Minute)})
	r, _ := m.Report(d1.Add(11 * time.Minute)) // barrier
	failing.Store(true)
	m.shards.Send(0, actors.Tick{Now: d1.Add(50 * time.Minute)})
	r, _ = m.Report(d1.Add(51 * time.Minute))
	// Back after midnight.
	failing.Store(false)
	m.shards.Send(0, actors.Tick{Now: d1.Add(70 * time.Minute)})
	r, _ = m.Report(d1.Add(71 * time.Minute))
	before := r.History[len(r.History)-2]
	if before.Samples != 3 || *before.Pct != 66.67 {
		t.Fatalf("before restart day 1: samples %d pct %v", before.Samples, *before.Pct)
	}
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
	clk.Set(d1.Add(72 * time.Minute))
	m2, err := New(quiet().Root, Config{DB: db, Clock: clk, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Stop()
	r2, _ := m2.Report(d1.Add(73 * time.Minute))
	after := r2.History[len(r2.History)-2]
	if after.Samples != before.Samples || *after.Pct != *before.Pct {
		t.Fatalf("day %s after restart: samples %d pct %v; before restart samples %d pct %v (the outage's probe was lost)",
			after.Day.Format("2006-01-02"), after.Samples, *after.Pct, before.Samples, *before.Pct)
	}
}
