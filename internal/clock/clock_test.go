package clock

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestOffsetMoves(t *testing.T) {
	c := NewOffset()
	want := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	now, err := c.Set(want)
	if err != nil || now.Sub(want).Abs() > time.Second {
		t.Fatalf("set: %v %v", now, err)
	}
	now, err = c.Advance(25 * time.Hour)
	if err != nil || now.Sub(want.Add(25*time.Hour)).Abs() > time.Second {
		t.Fatalf("advance: %v %v", now, err)
	}
	if now, err = c.Set(want.AddDate(-1, 0, 0)); err != nil || now.Year() != 2025 {
		t.Fatalf("set backwards: %v %v", now, err)
	}
}

// TestOffsetRejectsOverflow: moves past what the offset or the service's
// Unix-nanosecond counters can hold are refused and leave the clock alone.
func TestOffsetRejectsOverflow(t *testing.T) {
	c := NewOffset()
	base, _ := c.Set(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	for name, move := range map[string]func() (time.Time, error){
		"advance max":           func() (time.Time, error) { return c.Advance(math.MaxInt64) },
		"advance min":           func() (time.Time, error) { return c.Advance(math.MinInt64) },
		"advance past 2262":     func() (time.Time, error) { return c.Advance(250 * 365 * 24 * time.Hour) },
		"advance before 1970":   func() (time.Time, error) { return c.Advance(-60 * 365 * 24 * time.Hour) },
		"set year 9999":         func() (time.Time, error) { return c.Set(time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)) },
		"set year 1":            func() (time.Time, error) { return c.Set(time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)) },
		"set the first instant": func() (time.Time, error) { return c.Set(Latest) },
	} {
		if _, err := move(); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("%s: %v, want ErrOutOfRange", name, err)
		}
		if now := c.Now(); now.Sub(base) > time.Minute || now.Before(base) {
			t.Fatalf("%s moved the clock to %v", name, now)
		}
	}
	// Two large advances that each fit but together overflow the offset.
	if _, err := c.Advance(200 * 365 * 24 * time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Advance(200 * 365 * 24 * time.Hour); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("second advance: %v", err)
	}
}
