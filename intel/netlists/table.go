package netlists

import "github.com/fraudd/fraudd/intel/netlists/feedfile"

// indexMin is the table size from which a lookup index is worth its 256 KB:
// below it the whole start column stays in cache and a plain binary search
// is as fast.
const indexMin = 4096

// table4 is a sorted, disjoint IPv4 range table. idx[k] is the first range
// whose start is in or after the /16 block k, so a lookup only searches the
// ranges that start inside the address's /16 (plus the one before).
type table4 struct {
	start, end, val []uint32
	idx             []uint32 // len 1<<16+1, or nil for small tables
}

func newTable4(t feedfile.Table4) table4 {
	out := table4{start: t.Start, end: t.End, val: t.Val}
	if len(t.Start) >= indexMin {
		out.idx = make([]uint32, 1<<16+1)
		i := 0
		for k := 0; k <= 1<<16; k++ {
			for i < len(t.Start) && uint64(t.Start[i]) < uint64(k)<<16 {
				i++
			}
			out.idx[k] = uint32(i)
		}
	}
	return out
}

// find returns the value of the range holding x.
func (t *table4) find(x uint32) (uint32, bool) {
	lo, hi := 0, len(t.start)
	if t.idx != nil {
		k := x >> 16
		lo, hi = int(t.idx[k]), int(t.idx[k+1])
	}
	for lo < hi { // first range starting after x
		m := int(uint(lo+hi) >> 1)
		if t.start[m] <= x {
			lo = m + 1
		} else {
			hi = m
		}
	}
	i := lo - 1
	if i < 0 || t.end[i] < x {
		return 0, false
	}
	return t.val[i], true
}

// IPv6 tables are indexed on the 18 bits after the 2000::/3 prefix: nearly
// every address looked up is global unicast, and the RIRs' space is dense
// enough that the first 16 bits alone leave thousands of ranges per block
// (2a00::/12 holds most of Europe's allocations).
const (
	idx6Bits  = 18
	idx6Shift = 61 - idx6Bits
)

// table6 is table4 for IPv6. hi repeats the upper halves of start so the
// binary search reads 8 bytes per probe instead of 16.
type table6 struct {
	hi         []uint64
	start, end []feedfile.U128
	val        []uint32
	idx        []uint32 // len 1<<idx6Bits+1, or nil for small tables
}

func newTable6(t feedfile.Table6) table6 {
	out := table6{start: t.Start, end: t.End, val: t.Val, hi: make([]uint64, len(t.Start))}
	for i, s := range t.Start {
		out.hi[i] = s.Hi
	}
	if len(t.Start) >= indexMin {
		out.idx = make([]uint32, 1<<idx6Bits+1)
		i := 0
		for k := 0; k <= 1<<idx6Bits; k++ {
			block := uint64(1)<<61 + uint64(k)<<idx6Shift // first address of block k (k = 1<<idx6Bits is 4000::)
			for i < len(t.Start) && t.Start[i].Hi < block {
				i++
			}
			out.idx[k] = uint32(i)
		}
	}
	return out
}

func (t *table6) find(x feedfile.U128) (uint32, bool) {
	lo, hi := 0, len(t.start)
	if t.idx != nil && x.Hi>>61 == 1 {
		k := x.Hi >> idx6Shift & (1<<idx6Bits - 1)
		lo, hi = int(t.idx[k]), int(t.idx[k+1])
	}
	for lo < hi { // first range whose upper half starts after x's
		m := int(uint(lo+hi) >> 1)
		if t.hi[m] <= x.Hi {
			lo = m + 1
		} else {
			hi = m
		}
	}
	i := lo - 1
	// Ranges inside one /64 share an upper half; step back to the last one
	// starting at or before x.
	for i >= 0 && t.hi[i] == x.Hi && t.start[i].Lo > x.Lo {
		i--
	}
	if i < 0 {
		return 0, false
	}
	if e := t.end[i]; e.Hi < x.Hi || e.Hi == x.Hi && e.Lo < x.Lo {
		return 0, false
	}
	return t.val[i], true
}

func (t *table6) len() int { return len(t.start) }

// key is an address prepared once per lookup for all tables.
type key struct {
	v4 bool
	a4 uint32
	a6 feedfile.U128
	ok bool
}

// rangeFeed is a loaded KindRanges feed.
type rangeFeed struct {
	labels []string
	v4     table4
	v6     table6
}

func newRangeFeed(r feedfile.Ranges) rangeFeed {
	return rangeFeed{labels: r.Labels, v4: newTable4(r.V4), v6: newTable6(r.V6)}
}

func (f *rangeFeed) find(k *key) (uint32, bool) {
	if k.v4 {
		return f.v4.find(k.a4)
	}
	return f.v6.find(k.a6)
}

// label returns the label of the range holding k, "" when none or unlabelled.
func (f *rangeFeed) label(k *key) (string, bool) {
	v, ok := f.find(k)
	if !ok {
		return "", false
	}
	if int(v) < len(f.labels) {
		return f.labels[v], true
	}
	return "", true
}

// keys yields the first address of every range.
func (t *table4) keys(yield func(key) bool) {
	for _, a := range t.start {
		if !yield(key{v4: true, ok: true, a4: a}) {
			return
		}
	}
}

// keys yields the first address of every range.
func (t *table6) keys(yield func(key) bool) {
	for _, a := range t.start {
		if !yield(key{ok: true, a6: a}) {
			return
		}
	}
}
