package feeds

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/fraudd/fraudd/intel/netlists/feedfile"
)

// addrs renders the spans of a parse as text, for comparisons.
func spanText(sp []span) []string {
	var out []string
	for _, s := range sp {
		if s.v4 {
			lo, hi := uint32(s.lo.Lo), uint32(s.hi.Lo)
			out = append(out, netip.AddrFrom4([4]byte{byte(lo >> 24), byte(lo >> 16), byte(lo >> 8), byte(lo)}).String()+"-"+
				netip.AddrFrom4([4]byte{byte(hi >> 24), byte(hi >> 16), byte(hi >> 8), byte(hi)}).String()+label(s))
		} else {
			out = append(out, s.lo.Addr().String()+"-"+s.hi.Addr().String()+label(s))
		}
	}
	return out
}

func label(s span) string {
	if s.label != "" {
		return " " + s.label
	}
	return ""
}

func eq(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %q, want %q", what, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: got %q, want %q", what, got, want)
		}
	}
}

func mustParse(t *testing.T, f Format, data string) *parsed {
	t.Helper()
	p, err := parse(f, []byte(data))
	if err != nil {
		t.Fatalf("%s: %v", f, err)
	}
	return p
}

func TestParseAddrLines(t *testing.T) {
	p := mustParse(t, FormatAddrLines, `# Last updated: 2026-08-22T06:27:21.248Z
1.2.3.4
  10.0.0.0/8   # comment
104.28.28.79
192.168.1.7/24
2001:db8::/32
::ffff:1.2.3.4
5.6.7.8-5.6.7.10
not an address
`)
	eq(t, "spans", spanText(p.spans), []string{
		"1.2.3.4-1.2.3.4", "10.0.0.0-10.255.255.255", "104.28.28.79-104.28.28.79",
		"192.168.1.0-192.168.1.255", "2001:db8::-2001:db8:ffff:ffff:ffff:ffff:ffff:ffff",
		"1.2.3.4-1.2.3.4", "5.6.7.8-5.6.7.10",
	})
	if p.skipped != 1 || p.date != "2026-08-22" {
		t.Fatalf("skipped %d, date %q", p.skipped, p.date)
	}
}

func TestParseRejectsWrongFile(t *testing.T) {
	_, err := parse(FormatAddrLines, []byte("<html><body>Rate limited</body></html>\n"))
	if !errors.Is(err, errNothing) {
		t.Fatalf("HTML page: %v", err)
	}
	if _, err := parse(FormatOnionoo, []byte("<html>")); err == nil {
		t.Fatal("HTML as Onionoo accepted")
	}
	if _, err := parse("nope", nil); err == nil {
		t.Fatal("unknown format accepted")
	}
}

func TestParseProxyLines(t *testing.T) {
	p := mustParse(t, FormatProxyLines, "socks4://144.31.222.106:7890\nhttp://85.8.47.198:7080\n1.2.3.4:80\nhttp://[2001:4860::1]:8080\nhttp://10.0.0.1:80\nhttp://host.example:80\n")
	eq(t, "proxies", spanText(p.spans), []string{
		"144.31.222.106-144.31.222.106", "85.8.47.198-85.8.47.198", "1.2.3.4-1.2.3.4", "2001:4860::1-2001:4860::1",
	})
	if p.skipped != 2 { // a private address and a host name
		t.Fatalf("skipped %d", p.skipped)
	}
}

func TestParseIpsum(t *testing.T) {
	p := mustParse(t, FormatIpsum, `# IPsum Threat Intelligence Feed
#
# Last update: Sat, 22 Aug 2026 03:00:29 +0200
#
# IP	number of (black)lists
#
77.90.185.20	10
2.57.122.53	3
45.154.244.193	2
1.1.1.1	1
`)
	eq(t, "ipsum", spanText(p.spans), []string{"77.90.185.20-77.90.185.20", "2.57.122.53-2.57.122.53"})
	if p.date != "2026-08-22" {
		t.Fatalf("date %q", p.date)
	}
}

func TestParseOnionoo(t *testing.T) {
	p := mustParse(t, FormatOnionoo, `{"version":"8.0","relays_published":"2026-09-01 12:00:00","relays":[
		{"or_addresses":["102.130.113.9:9001","[2001:1620:51a1::101]:9001"]},
		{"or_addresses":["5.6.7.8:443"],"exit_addresses":["5.6.7.9"]},
		{"or_addresses":["10.1.1.1:9001"]}
	]}`)
	eq(t, "onionoo", spanText(p.spans), []string{
		"102.130.113.9-102.130.113.9", "2001:1620:51a1::101-2001:1620:51a1::101",
		"5.6.7.8-5.6.7.8", "5.6.7.9-5.6.7.9",
	})
	if p.date != "2026-09-01" || p.skipped != 1 {
		t.Fatalf("date %q skipped %d", p.date, p.skipped)
	}
}

