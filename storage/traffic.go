package storage

import (
	"encoding/binary"
	"fmt"
	"time"
)

// TrafficCounts are the threat-feed counters of one time bucket.
type TrafficCounts struct {
	Total, Threats, VPN, Proxy, DCH uint64
}

// TrafficBucket is one stored bucket.
type TrafficBucket struct {
	Start  time.Time
	Counts TrafficCounts
}

const trafficVersion = 1

func trafficKey(start time.Time) []byte {
	k := make([]byte, 0, 9)
	k = append(k, prefixTraffic)
	return binary.BigEndian.AppendUint64(k, uint64(start.Unix()))
}

// MarshalTraffic appends the binary form of c.
func MarshalTraffic(dst []byte, c TrafficCounts) []byte {
	dst = append(dst, trafficVersion)
	for _, v := range [...]uint64{c.Total, c.Threats, c.VPN, c.Proxy, c.DCH} {
		dst = appendUvarint(dst, v)
	}
	return dst
}

// UnmarshalTraffic decodes MarshalTraffic output.
func UnmarshalTraffic(b []byte) (TrafficCounts, error) {
	r := &reader{b: b}
	if v := r.byte1(); r.err == nil && v != trafficVersion {
		return TrafficCounts{}, fmt.Errorf("traffic version %d: %w", v, errCorrupt)
	}
	c := TrafficCounts{Total: r.uvarint(), Threats: r.uvarint(), VPN: r.uvarint(), Proxy: r.uvarint(), DCH: r.uvarint()}
	r.end()
	if r.err != nil {
		return TrafficCounts{}, fmt.Errorf("decode traffic: %w", r.err)
	}
	return c, nil
}

// PutTraffic writes buckets (whole values, not increments) and deletes every
// bucket older than before, in one synced batch.
func (d *DB) PutTraffic(buckets []TrafficBucket, before time.Time) error {
	b := d.newBatch()
	for _, x := range buckets {
		_ = b.Set(trafficKey(x.Start), MarshalTraffic(nil, x.Counts), nil)
	}
	_ = b.DeleteRange([]byte{prefixTraffic}, trafficKey(before), nil)
	return d.commit(b)
}

// Traffic reads every bucket that starts at or after since, oldest first.
func (d *DB) Traffic(since time.Time) ([]TrafficBucket, error) {
	it, err := d.newIter(trafficKey(since), []byte{prefixTraffic + 1})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []TrafficBucket
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.Value()
		if err != nil {
			break
		}
		c, err := UnmarshalTraffic(v)
		if err != nil {
			return nil, err
		}
		k := it.Key()
		if len(k) != 9 {
			return nil, fmt.Errorf("traffic key %x: %w", k, errCorrupt)
		}
		out = append(out, TrafficBucket{Start: time.Unix(int64(binary.BigEndian.Uint64(k[1:])), 0).UTC(), Counts: c})
	}
	if err := it.Err("iterate traffic"); err != nil {
		return nil, err
	}
	return out, nil
}
