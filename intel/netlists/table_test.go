package netlists

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/fraudd/fraudd/intel/netlists/feedfile"
)

// randomTable4 makes sorted, disjoint ranges over a space small enough to
// check every address, but with the top bits spread so the /16 index is
// exercised.
func randomTable4(r *rand.Rand, n int) feedfile.Table4 {
	var t feedfile.Table4
	x := uint64(r.IntN(5))
	for i := 0; i < n && x <= 0xffffffff; i++ {
		size := uint64(r.IntN(3))
		if r.IntN(50) == 0 {
			size = uint64(r.IntN(1 << 18))
		}
		end := min(x+size, 0xffffffff)
		t.Start = append(t.Start, uint32(x))
		t.End = append(t.End, uint32(end))
		t.Val = append(t.Val, uint32(i))
		x = end + 1 + uint64(r.IntN(3))
		if r.IntN(100) == 0 {
			x += uint64(r.IntN(1 << 24))
		}
	}
	return t
}

func naive4(t feedfile.Table4, x uint32) (uint32, bool) {
	for i := range t.Start {
		if t.Start[i] <= x && x <= t.End[i] {
			return t.Val[i], true
		}
	}
	return 0, false
}

func TestTable4MatchesNaive(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 20; round++ {
		n := []int{0, 1, 10, indexMin + 100}[round%4]
		raw := randomTable4(r, n)
		tab := newTable4(raw)
		probe := func(x uint32) {
			gv, gok := tab.find(x)
			wv, wok := naive4(raw, x)
			if gv != wv || gok != wok {
				t.Fatalf("round %d find(%d) = %d,%v want %d,%v", round, x, gv, gok, wv, wok)
			}
		}
		for i := range raw.Start {
			for _, d := range []int64{-1, 0, 1} {
				probe(uint32(int64(raw.Start[i]) + d))
				probe(uint32(int64(raw.End[i]) + d))
			}
		}
		for i := 0; i < 200; i++ {
			probe(r.Uint32())
		}
		probe(0)
		probe(0xffffffff)
	}
}

func TestTable6MatchesNaive(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for round := 0; round < 10; round++ {
		n := []int{0, 3, indexMin + 50, indexMin * 2}[round%4]
		var raw feedfile.Table6
		// Start below 2000::/3 on some rounds and inside it on others, so
		// both the indexed and the plain search run.
		x := feedfile.U128{Hi: []uint64{uint64(r.IntN(4)) << 48, 0x2a00 << 48, 0x3fff_ff00 << 32}[round%3]}
		for i := 0; i < n; i++ {
			size := feedfile.U128{Lo: uint64(r.IntN(4))}
			if r.IntN(10) == 0 {
				size = feedfile.U128{Hi: uint64(r.IntN(1 << 20)), Lo: ^uint64(0)}
			}
			end := x.Add(size)
			raw.Start = append(raw.Start, x)
			raw.End = append(raw.End, end)
			raw.Val = append(raw.Val, uint32(i))
			x = end.Add(feedfile.U128{Lo: 1 + uint64(r.IntN(3))})
			if r.IntN(20) == 0 {
				x = x.Add(feedfile.U128{Hi: uint64(r.IntN(1 << 40))})
			}
		}
		tab := newTable6(raw)
		naive := func(y feedfile.U128) (uint32, bool) {
			for i := range raw.Start {
				if !y.Less(raw.Start[i]) && !raw.End[i].Less(y) {
					return raw.Val[i], true
				}
			}
			return 0, false
		}
		var probes []feedfile.U128
		for i := range raw.Start {
			for _, p := range []feedfile.U128{raw.Start[i], raw.End[i]} {
				probes = append(probes, p, p.Add(feedfile.U128{Lo: 1}), p.Sub(feedfile.U128{Lo: 1}))
			}
		}
		for i := 0; i < 200; i++ {
			probes = append(probes, feedfile.U128{Hi: r.Uint64() >> uint(r.IntN(64)), Lo: r.Uint64()})
			if len(raw.Start) > 0 { // near a range, same upper half
				j := r.IntN(len(raw.Start))
				probes = append(probes, feedfile.U128{Hi: raw.Start[j].Hi, Lo: r.Uint64()})
			}
		}
		probes = append(probes, feedfile.U128{}, feedfile.U128{Hi: ^uint64(0), Lo: ^uint64(0)})
		slices.SortFunc(probes, func(a, b feedfile.U128) int { return a.Cmp(b) })
		for _, p := range probes {
			gv, gok := tab.find(p)
			wv, wok := naive(p)
			if gv != wv || gok != wok {
				t.Fatalf("round %d find(%v) = %d,%v want %d,%v", round, p, gv, gok, wv, wok)
			}
		}
	}
}

func TestCombineMatchesLayers(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for round := 0; round < 20; round++ {
		var feeds []*rangeFeed
		var layers []layer
		for li := 0; li < 1+r.IntN(5); li++ {
			raw := feedfile.Ranges{V4: randomTable4(r, r.IntN(300))}
			// IPv6: the IPv4 table shifted into the top of the space, so
			// that ranges end at the very last address too.
			for i := range raw.V4.Start {
				raw.V6.Start = append(raw.V6.Start, feedfile.U128{Hi: ^uint64(0), Lo: ^uint64(0) - 0xffffffff + uint64(raw.V4.Start[i])})
				raw.V6.End = append(raw.V6.End, feedfile.U128{Hi: ^uint64(0), Lo: ^uint64(0) - 0xffffffff + uint64(raw.V4.End[i])})
				raw.V6.Val = append(raw.V6.Val, raw.V4.Val[i])
			}
			f := newRangeFeed(raw)
			feeds = append(feeds, &f)
			if li%2 == 0 {
				layers = append(layers, flagLayer(&f, 1<<li))
			} else {
				layers = append(layers, layer{t: &f, enc: func(v uint32) uint32 { return (v%7 + 1) << (8 + 3*li) }})
			}
		}
		comb := newRangeFeed(feedfile.Ranges{V4: combine4(layers), V6: combine6(layers)})
		check := func(k key) {
			var want uint32
			for _, l := range layers {
				if v, ok := l.t.find(&k); ok {
					want |= l.enc(v)
				}
			}
			got, ok := comb.find(&k)
			if got != want || ok != (want != 0) {
				t.Fatalf("round %d key %+v: combined %x,%v want %x", round, k, got, ok, want)
			}
		}
		for _, f := range feeds {
			for i := range f.v4.start {
				for _, x := range []uint32{f.v4.start[i], f.v4.end[i], f.v4.start[i] - 1, f.v4.end[i] + 1} {
					check(key{ok: true, v4: true, a4: x})
					check(key{ok: true, a6: feedfile.U128{Hi: ^uint64(0), Lo: ^uint64(0) - 0xffffffff + uint64(x)}})
				}
			}
		}
		for i := 0; i < 300; i++ {
			x := r.Uint32()
			check(key{ok: true, v4: true, a4: x})
			check(key{ok: true, a6: feedfile.U128{Hi: ^uint64(0), Lo: ^uint64(0) - 0xffffffff + uint64(x)}})
		}
	}
}