func TestParseGeofeedAndCloud(t *testing.T) {
	p := mustParse(t, FormatGeofeed, "172.224.226.0/27,GB,GB-EN,London,\n2a02:26f7:b3c0:4000::/64,DE,DE-BE,Berlin,\n")
	eq(t, "geofeed", spanText(p.spans), []string{
		"172.224.226.0-172.224.226.31", "2a02:26f7:b3c0:4000::-2a02:26f7:b3c0:4000:ffff:ffff:ffff:ffff",
	})
	p = mustParse(t, FormatCloudCSV, "cidr,provider\n1.178.1.0/24,aws\n8.34.208.0/20,GCP\nbad,aws\n")
	eq(t, "cloud", spanText(p.spans), []string{"1.178.1.0-1.178.1.255 aws", "8.34.208.0-8.34.223.255 gcp"})
	if p.skipped != 1 {
		t.Fatalf("skipped %d", p.skipped)
	}
}

func TestParseTables(t *testing.T) {
	p := mustParse(t, FormatASNRanges, "1.0.0.0,1.0.0.255,13335,\"Cloudflare, Inc.\"\n2001::,2001::ffff:ffff:ffff:ffff:ffff:ffff,6939,HE\n")
	if len(p.spans) != 2 || p.spans[0].value != 13335 || p.spans[1].value != 6939 || p.spans[1].v4 {
		t.Fatalf("asn ranges %+v", p.spans)
	}
	p = mustParse(t, FormatGeoRanges, "1.0.0.0,1.0.0.255,AU\n1.0.1.0,1.0.3.255,cn\n1.0.4.0,1.0.4.9,ZZZ\n")
	eq(t, "geo", spanText(p.spans), []string{"1.0.0.0-1.0.0.255 AU", "1.0.1.0-1.0.3.255 CN"})
	p = mustParse(t, FormatASNOrgCC, "asn,org,registration_country\n1,\"Level 3 Communications, Inc.\",US\n7,NoCountry,\n")
	if len(p.asns) != 2 || p.asns[0] != (feedfile.ASN{ASN: 1, Name: "Level 3 Communications, Inc.", Country: "US"}) || p.asns[1].Country != "" {
		t.Fatalf("asn info %+v", p.asns)
	}
	p = mustParse(t, FormatASNList, "AS45090 # Tencent cloud\nAS3223 # VOXILITY, RO\n# comment\n")
	if len(p.asns) != 2 || p.asns[0].ASN != 45090 || p.asns[1].ASN != 3223 {
		t.Fatalf("asn list %+v", p.asns)
	}
	p = mustParse(t, FormatBadASNCSV, "ASN,Entity\n198375,\"INULOGIC SARL, FR\"\n51447, \"RootLayer Web Services Ltd, NL\"\n")
	if len(p.asns) != 2 || p.asns[1].ASN != 51447 || p.asns[1].Name != "RootLayer Web Services Ltd, NL" {
		t.Fatalf("bad asn %+v", p.asns)
	}
	p = mustParse(t, FormatProviderASN, "asn,provider,kind,asn_org_in_db,reg_cc\n16509,aws,cloud,\"Amazon.com, Inc.\",US\n50525,privadovpn,vpn,NOT_IN_DB,\n")
	if len(p.asns) != 2 || p.asns[0] != (feedfile.ASN{ASN: 16509, Name: "aws", Kind: "cloud", Country: "US"}) || p.asns[1].Country != "" {
		t.Fatalf("provider asn %+v", p.asns)
	}
	p = mustParse(t, FormatMobileASN, "asn,carrier,country,kind,confidence,note\n21928,T-Mobile USA,US,mobile,high,also see tmus-geofeed\n14593,Starlink (SpaceX),,satellite-cgnat,high,x\n")
	if len(p.asns) != 2 || p.asns[0].Name != "T-Mobile USA" || p.asns[1].Kind != "satellite-cgnat" {
		t.Fatalf("mobile %+v", p.asns)
	}
}

