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

func (t *table4) len() int { return len(t.start) }

// table6 is table4 for IPv6, indexed on the first 16 bits.
type table6 struct {
	start, end []feedfile.U128
	val        []uint32
	idx        []uint32
}

func newTable6(t feedfile.Table6) table6 {
	out := table6{start: t.Start, end: t.End, val: t.Val}
	if len(t.Start) >= indexMin {
		out.idx = make([]uint32, 1<<16+1)
		i := 0
		for k := 0; k <= 1<<16; k++ {
			for i < len(t.Start) && t.Start[i].Hi>>48 < uint64(k) {
				i++
			}
			out.idx[k] = uint32(i)
		}
	}
	return out
}

func (t *table6) find(x feedfile.U128) (uint32, bool) {
	lo, hi := 0, len(t.start)
	if t.idx != nil {
		k := x.Hi >> 48
		lo, hi = int(t.idx[k]), int(t.idx[k+1])
	}
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		s := t.start[m]
		if s.Hi < x.Hi || s.Hi == x.Hi && s.Lo <= x.Lo {
			lo = m + 1
		} else {
			hi = m
		}
	}
	i := lo - 1
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

func (f *rangeFeed) has(k *key) bool {
	_, ok := f.find(k)
	return ok
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

func (f *rangeFeed) ranges() int { return f.v4.len() + f.v6.len() }

// asnTable is a loaded KindASNs feed: sorted AS numbers with parallel rows.
type asnTable struct {
	asn  []uint32
	rows []asnRow
}

type asnRow struct {
	name, kind, country string
	display             string // provider display name, computed at load
}

func newASNTable(rows []feedfile.ASN, display func(name string) string) asnTable {
	t := asnTable{asn: make([]uint32, len(rows)), rows: make([]asnRow, len(rows))}
	for i, r := range rows {
		t.asn[i] = r.ASN
		t.rows[i] = asnRow{name: r.Name, kind: r.Kind, country: r.Country}
		if display != nil {
			t.rows[i].display = display(r.Name)
		}
	}
	return t
}

func (t *asnTable) find(asn uint32) *asnRow {
	lo, hi := 0, len(t.asn)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if t.asn[m] < asn {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(t.asn) && t.asn[lo] == asn {
		return &t.rows[lo]
	}
	return nil
}
