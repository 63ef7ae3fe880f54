package feeds

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fraudd/fraudd/intel/netlists"
	"github.com/fraudd/fraudd/intel/netlists/feedfile"
)

// fillerFeeds assembles a geo feed (with its AU-filler rule) and the two AS
// tables the rule reads from CSV text in the raw snapshots' formats.
func fillerFeeds(t *testing.T, geo, asn, info string) (*feedfile.File, refined) {
	t.Helper()
	mk := func(name string, format Format, text string) *feedfile.File {
		t.Helper()
		sp, _ := specByName(name)
		f, err := assemble(sp, []input{{part: part{format: format}, name: name, data: []byte(text)}})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return f
	}
	a, i := mk(FeedASN, FormatASNRanges, asn), mk(FeedASNInfo, FormatASNOrgCC, info)
	sp, _ := specByName(FeedGeo)
	g := mk(FeedGeo, FormatGeoRanges, geo)
	got, err := refine(sp, g, map[string]*feedfile.File{FeedASN: a, FeedASNInfo: i})
	if err != nil {
		t.Fatal(err)
	}
	return g, got
}

// countryOf answers a's country from a built geo feed.
func countryOf(f *feedfile.File, a string) string {
	k := feedfile.FromAddr16(netip.MustParseAddr(a))
	t := &f.Ranges.V6
	i, _ := slices.BinarySearchFunc(t.Start, k, func(s, k feedfile.U128) int { return s.Cmp(k) })
	if i == len(t.Start) || k.Less(t.Start[i]) {
		i--
	}
	if i < 0 || t.End[i].Less(k) {
		return ""
	}
	return f.Ranges.Labels[t.Val[i]]
}

// The tables of the unit tests: one APNIC AU filler row,
// 2001:4400::–2001:44ff:…, as in the source, with rows of other countries
// inside and beside it, and the networks that announce parts of it.
const (
	fillerGeo = `
10.0.0.0,10.0.9.255,TH
10.0.10.0,10.0.10.255,JP
10.0.11.0,10.0.255.255,TH
11.0.0.0,11.0.255.255,US
12.0.0.0,12.0.255.255,DE
13.0.0.0,13.0.255.255,AU
14.0.0.0,14.0.0.89,IN
14.0.0.90,14.0.0.99,US
15.0.0.0,15.0.0.88,PH
15.0.0.89,15.0.0.99,US
16.0.0.0,16.0.0.255,NZ
17.0.0.0,17.0.0.255,US
18.0.0.0,18.0.0.99,SG
2001:4400::,2001:44ff:ffff:ffff:ffff:ffff:ffff:ffff,AU
2001:44c8:4000::,2001:44c8:4000:ffff:ffff:ffff:ffff:ffff,SG
2001:44c9::,2001:44c9:ffff:ffff:ffff:ffff:ffff:ffff,TH
2001:4500::,2001:4500:ffff:ffff:ffff:ffff:ffff:ffff,JP
2001:8000::,2001:8fff:ffff:ffff:ffff:ffff:ffff:ffff,AU
`
	fillerASN = `
10.0.0.0,10.0.127.255,45430,AIS
10.0.128.0,10.0.255.255,45430,AIS
11.0.0.0,11.0.255.255,16509,Amazon
12.0.0.0,12.0.255.255,16509,Amazon
13.0.0.0,13.0.255.255,1221,Telstra
14.0.0.0,14.0.0.99,9829,BSNL
15.0.0.0,15.0.0.99,4775,Globe
16.0.0.0,16.0.0.255,24435,Supernet
17.0.0.0,17.0.0.255,714,Apple
18.0.0.0,18.0.0.199,3758,SingNet
2001:4400::,2001:4400:ffff:ffff:ffff:ffff:ffff:ffff,9829,BSNL
2001:4410::,2001:4410:ffff:ffff:ffff:ffff:ffff:ffff,16509,Amazon
2001:4420::,2001:4420:ffff:ffff:ffff:ffff:ffff:ffff,1221,Telstra
2001:4430::,2001:4430:ffff:ffff:ffff:ffff:ffff:ffff,4775,Globe
2001:4440::,2001:4440:ffff:ffff:ffff:ffff:ffff:ffff,24435,Supernet
2001:4450::,2001:4450:ffff:ffff:ffff:ffff:ffff:ffff,714,Apple
2001:4460::,2001:4460:ffff:ffff:ffff:ffff:ffff:ffff,64500,NoV4
2001:4470::,2001:4470:ffff:ffff:ffff:ffff:ffff:ffff,3758,SingNet
2001:44c8::,2001:44c8:ffff:ffff:ffff:ffff:ffff:ffff,45430,AIS
2001:44ff:8000::,2001:4500:ffff:ffff:ffff:ffff:ffff:ffff,9829,BSNL
2001:8000::,2001:8000:ffff:ffff:ffff:ffff:ffff:ffff,1221,Telstra
`
	fillerInfo = `asn,org,registration_country
45430,AIS,TH
16509,Amazon,US
1221,Telstra,AU
9829,BSNL,IN
4775,Globe,PH
24435,Supernet,PK
714,Apple,US
64500,NoV4,TH
3758,SingNet,SG
`
)

