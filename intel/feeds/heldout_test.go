package feeds

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fraudd/fraudd/intel/netlists"
	"github.com/fraudd/fraudd/intel/netlists/feedfile"
)

// heldOutLists are the shipped VPN lists measured as if unseen.
var heldOutLists = []struct{ name, path string }{
	{"Mullvad", "vpn/x4bnet-input-mullvadvpn.txt"},
	{"Private Internet Access", "vpn/x4bnet-input-pia.txt"},
	{"Proton VPN", "vpn/x4bnet-input-protonvpn.txt"},
	{"X4B VPN IPv4", "vpn/x4bnet-vpn-ipv4.txt"},
	{"X4B VPN IPv6", "vpn/x4bnet-vpn-ipv6.txt"},
}

// withoutFeeds are the feeds a held-out list's addresses are removed from:
// every list that could know a VPN server (X4B's datacenter list includes
// its VPN list, and its VPN list the per-provider ones).
var withoutFeeds = []string{FeedVPNProvider, FeedVPN, FeedDatacenter, FeedCloud, FeedProxy}

type heldOutResult struct {
	list                       string
	n                          int
	vpn0, dc0, any0            int // main's rules: lists only
	vpn, dc, any, dcAlone, asn int // with the AS rules (asn: VPN through the operator's AS)
	near                       int
}

func pct(a, n int) string { return fmt.Sprintf("%5.1f%%", 100*float64(a)/float64(max(n, 1))) }

// TestHeldOutVPNLists is the stand-in for unseen VPN servers: for each
// shipped VPN list, rebuild without its entries (removed from every range
// list), then classify one address per entry. "Before" counts only what the
// lists alone say (the rules before the AS-based ones); "after" is Classify.
// Each list is measured twice: with its entries removed, and (rows marked
// "/24") with the whole /24 or /48 blocks around them removed as well, so
// that no other list's ranges next to them are left for the neighbour rule:
// that is the floor the AS rules reach on their own. Run it with -v to print
// the table.
func TestHeldOutVPNLists(t *testing.T) {
	needShared(t)
	if testing.Short() {
		t.Skip("rebuilds the feeds several times")
	}
	base, err := buildFiles(sharedData)
	if err != nil {
		t.Fatal(err)
	}
	var results []heldOutResult
	for _, blocks := range []bool{false, true} {
		for _, l := range heldOutLists {
			data, err := readMaybeGzip(filepath.Join(sharedData, l.path))
			if err != nil {
				t.Fatal(err)
			}
			p, err := parse(FormatAddrLines, data)
			if err != nil {
				t.Fatal(err)
			}
			out := p.spans
			name := l.name
			if blocks {
				out = widenSpans(out)
				name += " /24"
			}
			snap := snapshotWithout(t, base, out)
			r := heldOutResult{list: name}
			for _, sp := range p.spans {
				c := snap.Classify(spanAddr(sp))
				r.n++
				lists := c.Sources&(netlists.SourceVPNProviders|netlists.SourceVPNRanges) != 0
				dcLists := c.Sources&(netlists.SourceCloudRanges|netlists.SourceDatacenterRanges|netlists.SourceDatacenterASN) != 0
				count(&r.vpn0, lists)
				count(&r.dc0, dcLists)
				count(&r.any0, lists || dcLists)
				count(&r.vpn, c.VPN)
				count(&r.dc, c.Datacenter)
				count(&r.any, c.VPN || c.Datacenter)
				count(&r.dcAlone, c.Datacenter && !c.VPN)
				count(&r.asn, c.Sources&netlists.SourceVPNASN != 0)
				count(&r.near, c.Sources&netlists.SourceVPNNeighbour != 0)
			}
			results = append(results, r)
			if r.n == 0 {
				t.Errorf("%s: no entries", l.name)
			}
			if r.vpn < r.vpn0 || r.any < r.any0 {
				t.Errorf("%s: the AS rules lost detections: %+v", l.name, r)
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-24s %6s | %-22s | %-46s\n", "held-out list", "n", "before: vpn  dc  either", "after: vpn  dc  either  dc-alone (vpn by AS, by /24)")
	for _, r := range results {
		fmt.Fprintf(&b, "%-24s %6d | %s %s %s | %s %s %s %s (%s, %s)\n", r.list, r.n,
			pct(r.vpn0, r.n), pct(r.dc0, r.n), pct(r.any0, r.n),
			pct(r.vpn, r.n), pct(r.dc, r.n), pct(r.any, r.n), pct(r.dcAlone, r.n), pct(r.asn, r.n), pct(r.near, r.n))
	}
	t.Log(b.String())
}

func count(n *int, ok bool) {
	if ok {
		*n++
	}
}

// spanAddr is the address measured for one list entry: its first address.
func spanAddr(sp span) netip.Addr {
	if sp.v4 {
		a := uint32(sp.lo.Lo)
		return netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)})
	}
	return sp.lo.Addr()
}

// snapshotWithout assembles a snapshot from base with the held-out spans
// removed from withoutFeeds and the hosting shares computed again.
func snapshotWithout(t *testing.T, base map[string]*feedfile.File, out []span) *netlists.Snapshot {
	t.Helper()
	var x4, x6 []span
	for _, s := range out {
		if s.v4 {
			x4 = append(x4, s)
		} else {
			x6 = append(x6, s)
		}
	}
	zero := func(span) uint32 { return 0 }
	ex4, ex6 := flatten(x4, zero), flatten(x6, zero)
	files := map[string]*feedfile.File{}
	for k, v := range base {
		files[k] = v
	}
	for _, name := range withoutFeeds {
		f := *base[name]
		f.Ranges.V4 = toTable4(subtract(segs4(f.Ranges.V4), ex4))
		f.Ranges.V6 = toTable6(subtract(segs6(f.Ranges.V6), ex6))
		files[name] = &f
	}
	h, err := deriveHosting(files)
	if err != nil {
		t.Fatal(err)
	}
	files[FeedASNHosting] = h
	var list []*feedfile.File
	for _, f := range files {
		list = append(list, f)
	}
	s, err := netlists.FromFiles(list)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func segs4(t feedfile.Table4) []seg {
	out := make([]seg, len(t.Start))
	for i := range t.Start {
		out[i] = seg{feedfile.U128{Lo: uint64(t.Start[i])}, feedfile.U128{Lo: uint64(t.End[i])}, t.Val[i]}
	}
	return out
}

func segs6(t feedfile.Table6) []seg {
	out := make([]seg, len(t.Start))
	for i := range t.Start {
		out[i] = seg{t.Start[i], t.End[i], t.Val[i]}
	}
	return out
}

// widenSpans widens spans to their /24 (IPv4) or /48 (IPv6) blocks.
func widenSpans(in []span) []span {
	out := make([]span, len(in))
	for i, s := range in {
		if s.v4 {
			s.lo.Lo &^= 0xff
			s.hi.Lo |= 0xff
		} else {
			s.lo = feedfile.U128{Hi: s.lo.Hi &^ 0xffff}
			s.hi = feedfile.U128{Hi: s.hi.Hi | 0xffff, Lo: ^uint64(0)}
		}
		out[i] = s
	}
	return out
}