func TestParseDomainsAndZones(t *testing.T) {
	p := mustParse(t, FormatDomains, "# Fake and Temp Mail Providers\n# Last Update: 2026-02-18T00:14:44.419Z\n\n## mohmal.com\nWebXio.pro\nmailinator.com.\nnot a domain\nuser@x.com\n")
	eq(t, "domains", p.domains, []string{"webxio.pro", "mailinator.com"})
	if p.date != "2026-02-18" || p.skipped != 2 {
		t.Fatalf("date %q skipped %d", p.date, p.skipped)
	}
	p = mustParse(t, FormatZoneTab, "# comment\nAD\t+4230+00131\tEurope/Andorra\nAE,OM,RE\t+2518+05518\tAsia/Dubai\tCrozet\n")
	// zone1970.tab's other countries follow the zone's own, sorted.
	if len(p.zones) != 2 || p.zones[1] != (feedfile.Zone{Name: "Asia/Dubai", Country: "AE OM RE"}) {
		t.Fatalf("zone.tab %+v", p.zones)
	}
	p = mustParse(t, FormatTzCountry, "tz,country,countries_1970\nAsia/Calcutta,IN,IN\nUTC,,\n"+
		"Europe/Busingen,DE,CH DE LI\nAfrica/Asmera,KE,KE DJ ER ET\nEurope/Vaduz,LI,\nBad/Other,CH,CH de\n")
	if want := []feedfile.Zone{{Name: "Asia/Calcutta", Country: "IN"}, {Name: "Europe/Busingen", Country: "DE CH LI"},
		{Name: "Africa/Asmera", Country: "KE DJ ER ET"}, {Name: "Europe/Vaduz", Country: "LI"}}; !slices.Equal(p.zones, want) {
		t.Fatalf("tz_country %+v, want %+v", p.zones, want)
	}
	if p.skipped != 2 {
		t.Fatalf("tz_country skipped %d, want 2 (UTC, Bad/Other)", p.skipped)
	}
}

func TestDates(t *testing.T) {
	if d := nameDate("tor/exits_onionoo_2026-08-22.txt"); d != "2026-08-22" {
		t.Fatalf("nameDate = %q", d)
	}
	if d := nameDate("asn-ipv4.csv.gz"); d != "" {
		t.Fatalf("nameDate = %q", d)
	}
}

func TestAssembleCombines(t *testing.T) {
	sp, _ := specByName(FeedVPN)
	f, err := assemble(sp, []input{
		{part: part{format: FormatAddrLines, date: "2026-08-01"}, name: "a", data: []byte("104.28.0.0/16\n9.9.9.0/24\n")},
		{part: part{format: FormatAddrLines, exclude: true, date: "2026-09-09"}, name: "apple", data: []byte("104.28.28.0/24\n")},
	})
	if err != nil {
		t.Fatal(err)
	}
	// The excluded input's date does not make the feed look newer.
	if f.Date != "2026-08-01" || f.Entries != 2 || len(f.Inputs) != 2 {
		t.Fatalf("header %+v", f.Header)
	}
	want := []uint32{9<<24 | 9<<16 | 9<<8, 104<<24 | 28<<16, 104<<24 | 28<<16 | 29<<8}
	if got := f.Ranges.V4.Start; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("starts %x", got)
	}
	if _, err := assemble(sp, []input{{part: part{format: FormatAddrLines}, name: "empty", data: []byte("# nothing\n")}}); err == nil {
		t.Fatal("empty feed assembled")
	}
}

