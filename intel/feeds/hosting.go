package feeds

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/fraudd/fraudd/intel/netlists/feedfile"
)

// The hosting-share table says, for every AS of the IP → AS table, which
// part of its announced IPv4 and IPv6 space lies in a datacenter or cloud
// range. An AS that is mostly hosting space is a hosting AS even when no
// hand-kept AS list names it (Latitude.sh, Nexeon, Krypt and many more):
// netlists reads such an AS as datacenter above netlists.HostingShareMin.
// It is derived at build and update time from other feeds, so it changes
// whenever they do.

// derivedFeed is a feed computed from other built feeds rather than read
// from raw inputs.
type derivedFeed struct {
	name   string
	inputs []string // feeds it is computed from
	derive func(map[string]*feedfile.File) (*feedfile.File, error)
}

// derived lists the computed feeds, built after every spec feed.
var derived = []derivedFeed{
	{name: FeedASNHosting, inputs: hostingInputs, derive: deriveHosting},
}

var errEmpty = errors.New("feed is empty")

func errMissingInput(name string) error { return fmt.Errorf("input feed %s missing", name) }

// hostingInputs are the feeds the hosting-share table is computed from:
// the AS table and the cover ranges.
var hostingInputs = []string{FeedASN, FeedDatacenter, FeedCloud}

// deriveHosting computes the hosting-share feed from the built files of
// hostingInputs. date is the newest of their dates.
func deriveHosting(files map[string]*feedfile.File) (*feedfile.File, error) {
	asn := files[FeedASN]
	f := &feedfile.File{Header: feedfile.Header{Name: FeedASNHosting, Kind: feedfile.KindShares}}
	for _, name := range hostingInputs {
		in := files[name]
		if in == nil {
			return nil, errMissingInput(name)
		}
		f.Inputs = append(f.Inputs, feedfile.Input{Name: "feed:" + name, Date: in.Date, Entries: in.Entries})
		if in.Date > f.Date {
			f.Date = in.Date
		}
	}
	f.Shares = hostingShares(asn.Ranges, files[FeedDatacenter].Ranges, files[FeedCloud].Ranges)
	f.Entries = len(f.Shares)
	if f.Entries == 0 {
		return nil, errEmpty
	}
	return f, nil
}

// hostingShares returns, for every AS number in asn (a value table), the
// share of its IPv4 and IPv6 space covered by any of the cover tables, in
// basis points rounded down (a whole AS reads MaxShare only when every
// address is covered).
func hostingShares(asn feedfile.Ranges, cover ...feedfile.Ranges) []feedfile.Share {
	type tally struct {
		n4, c4 uint64  // IPv4 addresses, covered
		n6, c6 float64 // IPv6 addresses, covered (float: /32s overflow 64 bits)
	}
	tallies := map[uint32]*tally{}
	get := func(a uint32) *tally {
		t := tallies[a]
		if t == nil {
			t = &tally{}
			tallies[a] = t
		}
		return t
	}

	var c4, c6 []span
	for _, c := range cover {
		for i := range c.V4.Start {
			c4 = append(c4, span{v4: true, lo: feedfile.U128{Lo: uint64(c.V4.Start[i])}, hi: feedfile.U128{Lo: uint64(c.V4.End[i])}})
		}
		for i := range c.V6.Start {
			c6 = append(c6, span{lo: c.V6.Start[i], hi: c.V6.End[i]})
		}
	}
	zero := func(span) uint32 { return 0 }
	u4, u6 := flatten(c4, zero), flatten(c6, zero)

	j := 0
	for i := range asn.V4.Start {
		lo, hi := uint64(asn.V4.Start[i]), uint64(asn.V4.End[i])
		t := get(asn.V4.Val[i])
		t.n4 += hi - lo + 1
		for j < len(u4) && u4[j].hi.Lo < lo {
			j++
		}
		for k := j; k < len(u4) && u4[k].lo.Lo <= hi; k++ {
			t.c4 += min(hi, u4[k].hi.Lo) - max(lo, u4[k].lo.Lo) + 1
		}
	}
	j = 0
	for i := range asn.V6.Start {
		lo, hi := asn.V6.Start[i], asn.V6.End[i]
		t := get(asn.V6.Val[i])
		t.n6 += size6(lo, hi)
		for j < len(u6) && u6[j].hi.Less(lo) {
			j++
		}
		for k := j; k < len(u6) && !hi.Less(u6[k].lo); k++ {
			a, b := u6[k].lo, u6[k].hi
			if a.Less(lo) {
				a = lo
			}
			if hi.Less(b) {
				b = hi
			}
			t.c6 += size6(a, b)
		}
	}

	out := make([]feedfile.Share, 0, len(tallies))
	for a, t := range tallies {
		s := feedfile.Share{ASN: a, V4: feedfile.NoShare, V6: feedfile.NoShare}
		if t.n4 > 0 {
			s.V4 = uint16(t.c4 * feedfile.MaxShare / t.n4)
		}
		if t.n6 > 0 {
			s.V6 = uint16(min(math.Floor(t.c6*feedfile.MaxShare/t.n6), feedfile.MaxShare))
			if t.c6 < t.n6 && s.V6 == feedfile.MaxShare {
				s.V6 = feedfile.MaxShare - 1
			}
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b feedfile.Share) int { return int(int64(a.ASN) - int64(b.ASN)) })
	return out
}

// size6 is the number of addresses from lo to hi inclusive, as a float.
func size6(lo, hi feedfile.U128) float64 {
	d := hi.Sub(lo)
	return float64(d.Hi)*0x1p64 + float64(d.Lo) + 1
}
