package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Each device's global sightings (actors/events), which its collected events
// add up to: times_seen and first_seen of SPEC 2.2, across every customer.
// (A customer's own view of its devices is devicehist.go.)
//
//	sightings prefixDevice | period (uint16 BE, 90-day periods since 1970) | visitor hash
//
// A device's record lives in the period of its last sighting; a sighting in
// a later period moves it forward (LoadSightings looks in the current and
// the previous period), and PruneSightings drops every period before the
// previous one: a device unseen for 90 days becomes eligible, and is gone
// within 180.

// SightingsPeriod is the bucket length of device sightings.
const SightingsPeriod = 90 * 24 * time.Hour

const sightingsVersion = 1

// Sightings is one device's global sightings (SPEC 2.2 times_seen,
// first_seen): across every customer, unlike the per-customer device history
// of devicehist.go.
type Sightings struct {
	Visitor   string // the keyed visitor hash (binary or hex; at most MaxVisitorLen bytes)
	FirstSeen time.Time
	LastSeen  time.Time
	TimesSeen int64
}

// SightingsLapsed reports whether sightings last seen at last are older than
// LoadSightings reads as of now (before the previous period): pruned, or due
// to be, so a copy held in memory must not bring them back.
func SightingsLapsed(last, now time.Time) bool {
	p := periodOf(now)
	return p >= 1 && periodOf(last) < p-1
}

func periodOf(t time.Time) uint16 {
	d := uint32(DayOf(t)) / uint32(SightingsPeriod/(24*time.Hour))
	return uint16(min(d, 0xffff))
}

func sightingsKey(dst []byte, period uint16, visitor string) []byte {
	dst = append(dst, prefixDevice)
	dst = binary.BigEndian.AppendUint16(dst, period)
	return append(dst, visitor...)
}

// MarshalSightings appends the binary form of h (the visitor is in the key).
func MarshalSightings(dst []byte, h *Sightings) []byte {
	dst = append(dst, sightingsVersion)
	dst = appendTime(dst, h.FirstSeen)
	dst = appendTime(dst, h.LastSeen)
	return appendUvarint(dst, uint64(max(h.TimesSeen, 0)))
}

// UnmarshalSightings decodes MarshalSightings output.
func UnmarshalSightings(visitor string, b []byte) (Sightings, error) {
	r := &reader{b: b}
	if v := r.byte1(); r.err == nil && v != sightingsVersion {
		return Sightings{}, fmt.Errorf("sightings version %d: %w", v, errCorrupt)
	}
	h := Sightings{Visitor: visitor, FirstSeen: r.time(), LastSeen: r.time(), TimesSeen: int64(r.uvarint())}
	if r.err != nil || len(r.b) != 0 || h.TimesSeen < 0 {
		return Sightings{}, fmt.Errorf("decode sightings: %w", errCorrupt)
	}
	return h, nil
}

// LoadSightings reads a device's sightings as of now: from the current
// period, else the previous one. ok is false when the device has none.
func (d *DB) LoadSightings(visitor string, now time.Time) (h Sightings, ok bool, err error) {
	if len(visitor) > MaxVisitorLen {
		return h, false, errors.New("visitor hash too long")
	}
	p := periodOf(now)
	for _, q := range []uint16{p, p - 1} {
		if q > p { // wrapped below period 0
			break
		}
		v, err := d.get(sightingsKey(nil, q, visitor))
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return h, false, err
		}
		h, err = UnmarshalSightings(visitor, v)
		return h, err == nil, err
	}
	return h, false, nil
}

// PruneSightings deletes every sightings period before the previous one as of
// now.
func (d *DB) PruneSightings(now time.Time) error {
	p := periodOf(now)
	if p < 1 {
		return nil
	}
	lo := []byte{prefixDevice}
	hi := binary.BigEndian.AppendUint16([]byte{prefixDevice}, p-1)
	return d.deleteRange(lo, hi)
}
