package feeds

import (
	"slices"
	"sort"

	"github.com/fraudd/fraudd/intel/netlists/feedfile"
)

// The IPv6 country table (geo-whois-asn-country-ipv6) answers AU, APNIC's
// own country, for large stretches of APNIC space between its own rows: the
// "known bug" of SOURCES.md (2001:200::/… WIDE, JP → AU) runs through whole
// allocations of other networks (one row 2001:4461:: – 2001:44ef:… covers
// BSNL India's and AIS Thailand's blocks). An AIS user in Bangkok then reads
// ip.country AU against the browser's Asia/Bangkok and gets
// timezone_mismatch.
//
// The AU-filler rule corrects the table where the AS tables say whose space
// it is, and only there:
//
//   - only IPv6 addresses the table puts in AU are touched;
//   - such an address takes the country X of the AS announcing it (the
//     IP → AS table) when X is not AU, X is in APNIC's service region (the
//     filler is APNIC's country for APNIC's space; a network of another
//     region with APNIC space uses it in Asia-Pacific, not at home), the
//     AS's registration country (asn-info) is X, and at least
//     auFillerMinShare of the AS's IPv4 space (the IP → AS table joined
//     with the IPv4 country table) is in X: a single-country network;
//   - everything else stays as the table says: genuine Australian
//     networks (registered in AU), multinationals (Amazon, Google,
//     Cloudflare, Akamai, NTT America: under the share), ASes without IPv4
//     space or registration country, and the filler no AS announces.
//
// The rule runs on the assembled geo feed, after the curated corrections
// (curated/geo_fixes.csv), whose rows it leaves alone unless they say AU,
// both at build time and when `fraudd feeds update` assembles the geo feed
// from upstream files. It reads the AS tables the resulting snapshot uses.

const (
	auFillerCountry = "AU"
	// auFillerMinShare (basis points): the part of an AS's IPv4 space that
	// must be in its registration country. Chosen from the data (2026-06-17
	// snapshot): the multinationals that announce AU-filler space sit below
	// (NTT America 84% US, whose filler space is NTT's Japanese blocks;
	// Cogent 88%; Amazon 73%; Google 74%; Akamai 45% NL), the national
	// carriers the bug hurts above (Globe PH 93.6%, Telkom Indonesia 98%,
	// True 97%, AIS 99%, SingNet 99.6%, BSNL 99.9%).
	auFillerMinShare = 9000
	// auFillerRule names the rule in the geo feed's header, as an input
	// whose entries are the announced ranges it moved.
	auFillerRule = rulePrefix + "au-filler (feed:" + FeedASN + ", feed:" + FeedASNInfo + ")"
)

// rulePrefix starts the header name of an input that is a rule of this
// project applied to the feed, not a file read.
const rulePrefix = "rule:"

// apnicRegion is APNIC's service region (56 economies), AU included.
var apnicRegion = map[string]bool{}

func init() {
	for _, cc := range []string{
		"AF", "AS", "AU", "BD", "BN", "BT", "CC", "CK", "CN", "CX", "FJ", "FM", "GU", "HK",
		"ID", "IN", "IO", "JP", "KH", "KI", "KP", "KR", "LA", "LK", "MH", "MM", "MN", "MO",
		"MP", "MV", "MY", "NC", "NF", "NP", "NR", "NU", "NZ", "PF", "PG", "PH", "PK", "PN",
		"PW", "SB", "SG", "TF", "TH", "TK", "TL", "TO", "TV", "TW", "VN", "VU", "WF", "WS",
	} {
		apnicRegion[cc] = true
	}
}

// refinement is a rule of this project applied to a feed once it is
// assembled, reading other feeds built (or in use) before it.
type refinement struct {
	name   string   // the rule's input name in the feed header
	inputs []string // feeds it reads
	apply  func(f *feedfile.File, in map[string]*feedfile.File) (refined, error)
}

// refined is what a refinement changed.
type refined struct {
	Entries int            // ranges changed
	ASes    int            // networks they belong to
	To      map[string]int // ranges per new label
	ASNs    map[string]int // networks per new label
}

// auFiller is the geo feed's refinement.
var auFiller = &refinement{
	name:   auFillerRule,
	inputs: []string{FeedASN, FeedASNInfo},
	apply: func(f *feedfile.File, in map[string]*feedfile.File) (refined, error) {
		return applyAUFiller(f, in[FeedASN], in[FeedASNInfo])
	},
}

// refine applies sp's refinement, if any, to f and records it among f's
// inputs; deps must hold the refinement's input feeds.
func refine(sp spec, f *feedfile.File, deps map[string]*feedfile.File) (refined, error) {
	r := sp.refine
	if r == nil {
		return refined{}, nil
	}
	date := ""
	for _, name := range r.inputs {
		d := deps[name]
		if d == nil {
			return refined{}, errMissingInput(name)
		}
		date = max(date, d.Date)
	}
	got, err := r.apply(f, deps)
	if err != nil {
		return got, err
	}
	f.Inputs = append(f.Inputs, feedfile.Input{Name: r.name, Date: date, Entries: got.Entries})
	return got, nil
}

