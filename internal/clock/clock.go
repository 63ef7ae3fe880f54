// Package clock is the single source of "now" for the service. Production uses
// the wall clock; `fraudd serve --test-clock` uses an Offset clock whose offset
// the admin API moves, so every time-dependent behaviour can be tested end to end.
package clock

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// Clock tells the time. Everything that needs "now" takes a Clock (or a time
// stamped once per request from one) instead of calling time.Now itself.
type Clock interface {
	Now() time.Time
}

// Real is the wall clock.
type Real struct{}

// Now returns the wall-clock time in UTC.
func (Real) Now() time.Time { return time.Now().UTC() }

// The range an Offset clock may be moved to. Stored records and limiters keep
// time as Unix nanoseconds in an int64, which ends in April 2262; a clock
// outside the range would wrap those counters around instead of failing.
var (
	Earliest = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	Latest   = time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC)
)

// ErrOutOfRange is returned when a move would take the clock outside
// [Earliest, Latest) or overflow its offset.
var ErrOutOfRange = errors.New("clock would leave the supported range")

// Offset is the wall clock shifted by an adjustable offset. It keeps running
// from wherever it was set; Set may move it backwards.
type Offset struct {
	offset atomic.Int64 // nanoseconds added to the wall clock
}

// NewOffset returns an Offset clock that starts at the wall-clock time.
func NewOffset() *Offset { return &Offset{} }

// Now returns the wall-clock time plus the offset, in UTC.
func (o *Offset) Now() time.Time {
	return time.Now().Add(time.Duration(o.offset.Load())).UTC()
}

// Advance moves the clock forward (or back, for a negative d) and returns the
// new now. A move that would overflow the offset or leave [Earliest, Latest)
// changes nothing and returns ErrOutOfRange.
func (o *Offset) Advance(d time.Duration) (time.Time, error) {
	for {
		old := o.offset.Load()
		next := old + int64(d)
		// Signed overflow: both operands share a sign the sum lacks.
		if (d > 0 && next < old) || (d < 0 && next > old) {
			return time.Time{}, fmt.Errorf("advance by %s: %w", d, ErrOutOfRange)
		}
		if err := inRange(time.Now().Add(time.Duration(next))); err != nil {
			return time.Time{}, fmt.Errorf("advance by %s: %w", d, err)
		}
		if o.offset.CompareAndSwap(old, next) {
			return o.Now(), nil
		}
	}
}

// Set moves the clock so that Now reads t at this instant, and returns the new
// now. A t outside [Earliest, Latest) changes nothing and returns ErrOutOfRange
// (time.Time.Sub would saturate instead, leaving the clock somewhere else).
func (o *Offset) Set(t time.Time) (time.Time, error) {
	if err := inRange(t); err != nil {
		return time.Time{}, fmt.Errorf("set %s: %w", t.UTC().Format(time.RFC3339), err)
	}
	o.offset.Store(int64(t.Sub(time.Now())))
	return o.Now(), nil
}

func inRange(t time.Time) error {
	if t.Before(Earliest) || !t.Before(Latest) {
		return ErrOutOfRange
	}
	return nil
}

// Fixed always answers the same instant; for unit tests and golden files.
type Fixed struct{ T time.Time }

// Now returns the fixed instant.
func (f Fixed) Now() time.Time { return f.T }