// TestAssembleExcludesASNs: an exclusion input of an AS feed takes its AS
// numbers out of the feed, whichever input named them.
func TestAssembleExcludesASNs(t *testing.T) {
	sp, _ := specByName(FeedDatacenterAS)
	f, err := assemble(sp, []input{
		{part: part{format: FormatBadASNCSV, date: "2026-03-18"}, name: "bad", data: []byte("ASN,Entity\n24940,\"HETZNER, DE\"\n29465,\"VCG-AS, NG\"\n")},
		{part: part{format: FormatASNList, date: "2026-08-22"}, name: "x4b", data: []byte("AS16276 # OVH\nAS29465\n")},
		{part: part{format: FormatBadASNCSV, exclude: true, curated: true, date: "2026-11-28"}, name: "not-hosting", data: []byte("asn,org\n29465,MTN NIGERIA Communication limited\n")},
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []uint32
	for _, a := range f.ASNs {
		got = append(got, a.ASN)
	}
	if len(got) != 2 || got[0] != 16276 || got[1] != 24940 || f.Entries != 2 {
		t.Fatalf("ASNs %v, entries %d; want [16276 24940], 2", got, f.Entries)
	}
	if f.Date != "2026-08-22" {
		t.Fatalf("date %s: the exclusion list dated the feed", f.Date)
	}
}

func TestParseIP2ASN(t *testing.T) {
	table := "1.0.0.0\t1.0.0.255\t13335\tUS\tCLOUDFLARENET\n" +
		"1.0.1.0\t1.0.3.255\t0\tNone\tNot routed\n" +
		"1.0.4.0\t1.0.7.255\t38803\tAU\tGTELECOM-AUSTRALIA Gtelecom #2\n" +
		"2001:200::\t2001:200:ffff:ffff:ffff:ffff:ffff:ffff\t2500\tJP\tWIDE-BB WIDE Project\n" +
		"1.0.8.0\tnot-an-address\t1\tUS\tbroken\n"
	p := mustParse(t, FormatIP2ASN, table)
	eq(t, "ranges", spanText(p.spans), []string{"1.0.0.0-1.0.0.255", "1.0.4.0-1.0.7.255", "2001:200::-2001:200:ffff:ffff:ffff:ffff:ffff:ffff"})
	if p.spans[0].value != 13335 || p.spans[2].value != 2500 || p.skipped != 1 {
		t.Errorf("values %d %d, skipped %d", p.spans[0].value, p.spans[2].value, p.skipped)
	}
	p = mustParse(t, FormatIP2ASNInfo, table)
	want := []feedfile.ASN{{ASN: 13335, Name: "CLOUDFLARENET", Country: "US"}, {ASN: 38803, Name: "GTELECOM-AUSTRALIA Gtelecom #2", Country: "AU"}, {ASN: 2500, Name: "WIDE-BB WIDE Project", Country: "JP"}, {ASN: 1, Name: "broken", Country: "US"}}
	if len(p.asns) != len(want) {
		t.Fatalf("asns %+v", p.asns)
	}
	for i := range want {
		if p.asns[i] != want[i] {
			t.Errorf("asn %d: %+v, want %+v", i, p.asns[i], want[i])
		}
	}
	if _, err := parse(FormatIP2ASN, []byte("<html>maintenance</html>\n")); err == nil {
		t.Error("an HTML page read as an AS table")
	}
}

// FuzzParse feeds every input format arbitrary bytes: a parser may reject
// them but must not panic, and what it reads must be well formed.
func FuzzParse(f *testing.F) {
	formats := []Format{FormatAddrLines, FormatAddrs, FormatProxyLines, FormatIpsum, FormatOnionoo, FormatGeofeed, FormatCloudCSV,
		FormatASNRanges, FormatGeoRanges, FormatASNOrgCC, FormatASNList, FormatBadASNCSV, FormatProviderASN,
		FormatMobileASN, FormatDomains, FormatZoneTab, FormatTzCountry, FormatIP2ASN, FormatIP2ASNInfo}
	f.Add(uint8(16), []byte("1.0.0.0\t1.0.0.255\t13335\tUS\tCLOUDFLARENET\n"))
	f.Add(uint8(0), []byte("1.2.3.4\n10.0.0.0/8\n1.2.3.4-1.2.3.9\n"))
	f.Add(uint8(3), []byte(`{"relays":[{"or_addresses":["1.2.3.4:9001"]}]}`))
	f.Add(uint8(11), []byte("asn,provider,kind\n16509,aws,cloud\n"))
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		p, err := parse(formats[int(which)%len(formats)], data)
		if err != nil {
			return
		}
		for _, s := range p.spans {
			if s.hi.Less(s.lo) || s.v4 && (s.hi.Hi != 0 || s.hi.Lo > 0xffffffff) {
				t.Fatalf("bad span %+v", s)
			}
		}
		for _, a := range p.asns {
			if a.ASN == 0 {
				t.Fatalf("AS 0 read: %+v", a)
			}
		}
	})
}

// TestAddrFormatsRefuseWideAndGarbled: a Tor exit list holds single public
// addresses, so a range, a CIDR or a private address in it is not read;
// a range list refuses blocks wider than an IPv4 /8 or an IPv6 /16.
func TestAddrFormatsRefuseWideAndGarbled(t *testing.T) {
	p := mustParse(t, FormatAddrs, "12.0.0.1\n0.0.0.0/1\n128.0.0.0-191.255.255.255\n10.0.0.1\n2001:db8::1\n2a00:1450::1\n::ffff:13.0.0.1\n")
	var got []string
	for _, sp := range p.spans {
		got = append(got, fmt.Sprint(sp.v4, sp.lo, sp.hi))
	}
	if len(p.spans) != 3 || p.skipped != 4 {
		t.Fatalf("addrs: %d spans %v, %d skipped; want 12.0.0.1, 2a00:1450::1, 13.0.0.1 and 4 skipped", len(p.spans), got, p.skipped)
	}
	p = mustParse(t, FormatAddrLines, "1.0.0.0/9\n0.0.0.0/1\n2.0.0.0/8\n3.0.0.0-4.0.0.0\n2001:db8::/16\n2001::/15\n")
	if len(p.spans) != 3 || p.skipped != 3 {
		t.Fatalf("addr-lines: %d spans, %d skipped; want /9, /8 and the IPv6 /16, 3 skipped", len(p.spans), p.skipped)
	}
}