func TestAUFillerRule(t *testing.T) {
	g, got := fillerFeeds(t, fillerGeo, fillerASN, fillerInfo)
	for addr, want := range map[string]string{
		// A single-country foreign network's block inside the filler
		// takes its country: AIS (255/256 of its IPv4 space in TH, over
		// two AS rows and three country rows), BSNL (exactly 90%).
		"2001:44c8::1":         "TH",
		"2001:44c8:3fff::1":    "TH",
		"2001:44c8:4001::":     "TH",
		"2001:44c8:ffff::1":    "TH",
		"2001:4400::":          "IN",
		"2001:4400:ffff::1":    "IN",
		"2001:4401::1":         "AU", // no AS announces it: filler stays
		"2001:44c8:4000::1234": "SG", // the table's own row inside the block stays
		// Left as the table says: a multinational (Amazon, 50% US), a
		// genuine Australian network (Telstra, registered in AU), a
		// network under the share (Globe at 89%), one whose IPv4 space is
		// elsewhere than its registration (Supernet: NZ, PK), one of another
		// region (Apple: US), one without IPv4 space, one whose IPv4 space
		// the IPv4 table leaves half unknown (SingNet: 100 of 200).
		"2001:4410::1": "AU",
		"2001:4420::1": "AU",
		"2001:4430::1": "AU",
		"2001:4440::1": "AU",
		"2001:4450::1": "AU",
		"2001:4460::1": "AU",
		"2001:4470::1": "AU",
		"2001:8000::1": "AU",
		// A block across the filler row's end moves inside it only; the
		// next row (JP) is the table's own.
		"2001:44ff:7fff:ffff::":                   "AU",
		"2001:44ff:8000::":                        "IN",
		"2001:44ff:ffff:ffff:ffff:ffff:ffff:ffff": "IN",
		"2001:4500::":                             "JP",
		"2001:4500::1":                            "JP",
		"2001:44c9::1":                            "TH", // a non-AU row is never touched
	} {
		if c := countryOf(g, addr); c != want {
			t.Errorf("%s: %s, want %s", addr, c, want)
		}
	}
	if got.Entries != 4 || got.ASes != 2 || got.To["TH"] != 2 || got.To["IN"] != 2 || got.ASNs["TH"] != 1 {
		t.Errorf("refined %+v: want 4 ranges (AIS's two around the SG row, BSNL's two) of 2 networks", got)
	}
	in := g.Inputs[len(g.Inputs)-1]
	if in.Name != auFillerRule || in.Entries != 4 {
		t.Errorf("the header names the rule: %+v", in)
	}
	// The table stays sorted and disjoint, and a moved range next to a row
	// of its own country is one row with it: AIS's block ends where the
	// table's TH row 2001:44c9::/32 begins.
	b, err := feedfile.Marshal(nil, g)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := feedfile.Unmarshal(b); err != nil {
		t.Fatal(err)
	}
	t6 := &g.Ranges.V6
	for i := range t6.Start {
		if t6.Start[i] == feedfile.FromAddr16(netip.MustParseAddr("2001:44c8:4001::")) {
			if t6.End[i] != feedfile.FromAddr16(netip.MustParseAddr("2001:44c9:ffff:ffff:ffff:ffff:ffff:ffff")) {
				t.Errorf("AIS's block and the TH row after it are not one row")
			}
		}
	}
}

