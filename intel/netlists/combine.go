package netlists

import (
	"slices"

	"github.com/fraudd/fraudd/intel/netlists/feedfile"
)

// The address-list feeds (Tor, relay, VPN, proxy, cloud, datacenter,
// blocklist, carrier ranges) are merged at load into one table whose value
// is a bit set, so Classify does one search for all of them instead of one
// per feed. Measured on the embedded data this took Classify from ~550 ns
// to about a third of that.
const (
	flagTor uint32 = 1 << iota
	flagRelay
	flagVPN
	flagProxy
	flagDatacenter
	flagBlocklist
	flagMobile
	flagNear // in the /24 or /48 of a listed VPN range

	// Label indexes (plus one, so zero means none) live in the upper bytes.
	vpnLabelShift   = 8
	cloudLabelShift = 16
	nearLabelShift  = 24 // the VPN provider label of a neighbouring range
	labelMask       = 0xff
	maxLabels       = labelMask - 1
	cloudLabelMask  = labelMask << cloudLabelShift
)

// layer is one feed's contribution to the combined table: enc turns the
// feed's range value into bits.
type layer struct {
	t   *rangeFeed
	enc func(v uint32) uint32
}

func flagLayer(t *rangeFeed, bit uint32) layer {
	return layer{t: t, enc: func(uint32) uint32 { return bit }}
}

func labelLayer(t *rangeFeed, shift uint) layer {
	return layer{t: t, enc: func(v uint32) uint32 { return (v + 1) << shift }}
}

type event4 struct {
	pos   uint64 // address where the change happens (end+1 for an end)
	layer int
	on    bool
	val   uint32
}

// combine4 merges the IPv4 tables of disjoint-range layers into one table
// whose value at each address is the OR of every layer's encoded value.
func combine4(layers []layer) feedfile.Table4 {
	var ev []event4
	for li, l := range layers {
		t := &l.t.v4
		for i := range t.start {
			v := l.enc(t.val[i])
			ev = append(ev, event4{uint64(t.start[i]), li, true, v}, event4{uint64(t.end[i]) + 1, li, false, v})
		}
	}
	// Ends before starts at the same address: a layer whose range ends at
	// x-1 and another starting at x are both applied at x.
	slices.SortFunc(ev, func(a, b event4) int {
		switch {
		case a.pos < b.pos:
			return -1
		case a.pos > b.pos:
			return 1
		case a.on != b.on:
			if !a.on {
				return -1
			}
			return 1
		}
		return 0
	})
	cur := make([]uint32, len(layers))
	var out feedfile.Table4
	for i := 0; i < len(ev); {
		pos := ev[i].pos
		for ; i < len(ev) && ev[i].pos == pos; i++ {
			if ev[i].on {
				cur[ev[i].layer] = ev[i].val
			} else {
				cur[ev[i].layer] = 0
			}
		}
		var v uint32
		for _, c := range cur {
			v |= c
		}
		if v == 0 || pos > 0xffffffff || i == len(ev) {
			continue
		}
		end := ev[i].pos - 1 // the value holds until the next event
		if n := len(out.Start); n > 0 && out.Val[n-1] == v && uint64(out.End[n-1])+1 == pos {
			out.End[n-1] = uint32(end)
			continue
		}
		out.Start = append(out.Start, uint32(pos))
		out.End = append(out.End, uint32(end))
		out.Val = append(out.Val, v)
	}
	return out
}

type event6 struct {
	pos   feedfile.U128
	layer int
	on    bool
	val   uint32
}

// combine6 is combine4 for IPv6. A range ending at the very top of the
// address space has no end event; the sweep closes it at the end.
func combine6(layers []layer) feedfile.Table6 {
	var ev []event6
	one := feedfile.U128{Lo: 1}
	for li, l := range layers {
		t := &l.t.v6
		for i := range t.start {
			v := l.enc(t.val[i])
			ev = append(ev, event6{t.start[i], li, true, v})
			if !t.end[i].IsMax() {
				ev = append(ev, event6{t.end[i].Add(one), li, false, v})
			}
		}
	}
	slices.SortFunc(ev, func(a, b event6) int {
		if c := a.pos.Cmp(b.pos); c != 0 {
			return c
		}
		if a.on != b.on {
			if !a.on {
				return -1
			}
			return 1
		}
		return 0
	})
	cur := make([]uint32, len(layers))
	var out feedfile.Table6
	for i := 0; i < len(ev); {
		pos := ev[i].pos
		for ; i < len(ev) && ev[i].pos == pos; i++ {
			if ev[i].on {
				cur[ev[i].layer] = ev[i].val
			} else {
				cur[ev[i].layer] = 0
			}
		}
		var v uint32
		for _, c := range cur {
			v |= c
		}
		if v == 0 {
			continue
		}
		end := feedfile.U128{Hi: ^uint64(0), Lo: ^uint64(0)}
		if i < len(ev) {
			end = ev[i].pos.Sub(one)
		}
		if n := len(out.Start); n > 0 && out.Val[n-1] == v && out.End[n-1].Add(one) == pos {
			out.End[n-1] = end
			continue
		}
		out.Start = append(out.Start, pos)
		out.End = append(out.End, end)
		out.Val = append(out.Val, v)
	}
	return out
}
