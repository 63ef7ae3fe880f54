// Package clock is the single source of "now" for the service. Production uses
// the wall clock; `fraudd serve --test-clock` uses an Offset clock whose offset
// the admin API moves, so every time-dependent behaviour can be tested end to end.
package clock

import (
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

// Advance moves the clock forward (or back, for a negative d) and returns the new now.
func (o *Offset) Advance(d time.Duration) time.Time {
	o.offset.Add(int64(d))
	return o.Now()
}

// Set moves the clock so that Now reads t at this instant, and returns the new now.
func (o *Offset) Set(t time.Time) time.Time {
	o.offset.Store(int64(t.Sub(time.Now())))
	return o.Now()
}

// Fixed always answers the same instant; for unit tests and golden files.
type Fixed struct{ T time.Time }

// Now returns the fixed instant.
func (f Fixed) Now() time.Time { return f.T }
