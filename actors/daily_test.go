package actors

import (
	"errors"
	"testing"
	"time"

	"github.com/fraudd/fraudd/internal/clock"
)

func TestDailyRunsOncePerDay(t *testing.T) {
	clk := clock.NewOffset()
	clk.Set(time.Date(2026, 11, 22, 23, 0, 0, 0, time.UTC))
	runs := make(chan time.Time, 16)
	fail := true
	var d Daily
	errs := make(chan error, 16)
	d.Start(clk, time.Millisecond, func(now time.Time) error {
		if fail {
			fail = false
			return errors.New("disk")
		}
		runs <- now
		return nil
	}, func(err error) { errs <- err })
	defer d.Stop()
	<-errs // the first attempt failed: it is retried at the next check
	first := <-runs
	if first.Day() != 22 {
		t.Fatalf("first run on %v", first)
	}
	select {
	case r := <-runs:
		t.Fatalf("ran twice on one day: %v", r)
	case <-time.After(30 * time.Millisecond):
	}
	clk.Advance(2 * time.Hour) // the next UTC day
	if r := <-runs; r.Day() != 23 {
		t.Fatalf("next run on %v", r)
	}
}