// TestAUFillerThreshold: the share is read at its boundary (90% moves,
// 89.9% does not) from the IPv4 join.
func TestAUFillerThreshold(t *testing.T) {
	for _, c := range []struct {
		home int
		want string
	}{{900, "IN"}, {899, "AU"}, {1000, "IN"}, {0, "AU"}} {
		geo := "14.0.0.0,14.0.3.231,US\n2001:4400::,2001:44ff:ffff:ffff:ffff:ffff:ffff:ffff,AU\n"
		if c.home > 0 {
			last := netip.MustParseAddr("14.0.0.0")
			for range c.home - 1 {
				last = last.Next()
			}
			geo = "14.0.0.0," + last.String() + ",IN\n" + geo // the narrower row wins
		}
		asn := "14.0.0.0,14.0.3.231,9829,BSNL\n2001:4400::,2001:4400:ffff:ffff:ffff:ffff:ffff:ffff,9829,BSNL\n"
		g, _ := fillerFeeds(t, geo, asn, "9829,BSNL,IN\n")
		if got := countryOf(g, "2001:4400::1"); got != c.want {
			t.Errorf("%d of 1000 IPv4 addresses in IN: %s, want %s", c.home, got, c.want)
		}
	}
}

// TestAUFillerEdges: blocks at a filler row's first and last address, a
// row that is the block itself, a block over two filler rows with a
// foreign row between, and a filler row at the top of the space.
func TestAUFillerEdges(t *testing.T) {
	geo := `10.0.0.0,10.0.255.255,TH
2001:4400::,2001:4400:ffff:ffff:ffff:ffff:ffff:ffff,AU
2001:4401::,2001:4401:ffff:ffff:ffff:ffff:ffff:ffff,AU
2001:4402::,2001:4402::ffff,JP
2001:4402::1:0,2001:4402:ffff:ffff:ffff:ffff:ffff:ffff,AU
2001:4500::,2001:4500:ffff:ffff:ffff:ffff:ffff:ffff,AU
ffff::,ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff,AU
`
	asn := `10.0.0.0,10.0.255.255,45430,AIS
2001:4400::,2001:4400::ffff,45430,AIS
2001:4401:ffff:ffff::,2001:4402:0:ffff:ffff:ffff:ffff:ffff,45430,AIS
2001:4500::,2001:4500:ffff:ffff:ffff:ffff:ffff:ffff,45430,AIS
ffff:ffff::,ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff,45430,AIS
`
	g, got := fillerFeeds(t, geo, asn, "45430,AIS,TH\n")
	for addr, want := range map[string]string{
		"2001:4400::":                             "TH",
		"2001:4400::ffff":                         "TH",
		"2001:4400::1:0":                          "AU",
		"2001:4401:ffff:fffe::":                   "AU",
		"2001:4401:ffff:ffff::":                   "TH",
		"2001:4402::":                             "JP",
		"2001:4402::ffff":                         "JP",
		"2001:4402::1:0":                          "TH",
		"2001:4402:0:ffff:ffff:ffff:ffff:ffff":    "TH",
		"2001:4402:1::":                           "AU",
		"2001:4500::":                             "TH",
		"2001:4500:ffff:ffff:ffff:ffff:ffff:ffff": "TH",
		"ffff:fffe::":                             "AU",
		"ffff:ffff::":                             "TH",
		"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff": "TH",
	} {
		if c := countryOf(g, addr); c != want {
			t.Errorf("%s: %s, want %s", addr, c, want)
		}
	}
	if got.Entries != 5 || got.ASes != 1 {
		t.Errorf("refined %+v, want 5 ranges of 1 network", got)
	}
	b, err := feedfile.Marshal(nil, g)
	if err == nil {
		_, err = feedfile.Unmarshal(b)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestAUFillerNeedsItsInputs: the rule fails (and with it the build or the
// update of the geo feed) without the AS tables; a table without AU rows
// or without candidates is left as it is.
func TestAUFillerNeedsItsInputs(t *testing.T) {
	sp, _ := specByName(FeedGeo)
	g := &feedfile.File{Header: feedfile.Header{Name: FeedGeo, Kind: feedfile.KindRanges}}
	if _, err := refine(sp, g, map[string]*feedfile.File{FeedASN: {}}); err == nil || !strings.Contains(err.Error(), FeedASNInfo) {
		t.Fatalf("missing asn-info: %v", err)
	}
	g, got := fillerFeeds(t, "2001:4500::,2001:4500:ffff:ffff:ffff:ffff:ffff:ffff,JP\n", "2001:4500::,2001:4500::ffff,45430,AIS\n", "45430,AIS,TH\n")
	if got.Entries != 0 || countryOf(g, "2001:4500::1") != "JP" {
		t.Fatalf("no AU row: %+v %s", got, countryOf(g, "2001:4500::1"))
	}
}

// TestAUFillerOnTheSnapshot applies the rule to the raw snapshot, prints
// what it moves and checks networks known by hand.
func TestAUFillerOnTheSnapshot(t *testing.T) {
	dir, _ := build(t)
	read := func(name string) *feedfile.File {
		b, err := os.ReadFile(filepath.Join(dir, name+feedfile.Ext))
		if err != nil {
			t.Fatal(err)
		}
		f, err := feedfile.Unmarshal(b)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	asn, info, built := read(FeedASN), read(FeedASNInfo), read(FeedGeo)
	sp, _ := specByName(FeedGeo)
	ins, err := buildInputs(sharedData, sp)
	if err != nil {
		t.Fatal(err)
	}
	g, err := assemble(sp, ins)
	if err != nil {
		t.Fatal(err)
	}
	before := &feedfile.File{Header: g.Header, Ranges: feedfile.Ranges{Labels: slices.Clone(g.Ranges.Labels), V6: g.Ranges.V6}}
	got, err := refine(sp, g, map[string]*feedfile.File{FeedASN: asn, FeedASNInfo: info})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("AU filler: %d announced ranges of %d networks moved; IPv6 rows %d -> %d", got.Entries, got.ASes, len(before.Ranges.V6.Start), len(g.Ranges.V6.Start))
	var ccs []string
	for cc := range got.To {
		ccs = append(ccs, cc)
	}
	slices.SortFunc(ccs, func(a, b string) int { return got.To[b] - got.To[a] })
	var sb strings.Builder
	for _, cc := range ccs {
		sb.WriteString(" " + cc + ":" + strconv.Itoa(got.To[cc]) + "/" + strconv.Itoa(got.ASNs[cc]))
	}
	t.Logf("ranges/networks per country:%s", sb.String())
	for _, cc := range ccs {
		if cc == "AU" || !apnicRegion[cc] {
			t.Errorf("moved to %s", cc)
		}
	}
	// The build applies the same rule.
	if !slices.Equal(g.Ranges.V6.Val, built.Ranges.V6.Val) || !slices.Equal(g.Ranges.V6.Start, built.Ranges.V6.Start) {
		t.Error("the built geo feed is not the snapshot with the rule")
	}
	// Figures that a change of the rule or the data must be looked at for.
	if got.Entries < 2000 || got.Entries > 3000 || got.ASes < 1400 || got.ASes > 2000 {
		t.Errorf("moved %d ranges of %d networks; expected about 2,500 of 1,700", got.Entries, got.ASes)
	}
	for addr, want := range map[string]string{
		"2001:44c8:4000::1234": "TH", // AIS (AS45430)
		"2001:4490::1":         "IN", // BSNL (AS9829)
		"2001:fd8::1":          "PH", // Globe (AS4775)
		"2001:c20:10::1":       "SG", // SingNet (AS3758)
		"2001:fb0::1":          "TH", // True (AS7470)
		"2001:4488::1":         "ID", // Telkom Indonesia (AS7713)
		"2001:fe8::1":          "AU", // Supernet PK: 75% of its IPv4 space in PK (22% NZ)
		"2001:200::1":          "JP", // WIDE, curated
		"2001:218::1":          "JP", // NTT, curated
		"2001:8000::1":         "AU", // Telstra
	} {
		if c := countryOf(g, addr); c != want {
			t.Errorf("%s: %s, want %s (table said %s)", addr, c, want, countryOf(before, addr))
		}
	}
}

// TestRefinedLast: an update that brings the AS tables and the geo feed
// assembles the geo feed after them, whatever the order of the sources.
func TestRefinedLast(t *testing.T) {
	got := refinedLast([]string{FeedGeo, FeedTor, FeedASN, FeedASNInfo})
	if want := []string{FeedTor, FeedASN, FeedASNInfo, FeedGeo}; !slices.Equal(got, want) {
		t.Fatalf("%v, want %v", got, want)
	}
	if got := refinedLast([]string{FeedGeo, FeedTor}); !slices.Equal(got, []string{FeedGeo, FeedTor}) {
		t.Fatalf("without the AS tables: %v", got)
	}
}

// TestInputShrankSkipsTheRule: the rule's count is no download; an
// upstream that fixed its own filler (the rule moves nothing) is not
// refused, while a collapsed download still is.
func TestInputShrankSkipsTheRule(t *testing.T) {
	prev := []feedfile.Input{{Name: "v4", Entries: 1000}, {Name: "v6", Entries: 1000}, {Name: auFillerRule, Entries: 2462}}
	cur := []feedfile.Input{{Name: "v4", Entries: 1000}, {Name: "v6", Entries: 1000}, {Name: auFillerRule, Entries: 0}}
	if err := inputShrank(prev, cur, nil); err != nil {
		t.Fatal(err)
	}
	cur[1].Entries = 10
	if err := inputShrank(prev, cur, nil); err == nil {
		t.Fatal("a collapsed IPv6 source passed")
	}
}

// TestUpdateGeoAppliesTheRule: `fraudd feeds update` with the geo tables
// from an upstream assembles the geo feed as the build does, rule
// included, with the AS tables in use; a truncated IPv6 table is still
// refused.
func TestUpdateGeoAppliesTheRule(t *testing.T) {
	needShared(t)
	v4, err := readMaybeGzip(filepath.Join(sharedData, "geo/geo-whois-asn-country-ipv4.csv.gz"))
	if err != nil {
		t.Fatal(err)
	}
	v6, err := readMaybeGzip(filepath.Join(sharedData, "geo/geo-whois-asn-country-ipv6.csv.gz"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(v6), "\n")
	up := newUpstream(t, map[string]string{
		"/v4":    string(v4),
		"/v6":    string(v6),
		"/v6cut": strings.Join(lines[:len(lines)/3], ""),
	})
	emb, err := netlists.LoadEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rep, err := Update(context.Background(), up.Client(), []Source{
		{Feed: FeedGeo, URL: up.URL + "/v4", Format: FormatGeoRanges},
		{Feed: FeedGeo, URL: up.URL + "/v6cut", Format: FormatGeoRanges},
	}, dir, emb)
	if err != nil {
		t.Fatal(err)
	}
	if f := rep.Feeds[0]; f.Status != StatusRejected || !strings.Contains(f.Err.Error(), "source 2") {
		t.Fatalf("a truncated IPv6 table: %s %v", f.Status, f.Err)
	}
	rep, err = Update(context.Background(), up.Client(), []Source{
		{Feed: FeedGeo, URL: up.URL + "/v4", Format: FormatGeoRanges},
		{Feed: FeedGeo, URL: up.URL + "/v6", Format: FormatGeoRanges},
	}, dir, emb)
	if err != nil {
		t.Fatal(err)
	}
	if f := rep.Feeds[0]; f.Status != StatusUpdated {
		t.Fatalf("geo: %s %v", f.Status, f.Err)
	}
	got, err := netlists.ReadFeed(dir, FeedGeo)
	if err != nil {
		t.Fatal(err)
	}
	b, err := netlists.ReadEmbedded(FeedGeo)
	if err != nil {
		t.Fatal(err)
	}
	want, err := feedfile.Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Ranges.Labels, want.Ranges.Labels) || !slices.Equal(got.Ranges.V6.Start, want.Ranges.V6.Start) ||
		!slices.Equal(got.Ranges.V6.End, want.Ranges.V6.End) || !slices.Equal(got.Ranges.V6.Val, want.Ranges.V6.Val) ||
		!slices.Equal(got.Ranges.V4.Start, want.Ranges.V4.Start) || !slices.Equal(got.Ranges.V4.Val, want.Ranges.V4.Val) {
		t.Fatal("the updated geo feed differs from the built one")
	}
	if in := got.Inputs[len(got.Inputs)-1]; in.Name != auFillerRule || in.Entries != want.Inputs[len(want.Inputs)-1].Entries {
		t.Fatalf("rule input %+v", in)
	}
	s, err := netlists.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c := s.Country(netip.MustParseAddr("2001:44c8:4000::1234")); c != "TH" {
		t.Fatalf("AIS after the update: %s", c)
	}
}
