package feeds

import (
	"net/netip"
	"slices"

	"github.com/fraudd/fraudd/intel/netlists/feedfile"
)

// span is one parsed range before normalisation. IPv4 spans keep their
// addresses in Lo of the U128 and have v4 set.
type span struct {
	v4     bool
	lo, hi feedfile.U128
	label  string // provider, country, … ("" for plain sets)
	value  uint32 // raw value for value tables (AS numbers)
	order  int    // position in the input, earlier wins ties
}

func spanOfPrefix(p netip.Prefix) span {
	p = p.Masked()
	a := p.Addr()
	if a.Is4() {
		b := a.As4()
		lo := uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3])
		hi := lo | (1<<(32-uint(p.Bits())) - 1)
		return span{v4: true, lo: feedfile.U128{Lo: lo}, hi: feedfile.U128{Lo: hi}}
	}
	lo := feedfile.FromAddr16(a)
	host := 128 - p.Bits()
	var m feedfile.U128
	switch {
	case host >= 128:
		m = feedfile.U128{Hi: ^uint64(0), Lo: ^uint64(0)}
	case host > 64:
		m = feedfile.U128{Hi: 1<<uint(host-64) - 1, Lo: ^uint64(0)}
	case host == 64:
		m = feedfile.U128{Lo: ^uint64(0)}
	default:
		m = feedfile.U128{Lo: 1<<uint(host) - 1}
	}
	return span{lo: lo, hi: lo.Add(m)}
}

// spanOfRange returns the span from lo to hi; ok is false when the two are of
// different families or out of order.
func spanOfRange(lo, hi netip.Addr) (span, bool) {
	lo, hi = lo.Unmap(), hi.Unmap()
	if lo.Is4() != hi.Is4() || hi.Less(lo) {
		return span{}, false
	}
	if lo.Is4() {
		a, b := lo.As4(), hi.As4()
		return span{
			v4: true,
			lo: feedfile.U128{Lo: uint64(a[0])<<24 | uint64(a[1])<<16 | uint64(a[2])<<8 | uint64(a[3])},
			hi: feedfile.U128{Lo: uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3])},
		}, true
	}
	return span{lo: feedfile.FromAddr16(lo), hi: feedfile.FromAddr16(hi)}, true
}

// seg is one output range of a normalised table.
type seg struct {
	lo, hi feedfile.U128
	val    uint32
}

// flatten turns possibly overlapping spans (of one family) into sorted,
// disjoint segments. Where spans overlap, the innermost one wins, as with
// longest-prefix matching on CIDR blocks; among identical spans the earliest
// (lowest order) wins. Adjacent segments with the same value are merged.
func flatten(spans []span, val func(span) uint32) []seg {
	if len(spans) == 0 {
		return nil
	}
	s := slices.Clone(spans)
	slices.SortFunc(s, func(a, b span) int {
		if c := a.lo.Cmp(b.lo); c != 0 {
			return c
		}
		if c := b.hi.Cmp(a.hi); c != 0 { // wider first, so the inner one is on top
			return c
		}
		return b.order - a.order // later first, so the earliest ends on top
	})
	var out []seg
	emit := func(lo, hi feedfile.U128, v uint32) {
		if hi.Less(lo) {
			return
		}
		if n := len(out); n > 0 && out[n-1].val == v && !out[n-1].hi.IsMax() && out[n-1].hi.Add(feedfile.U128{Lo: 1}) == lo {
			out[n-1].hi = hi
			return
		}
		out = append(out, seg{lo, hi, v})
	}
	one := feedfile.U128{Lo: 1}
	var stack []span
	var cur feedfile.U128 // first address not yet emitted
	done := false         // cur wrapped past the top of the space
	// closeUntil emits and pops every open span that ends before x.
	closeUntil := func(x feedfile.U128, all bool) {
		for len(stack) > 0 {
			top := stack[len(stack)-1]
			if !all && !top.hi.Less(x) {
				return
			}
			if !done && !top.hi.Less(cur) {
				emit(cur, top.hi, val(top))
				if top.hi.IsMax() {
					done = true
				} else {
					cur = top.hi.Add(one)
				}
			}
			stack = stack[:len(stack)-1]
		}
	}
	for _, sp := range s {
		closeUntil(sp.lo, false)
		if len(stack) > 0 && !done && cur.Less(sp.lo) {
			top := stack[len(stack)-1]
			emit(cur, sp.lo.Sub(one), val(top))
		}
		if done {
			break
		}
		if cur.Less(sp.lo) {
			cur = sp.lo
		}
		stack = append(stack, sp)
	}
	closeUntil(feedfile.U128{}, true)
	return out
}

// subtract removes from the sorted, disjoint segments a every address covered
// by the sorted, disjoint segments b.
func subtract(a, b []seg) []seg {
	one := feedfile.U128{Lo: 1}
	var out []seg
	j := 0
	for _, s := range a {
		lo := s.lo
		for j < len(b) && b[j].hi.Less(lo) {
			j++
		}
		k := j
		alive := true
		for ; k < len(b) && !s.hi.Less(b[k].lo); k++ {
			if lo.Less(b[k].lo) {
				out = append(out, seg{lo, b[k].lo.Sub(one), s.val})
			}
			if !b[k].hi.Less(s.hi) {
				alive = false
				break
			}
			if lo.Less(b[k].hi.Add(one)) {
				lo = b[k].hi.Add(one)
			}
		}
		if alive && !s.hi.Less(lo) {
			out = append(out, seg{lo, s.hi, s.val})
		}
	}
	return out
}

func toTable4(segs []seg) feedfile.Table4 {
	t := feedfile.Table4{
		Start: make([]uint32, len(segs)),
		End:   make([]uint32, len(segs)),
		Val:   make([]uint32, len(segs)),
	}
	for i, s := range segs {
		t.Start[i], t.End[i], t.Val[i] = uint32(s.lo.Lo), uint32(s.hi.Lo), s.val
	}
	return t
}

func toTable6(segs []seg) feedfile.Table6 {
	t := feedfile.Table6{
		Start: make([]feedfile.U128, len(segs)),
		End:   make([]feedfile.U128, len(segs)),
		Val:   make([]uint32, len(segs)),
	}
	for i, s := range segs {
		t.Start[i], t.End[i], t.Val[i] = s.lo, s.hi, s.val
	}
	return t
}
