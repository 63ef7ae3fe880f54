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
}

const healthVersion = 1

func healthKey(day time.Time) []byte {
	k := make([]byte, 0, 5)
	k = append(k, prefixHealth)
	return binary.BigEndian.AppendUint32(k, uint32(day.Unix()/86400))
}

// MarshalHealth appends the binary form of d (the day is in the key).
func MarshalHealth(dst []byte, d *HealthDay) []byte {
	dst = append(dst, healthVersion)
	for _, v := range [...]uint64{d.Samples, d.APIOK, d.StorageOK, d.AuthOK, d.FeedsOK} {
		dst = appendUvarint(dst, v)
	}
	return dst
}

// UnmarshalHealth decodes MarshalHealth output.
func UnmarshalHealth(b []byte) (HealthDay, error) {
	r := &reader{b: b}
	if v := r.byte1(); r.err == nil && v != healthVersion {
		return HealthDay{}, fmt.Errorf("health version %d: %w", v, errCorrupt)
	}
	d := HealthDay{Samples: r.uvarint(), APIOK: r.uvarint(), StorageOK: r.uvarint(), AuthOK: r.uvarint(), FeedsOK: r.uvarint()}
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
