package storage

import (
	"strconv"
	"time"

	"github.com/cockroachdb/pebble/v2"
	dto "github.com/prometheus/client_model/go"
)

// SyncBounds are the bucket bounds, in seconds, of StoreStats.Syncs: the
// ones of Pebble's own fsync histogram that an operator reads (an fdatasync
// takes ~0.1–1 ms on a good disk and far more on a stalled one). Pebble's
// bounds are 100 µs apart up to 4.9 ms and then grow by ~17% a step; those
// are not round, and are shown rounded to two significant digits (0.0093
// for 0.0092991…), which misplaces nothing a disk can tell apart.
var SyncBounds []float64

// syncBoundsNS are SyncBounds in Pebble's unit (nanoseconds), in order.
var syncBoundsNS = []float64{
	100e3, 200e3, 300e3, 500e3, 1e6, 2e6, 3e6, 4.9e6, // the linear part
}

// syncBoundsMinLog lists which of Pebble's exponential bounds (5 ms … 10 s,
// 50 steps) to keep: about 10, 25, 50, 100, 250 ms, 0.5, 1, 2.5 and 10 s.
var syncBoundsMinLog = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10}

// SyncLatency is a histogram of WAL syncs as cumulative counts.
type SyncLatency struct {
	Count   uint64
	Sum     float64            // seconds
	Buckets map[float64]uint64 // upper bound in seconds → syncs at or under it
}

// StoreStats are Pebble's own figures an operator watches.
type StoreStats struct {
	// CompactionDebt is the bytes compactions must still rewrite for the
	// LSM to settle; growing without end means writes outpace compactions.
	CompactionDebt uint64
	// ReadAmp is the sublevels and levels a read may visit.
	ReadAmp int
	// BlockCacheHits and BlockCacheMisses count block cache lookups.
	BlockCacheHits, BlockCacheMisses int64
	BlockCacheBytes                  int64
	MemTableBytes                    uint64
	DiskBytes                        uint64
	CompactionsInProgress            int64
	// Flushes and Compactions count the ones that finished.
	Flushes, Compactions int64
	// Syncs is the latency of the WAL's fsyncs: the group syncs, the strict
	// commits and Pebble's own. It is Pebble's histogram, so it starts over
	// when the store reopens after a fatal error.
	Syncs SyncLatency
}

// StoreStats reads Pebble's metrics (a lock inside Pebble and some work:
// for scrapes, not the request path).
func (d *DB) StoreStats() StoreStats {
	m := d.h.Load().db.Metrics()
	st := StoreStats{
		CompactionDebt: m.Compact.EstimatedDebt, ReadAmp: m.ReadAmp(),
		BlockCacheHits: m.BlockCache.Hits, BlockCacheMisses: m.BlockCache.Misses, BlockCacheBytes: m.BlockCache.Size,
		MemTableBytes: m.MemTable.Size, DiskBytes: m.DiskSpaceUsage(),
		CompactionsInProgress: m.Compact.NumInProgress, Flushes: m.Flush.Count, Compactions: m.Compact.Count,
	}
	if h := m.LogWriter.FsyncLatency; h != nil {
		var pb dto.Metric
		if h.Write(&pb) == nil && pb.Histogram != nil {
			st.Syncs = resample(pb.Histogram)
		}
	}
	return st
}

// resample keeps SyncBounds of Pebble's fsync histogram (nanoseconds) and
// converts it to seconds. Counts at a kept bound are exact: every bound kept
// is one of Pebble's.
func resample(h *dto.Histogram) SyncLatency {
	out := SyncLatency{Count: h.GetSampleCount(), Sum: h.GetSampleSum() / float64(time.Second),
		Buckets: make(map[float64]uint64, len(SyncBounds))}
	for _, b := range h.GetBucket() {
		if keepBound(b.GetUpperBound()) {
			out.Buckets[shown(b.GetUpperBound())] = b.GetCumulativeCount()
		}
	}
	return out
}

func keepBound(ns float64) bool {
	for _, b := range syncBoundsNS {
		if b == ns {
			return true
		}
	}
	return false
}

func init() {
	// Pebble's bounds in the exponential range are not round: keep the one
	// nearest to each wanted value.
	var exp []float64
	for _, b := range pebble.FsyncLatencyBuckets {
		if b >= 5e6 {
			exp = append(exp, b)
		}
	}
	for _, want := range syncBoundsMinLog {
		best := exp[0]
		for _, b := range exp {
			if abs(b/1e9-want) < abs(best/1e9-want) {
				best = b
			}
		}
		syncBoundsNS = append(syncBoundsNS, best)
	}
	for _, b := range syncBoundsNS {
		SyncBounds = append(SyncBounds, shown(b))
	}
}

// shown is a bound of Pebble's (nanoseconds) in seconds, rounded to two
// significant digits.
func shown(ns float64) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(ns/float64(time.Second), 'g', 2, 64), 64)
	return v
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}
