package feeds

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/fraudd/fraudd/intel/netlists/feedfile"
)

// The model: over a small address space, the value at each address is the
// value of the narrowest span covering it (earliest order on ties), minus
// excluded addresses.
func TestFlattenSubtractMatchModel(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	const space = 256
	for round := 0; round < 300; round++ {
		var spans, excl []span
		for i := 0; i < r.IntN(12); i++ {
			var sp span
			if r.IntN(2) == 0 { // CIDR-like block
				bits := r.IntN(5)
				lo := uint64(r.IntN(space)) &^ (1<<bits - 1)
				sp = span{v4: true, lo: feedfile.U128{Lo: lo}, hi: feedfile.U128{Lo: lo + 1<<bits - 1}}
			} else { // arbitrary range
				lo := uint64(r.IntN(space))
				hi := min(lo+uint64(r.IntN(20)), space-1)
				sp = span{v4: true, lo: feedfile.U128{Lo: lo}, hi: feedfile.U128{Lo: hi}}
			}
			sp.value = uint32(1 + r.IntN(3))
			sp.order = i
			spans = append(spans, sp)
		}
		for i := 0; i < r.IntN(3); i++ {
			lo := uint64(r.IntN(space))
			excl = append(excl, span{v4: true, lo: feedfile.U128{Lo: lo}, hi: feedfile.U128{Lo: min(lo+uint64(r.IntN(10)), space-1)}})
		}
		val := func(s span) uint32 { return s.value }
		got := subtract(flatten(spans, val), flatten(excl, func(span) uint32 { return 0 }))
		// Segments must be sorted, disjoint and maximal.
		for i := 1; i < len(got); i++ {
			if !got[i-1].hi.Less(got[i].lo) {
				t.Fatalf("round %d: segments overlap: %+v", round, got)
			}
		}
		at := func(x uint64) (uint32, bool) {
			for _, g := range got {
				if g.lo.Lo <= x && x <= g.hi.Lo {
					return g.val, true
				}
			}
			return 0, false
		}
		for x := uint64(0); x < space; x++ {
			var want uint32
			wok, best := false, uint64(0)
			bestOrder := 0
			for _, s := range spans {
				if s.lo.Lo <= x && x <= s.hi.Lo {
					w := s.hi.Lo - s.lo.Lo
					// Where the covering spans nest (CIDR blocks always do)
					// the narrowest is unique up to identical spans, of which
					// the earliest wins; elsewhere only coverage is checked.
					if !wok || w < best || w == best && s.order < bestOrder {
						want, wok, best, bestOrder = s.value, true, w, s.order
					}
				}
			}
			for _, e := range excl {
				if e.lo.Lo <= x && x <= e.hi.Lo {
					wok = false
				}
			}
			g, gok := at(x)
			if gok != wok {
				t.Fatalf("round %d addr %d: covered %v, want %v\nspans %+v\nexcl %+v\ngot %+v", round, x, gok, wok, spans, excl, got)
			}
			if wok && laminarAt(spans, x) && g != want {
				t.Fatalf("round %d addr %d: value %d, want %d\nspans %+v\ngot %+v", round, x, g, want, spans, got)
			}
		}
	}
}

// laminarAt reports whether the spans covering x are nested in each other
// (so "narrowest wins" is well defined there).
func laminarAt(spans []span, x uint64) bool {
	var cover []span
	for _, s := range spans {
		if s.lo.Lo <= x && x <= s.hi.Lo {
			cover = append(cover, s)
		}
	}
	for _, a := range cover {
		for _, b := range cover {
			inside := a.lo.Lo >= b.lo.Lo && a.hi.Lo <= b.hi.Lo || b.lo.Lo >= a.lo.Lo && b.hi.Lo <= a.hi.Lo
			if !inside {
				return false
			}
		}
	}
	return true
}

func TestFlattenEdges(t *testing.T) {
	max := feedfile.U128{Hi: ^uint64(0), Lo: ^uint64(0)}
	all := spanOfPrefix(netip.MustParsePrefix("::/0"))
	if all.lo != (feedfile.U128{}) || all.hi != max {
		t.Fatalf("::/0 = %+v", all)
	}
	top := spanOfPrefix(netip.MustParsePrefix("ffff::/16"))
	top.value, top.order = 2, 1
	all.value = 1
	got := flatten([]span{all, top}, func(s span) uint32 { return s.value })
	if len(got) != 2 || got[0].val != 1 || got[1].val != 2 || got[1].hi != max || got[0].hi.Add(feedfile.U128{Lo: 1}) != got[1].lo {
		t.Fatalf("flatten(::/0, ffff::/16) = %+v", got)
	}
	// Identical spans: the earlier one wins.
	a := spanOfPrefix(netip.MustParsePrefix("10.0.0.0/8"))
	b := a
	a.value, a.order = 1, 0
	b.value, b.order = 2, 1
	if got := flatten([]span{b, a}, func(s span) uint32 { return s.value }); len(got) != 1 || got[0].val != 1 {
		t.Fatalf("tie = %+v", got)
	}
	// A whole-space exclusion leaves nothing.
	if got := subtract(flatten([]span{a}, func(span) uint32 { return 0 }), []seg{{hi: max}}); len(got) != 0 {
		t.Fatalf("subtract all = %+v", got)
	}
}
