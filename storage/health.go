package storage

import (
	"encoding/binary"
	"fmt"
	"time"
)

// HealthDay is one UTC day of status probes: how many ran and how many found
// each service healthy.
type HealthDay struct {
	Day       time.Time // 00:00 UTC
	Samples   uint64
	APIOK     uint64
	StorageOK uint64
	AuthOK    uint64
	FeedsOK   uint64
	// AllOK counts the probes that found the API, storage and
	// authentication healthy together: the day's overall pct. It can be
	// below the smallest of their counts when they failed in different
	// probes.
	AllOK uint64
}

// Health record versions: 1 holds the five counters; 2 adds AllOK. A day
// whose AllOK is the smallest of the three counts (every day without
// failures in different probes) is written as version 1, byte for byte what
// the builds before version 2 wrote and read, and a version 1 record reads
// AllOK as that smallest count, the figure those builds reported.
const (
	healthVersion1 = 1
	healthVersion  = 2
)

// minOK is the smallest of the three counts the day's pct covers.
func (d *HealthDay) minOK() uint64 { return min(d.APIOK, d.StorageOK, d.AuthOK) }

func healthKey(day time.Time) []byte {
	k := make([]byte, 0, 5)
	k = append(k, prefixHealth)
	return binary.BigEndian.AppendUint32(k, uint32(day.Unix()/86400))
}

// MarshalHealth appends the binary form of d (the day is in the key).
func MarshalHealth(dst []byte, d *HealthDay) []byte {
	v := byte(healthVersion)
	if d.AllOK == d.minOK() {
		v = healthVersion1
	}
	dst = append(dst, v)
	for _, v := range [...]uint64{d.Samples, d.APIOK, d.StorageOK, d.AuthOK, d.FeedsOK} {
		dst = appendUvarint(dst, v)
	}
	if v == healthVersion1 {
		return dst
	}
	return appendUvarint(dst, d.AllOK)
}

// UnmarshalHealth decodes MarshalHealth output.
func UnmarshalHealth(b []byte) (HealthDay, error) {
	r := &reader{b: b}
	v := r.byte1()
	if r.err == nil && v != healthVersion && v != healthVersion1 {
		return HealthDay{}, fmt.Errorf("health version %d: %w", v, errCorrupt)
	}
	d := HealthDay{Samples: r.uvarint(), APIOK: r.uvarint(), StorageOK: r.uvarint(), AuthOK: r.uvarint(), FeedsOK: r.uvarint()}
	d.AllOK = d.minOK()
	if v == healthVersion {
		d.AllOK = r.uvarint()
		// No probe finds all three healthy more often than any one of them.
		if r.err == nil && d.AllOK > d.minOK() {
			r.err = errCorrupt
		}
	}
	r.end()
	if r.err != nil {
		return HealthDay{}, fmt.Errorf("decode health: %w", r.err)
	}
	return d, nil
}

// PutHealth writes one day (a whole value) and drops days before cut.
func (d *DB) PutHealth(cut time.Time, days ...*HealthDay) error {
	b := d.newBatch()
	for _, day := range days {
		_ = b.Set(healthKey(day.Day), MarshalHealth(nil, day), nil)
	}
	_ = b.DeleteRange([]byte{prefixHealth}, healthKey(cut), nil)
	return d.commit(b)
}

// Health reads the days from since on, oldest first.
func (d *DB) Health(since time.Time) ([]HealthDay, error) {
	it, err := d.newIter(healthKey(since), []byte{prefixHealth + 1})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []HealthDay
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.Value()
		if err != nil {
			break
		}
		h, err := UnmarshalHealth(v)
		if err != nil {
			return nil, err
		}
		k := it.Key()
		if len(k) != 5 {
			return nil, fmt.Errorf("health key %x: %w", k, errCorrupt)
		}
		h.Day = time.Unix(int64(binary.BigEndian.Uint32(k[1:]))*86400, 0).UTC()
		out = append(out, h)
	}
	if err := it.Err("iterate health"); err != nil {
		return nil, err
	}
	return out, nil
}