// applyAUFiller applies the AU-filler rule to the geo feed f, in place,
// with the IP → AS table asn and the AS registration table info.
func applyAUFiller(f *feedfile.File, asn, info *feedfile.File) (refined, error) {
	out := refined{To: map[string]int{}, ASNs: map[string]int{}}
	if asn == nil {
		return out, errMissingInput(FeedASN)
	}
	if info == nil {
		return out, errMissingInput(FeedASNInfo)
	}
	geo := &f.Ranges
	au, ok := slices.BinarySearch(geo.Labels, auFillerCountry)
	if !ok {
		return out, nil
	}
	reg := make(map[uint32]string, len(info.ASNs))
	for _, a := range info.ASNs {
		if a.Country != "" && a.Country != auFillerCountry && apnicRegion[a.Country] {
			reg[a.ASN] = a.Country
		}
	}

	// The announced ranges inside AU rows, of ASes registered in another
	// APNIC country.
	type piece struct {
		lo, hi feedfile.U128
		asn    uint32
	}
	var pieces []piece
	g6, a6 := &geo.V6, &asn.Ranges.V6
	j := 0
	for i := range g6.Start {
		if g6.Val[i] != uint32(au) {
			continue
		}
		lo, hi := g6.Start[i], g6.End[i]
		for j < len(a6.Start) && a6.End[j].Less(lo) {
			j++
		}
		for k := j; k < len(a6.Start) && !hi.Less(a6.Start[k]); k++ {
			if _, ok := reg[a6.Val[k]]; !ok {
				continue
			}
			p := piece{lo: a6.Start[k], hi: a6.End[k], asn: a6.Val[k]}
			if p.lo.Less(lo) {
				p.lo = lo
			}
			if hi.Less(p.hi) {
				p.hi = hi
			}
			pieces = append(pieces, p)
		}
	}
	if len(pieces) == 0 {
		return out, nil
	}

	// The IPv4 join, for those ASes only: all their space, and the part
	// the IPv4 country table puts in their registration country.
	type tally struct{ all, home uint64 }
	tallies := map[uint32]*tally{}
	for _, p := range pieces {
		tallies[p.asn] = &tally{}
	}
	home := map[uint32]uint32{} // AS → label index of its country
	for a := range tallies {
		if x, ok := slices.BinarySearch(geo.Labels, reg[a]); ok {
			home[a] = uint32(x)
		}
	}
	g4, a4 := &geo.V4, &asn.Ranges.V4
	for i := range a4.Start {
		t := tallies[a4.Val[i]]
		if t == nil {
			continue
		}
		lo, hi := a4.Start[i], a4.End[i]
		t.all += uint64(hi-lo) + 1
		x, ok := home[a4.Val[i]]
		if !ok {
			continue
		}
		j := sort.Search(len(g4.Start), func(k int) bool { return g4.End[k] >= lo })
		for k := j; k < len(g4.Start) && g4.Start[k] <= hi; k++ {
			if g4.Val[k] == x {
				t.home += uint64(min(hi, g4.End[k])-max(lo, g4.Start[k])) + 1
			}
		}
	}
	single := func(a uint32) bool {
		t := tallies[a]
		return t.all > 0 && t.home*10000 >= t.all*auFillerMinShare
	}
	pieces = slices.DeleteFunc(pieces, func(p piece) bool { return !single(p.asn) })
	if len(pieces) == 0 {
		return out, nil
	}

	// The new IPv6 table: every AU row with its moved pieces cut out.
	var segs []seg
	one := feedfile.U128{Lo: 1}
	emit := func(lo, hi feedfile.U128, v uint32) {
		if n := len(segs); n > 0 && segs[n-1].val == v && !segs[n-1].hi.IsMax() && segs[n-1].hi.Add(one) == lo {
			segs[n-1].hi = hi
			return
		}
		segs = append(segs, seg{lo, hi, v})
	}
	seen := map[uint32]bool{}
	for _, p := range pieces {
		x := reg[p.asn]
		out.Entries++
		out.To[x]++
		if !seen[p.asn] {
			seen[p.asn] = true
			out.ASes++
			out.ASNs[x]++
		}
	}
	k := 0
	for i := range g6.Start {
		lo, hi, v := g6.Start[i], g6.End[i], g6.Val[i]
		if v != uint32(au) {
			emit(lo, hi, v)
			continue
		}
		// Pieces are in address order and disjoint; those of this row
		// follow each other.
		for k < len(pieces) && pieces[k].hi.Less(lo) {
			k++
		}
		cur, done := lo, false
		for ; k < len(pieces) && !hi.Less(pieces[k].lo); k++ {
			p := pieces[k]
			if cur.Less(p.lo) {
				emit(cur, p.lo.Sub(one), v)
			}
			emit(p.lo, p.hi, home[p.asn]) // a label already: the AS has IPv4 space there
			if p.hi == hi {
				done = true
				k++
				break
			}
			cur = p.hi.Add(one)
		}
		if !done {
			emit(cur, hi, v)
		}
	}
	geo.V6 = toTable6(segs)
	return out, nil
}
