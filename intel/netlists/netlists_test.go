package netlists

import (
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fraudd/fraudd/intel/netlists/feedfile"
)

var (
	embOnce sync.Once
	emb     *Snapshot
	embErr  error
)

func embeddedSnapshot(t testing.TB) *Snapshot {
	t.Helper()
	embOnce.Do(func() { emb, embErr = LoadEmbedded() })
	if embErr != nil {
		t.Fatal(embErr)
	}
	return emb
}

// want describes the fields of a Classification a case checks; fields left
// at their zero value must be zero too, except those named in skip.
type classCase struct {
	addr string
	want Classification
	// The AS, organisation and countries come from large tables; a case
	// checks them only when it sets ASN.
}

func TestClassifyFacts(t *testing.T) {
	s := embeddedSnapshot(t)
	cases := []classCase{
		// The facts.
		{"8.8.8.8", Classification{Datacenter: true, Service: "Google", ASN: 15169, Org: "Google LLC", Country: "US", RegCountry: "US"}},
		{"1.178.1.1", Classification{Cloud: "aws", Datacenter: true, Service: "AWS", ASN: 16509}},
		{"102.130.113.9", Classification{Tor: true, Service: "TOR", ASN: 328364}},
		{"104.28.28.1", Classification{PrivacyRelay: true, Service: "iCloud Private Relay", ASN: 13335}},
		{"73.0.0.1", Classification{ASN: 7922, Org: "Comcast Cable Communications, LLC", Country: "US", RegCountry: "US"}},
		// IPv6.
		{"2001:4860:4860::8888", Classification{Datacenter: true, Service: "Google", ASN: 15169}},
		{"2001:3fc0:800::1", Classification{Cloud: "aws", Datacenter: true, Service: "AWS"}},
		{"2001:1620:51a1::101", Classification{Tor: true, Service: "TOR"}},
		{"2606:54c0::1", Classification{PrivacyRelay: true, Service: "iCloud Private Relay", ASN: 13335}},
		// IPv4-mapped input reads as the IPv4 address.
		{"::ffff:8.8.8.8", Classification{Datacenter: true, Service: "Google", ASN: 15169}},
		// VPN providers: a named list, and the generic list labelled by ASN.
		{"23.144.160.67", Classification{VPN: true, VPNService: "Mullvad", Service: "Mullvad"}}, // not in the X4B datacenter list
		{"31.171.155.134", Classification{VPN: true, VPNService: "Private Internet Access", Service: "Private Internet Access", Datacenter: true}},
		{"2.56.252.1", Classification{VPN: true, VPNService: "NordVPN", Service: "NordVPN", Datacenter: true, ASN: 136787}},
		// Open proxy, blocklist, datacenter by ASN, mobile carrier.
		{"144.31.222.106", Classification{OpenProxy: true}},
		{"77.90.185.20", Classification{Blocklisted: true}},
		{"5.9.0.1", Classification{Datacenter: true, Service: "Hetzner", ASN: 24940}},
		{"172.32.0.1", Classification{Mobile: true, Carrier: "T-Mobile USA", ASN: 21928}},
	}
	for _, tc := range cases {
		got := s.Classify(netip.MustParseAddr(tc.addr))
		w := tc.want
		check := func(name string, g, x any) {
			if g != x {
				t.Errorf("%s: %s = %v, want %v (all: %+v)", tc.addr, name, g, x, got)
			}
		}
		check("Tor", got.Tor, w.Tor)
		check("PrivacyRelay", got.PrivacyRelay, w.PrivacyRelay)
		check("VPN", got.VPN, w.VPN)
		check("VPNService", got.VPNService, w.VPNService)
		check("OpenProxy", got.OpenProxy, w.OpenProxy)
		check("Cloud", got.Cloud, w.Cloud)
		if w.Datacenter || !(w.OpenProxy || w.Blocklisted || w.Tor) {
			check("Datacenter", got.Datacenter, w.Datacenter)
		}
		if w.Service != "" || !w.OpenProxy {
			check("Service", got.Service, w.Service)
		}
		if w.Blocklisted {
			check("Blocklisted", got.Blocklisted, true)
		}
		if w.Mobile {
			check("Mobile", got.Mobile, true)
			check("Carrier", got.Carrier, w.Carrier)
		}
		if w.ASN != 0 {
			check("ASN", got.ASN, w.ASN)
		}
		if w.Org != "" {
			check("Org", got.Org, w.Org)
			check("Country", got.Country, w.Country)
			check("RegCountry", got.RegCountry, w.RegCountry)
		}
	}
}

func TestResidentialIsNothing(t *testing.T) {
	s := embeddedSnapshot(t)
	for _, a := range []string{"73.0.0.1", "73.15.200.9", "24.0.0.1"} {
		c := s.Classify(netip.MustParseAddr(a))
		if c.Anonymous() || c.Cloud != "" || c.Datacenter || c.Blocklisted || c.Service != "" {
			t.Errorf("%s: %+v, want no signal", a, c)
		}
		if c.ASN != 7922 {
			t.Errorf("%s: ASN %d, want Comcast 7922", a, c.ASN)
		}
	}
}

// TestNigerianCarriersAreNotDatacenter: MTN Nigeria (AS29465, on the
// project's own mobile carrier list) and Airtel Nigeria (AS36873, Airtel
// Networks Limited) are the country's two largest mobile networks. Only
// brianhama's bad-ASN list names them (as "VCG-AS, NG" and "VNL1-AS, NG",
// among universities and a bank of the same country); X4B's datacenter AS
// list, which carries the rest of those rows, left both out. Every
// subscriber of either read datacenter through datacenter_asn.
func TestNigerianCarriersAreNotDatacenter(t *testing.T) {
	s := embeddedSnapshot(t)
	for _, tc := range []struct {
		addr   string
		asn    uint32
		mobile bool
	}{
		{"41.206.0.1", 29465, true},       // MTN Nigeria
		{"41.220.79.255", 29465, true},    // MTN Nigeria, last address of a row
		{"105.112.0.1", 36873, false},     // Airtel Nigeria (on no carrier list)
		{"105.120.255.255", 36873, false}, // last address of a row
	} {
		c := s.Classify(netip.MustParseAddr(tc.addr))
		if c.ASN != tc.asn {
			t.Fatalf("%s: AS%d, want AS%d", tc.addr, c.ASN, tc.asn)
		}
		if c.Datacenter || c.Anonymous() || c.Sources != 0 || c.Mobile != tc.mobile {
			t.Errorf("%s (AS%d): datacenter %v, sources %b, mobile %v; want a carrier's subscriber",
				tc.addr, tc.asn, c.Datacenter, c.Sources, c.Mobile)
		}
	}
}

func TestRegistrationCountryIsTheAS(t *testing.T) {
	// SOURCES.md: 1.1.1.1 is registered to a US AS although APNIC delegated
	// the prefix (AU).
	c := embeddedSnapshot(t).Classify(netip.MustParseAddr("1.1.1.1"))
	if c.ASN != 13335 || c.RegCountry != "US" {
		t.Fatalf("1.1.1.1: ASN %d, RegCountry %q; want 13335, US", c.ASN, c.RegCountry)
	}
}

// TestGeoFixWIDE: the IPv6 country table's known bug (SOURCES.md) puts the
// WIDE Project's 2001:200::/32 in AU, and with it, as filler between the
// table's own rows, NTT's 2001:218::/32; the curated fix reads them as JP,
// no further than the blocks, and keeps the table's rows for NTT's PoPs in
// other countries (a Hong Kong /64).
func TestGeoFixWIDE(t *testing.T) {
	s := embeddedSnapshot(t)
	for addr, want := range map[string]string{
		"2001:200::1":                         "JP",
		"2001:200:ffff:ffff:ffff:ffff:ffff:1": "JP",
		"2001:201::1":                         "AU", // the table's own row beyond the block
		"2001:218::1":                         "JP",
		"2001:218:2000:51::1":                 "JP",
		"2001:218:2004::1":                    "JP", // a filler row the fix has the same range as
		"2001:218:6000:2::1":                  "HK",
		"2001:218:ffff::1":                    "JP",
		"2001:219::1":                         "AU",
	} {
		if c := s.Classify(netip.MustParseAddr(addr)); c.Country != want {
			t.Errorf("%s: Country %q, want %s", addr, c.Country, want)
		}
	}
}

// TestGeoAUFiller: the IPv6 table's AU filler (SOURCES.md's known bug) runs
// through whole APNIC allocations of networks elsewhere; the build's
// AU-filler rule (intel/feeds/aufiller.go) gives an announced block the
// country of its AS when that AS is a single-country network of another
// APNIC country, and leaves Australian networks, multinationals and
// unannounced filler AU.
func TestGeoAUFiller(t *testing.T) {
	s := embeddedSnapshot(t)
	for _, c := range []struct {
		addr, want string
		asn        uint32
	}{
		{"2001:44c8:4000::1234", "TH", 45430}, // AIS (Advanced Wireless Network), Bangkok
		{"2001:4490::1", "IN", 9829},          // BSNL
		{"2001:4490:60::1", "IN", 9829},
		{"2001:fd8::1", "PH", 4775},    // Globe Telecom
		{"2001:c20:10::1", "SG", 3758}, // SingNet
		{"2001:fb0::1", "TH", 7470},    // True Internet
		{"2001:4488::1", "ID", 7713},   // Telkom Indonesia
		{"2001:200::1", "JP", 2500},    // WIDE: the curated fix, which the rule agrees with
		{"2001:218::1", "JP", 0},       // NTT: the curated fix
		{"2001:8000::1", "AU", 1221},   // Telstra: Australian
		{"2001:fe8::1", "AU", 24435},   // Supernet PK: a quarter of its IPv4 space abroad
	} {
		got := s.Classify(netip.MustParseAddr(c.addr))
		if got.Country != c.want || c.asn != 0 && got.ASN != c.asn {
			t.Errorf("%s: %s AS%d, want %s AS%d", c.addr, got.Country, got.ASN, c.want, c.asn)
		}
	}
	var rule *feedfile.Input
	for _, f := range s.Feeds() {
		if f.Name == FeedGeo && len(f.Inputs) > 0 {
			rule = &f.Inputs[len(f.Inputs)-1]
		}
	}
	if rule == nil || !strings.HasPrefix(rule.Name, "rule:au-filler") || rule.Entries < 2000 {
		t.Fatalf("the geo feed's header does not name the rule: %+v", rule)
	}
}

func TestBare(t *testing.T) {
	s := embeddedSnapshot(t)
	tests := []struct {
		addr    string
		known   bool
		tor     bool
		dch     bool
		cloud   string
		verdict string
		score   int
		asn     uint32
	}{
		{"102.130.113.9", true, true, false, "", VerdictBlock, 90, 328364},
		{"2001:1620:51a1::101", true, true, false, "", VerdictBlock, 90, 0},
		{"1.178.1.1", true, false, true, "aws", VerdictReview, 40, 16509},
		{"8.34.208.1", true, false, true, "gcp", VerdictReview, 40, 0},
		{"73.0.0.1", false, false, false, "", VerdictAllow, 0, 7922},
		// Bare lookups ignore VPN, relay, proxy and datacenter lists.
		{"8.8.8.8", false, false, false, "", VerdictAllow, 0, 15169},
		{"23.144.160.67", false, false, false, "", VerdictAllow, 0, 0},
		{"104.28.28.1", false, false, false, "", VerdictAllow, 0, 13335},
	}
	for _, tt := range tests {
		r := s.Bare(netip.MustParseAddr(tt.addr))
		if r.Known != tt.known || r.Tor != tt.tor || r.Anonymous != tt.tor || r.Datacenter != tt.dch ||
			r.Cloud != tt.cloud || r.Verdict != tt.verdict || r.RiskScore != tt.score ||
			(tt.asn != 0 && r.ASN != tt.asn) {
			t.Errorf("Bare(%s) = %+v", tt.addr, r)
		}
		if r.ASN != 0 && r.Org == "" {
			t.Errorf("Bare(%s): ASN %d without org", tt.addr, r.ASN)
		}
	}
}

func TestDisposableEmail(t *testing.T) {
	s := embeddedSnapshot(t)
	yes := []string{
		"mailinator.com", "user@mailinator.com", "USER@MAILINATOR.COM", "sub.mailinator.com",
		"a.b.sub.mailinator.com", "x@Sub.Mailinator.Com", " mailinator.com. ", "someone@mailinator.co.uk",
		// Internationalised forms of listed names: the list holds the
		// A-label of דוארזבל.com; IDNA maps the ideographic full stop and
		// full-width letters.
		"xn--4dbceig1b7e.com", "user@דוארזבל.com", "user@mailinator。com", "user@ｍａｉｌｉｎａｔｏｒ.com",
	}
	no := []string{
		"gmail.com", "user@gmail.com", "com", "", "@", "user@", "mailinator", "example.org", "xmailinator.com.example.org",
		"mailinator.com.evil.example", "user@mailinator.com@gmail.com", "user@ｇｍａｉｌ.com", "user@\xff.com",
	}
	for _, e := range yes {
		if !s.DisposableEmail(e) {
			t.Errorf("DisposableEmail(%q) = false, want true", e)
		}
	}
	for _, e := range no {
		if s.DisposableEmail(e) {
			t.Errorf("DisposableEmail(%q) = true, want false", e)
		}
	}
}

func TestZoneCountry(t *testing.T) {
	s := embeddedSnapshot(t)
	tests := []struct{ tz, cc string }{
		{"Europe/Berlin", "DE"}, {"Asia/Calcutta", "IN"}, {"Asia/Kolkata", "IN"},
		{"Asia/Saigon", "VN"}, {"US/Eastern", "US"}, {"America/New_York", "US"},
		{"Europe/Kiev", "UA"}, {"Australia/Sydney", "AU"}, {"America/Montreal", "CA"},
	}
	for _, tt := range tests {
		if cc, ok := s.ZoneCountry(tt.tz); !ok || cc != tt.cc {
			t.Errorf("ZoneCountry(%q) = %q, %v; want %q", tt.tz, cc, ok, tt.cc)
		}
	}
	for _, tz := range []string{"europe/berlin", "Mars/Olympus", "", "UTC", "Etc/GMT+5"} {
		if cc, ok := s.ZoneCountry(tz); ok {
			t.Errorf("ZoneCountry(%q) = %q, want unknown", tz, cc)
		}
	}
}

// TestZoneCountriesShared: a zone tzdata uses in several countries matches
// each of them (zone1970.tab's first column; tz_country.csv's
// countries_1970 for backward names), and no other; ZoneCountry stays the
// zone's own country.
func TestZoneCountriesShared(t *testing.T) {
	s := embeddedSnapshot(t)
	uses := func(tz, cc string) bool {
		own, others, ok := s.ZoneCountries(tz)
		if !ok {
			t.Fatalf("ZoneCountries(%q) unknown", tz)
		}
		if c, _ := s.ZoneCountry(tz); c != own {
			t.Fatalf("ZoneCountry(%q) = %q, ZoneCountries %q", tz, c, own)
		}
		return own == cc || slices.Contains(strings.Fields(others), cc)
	}
	for _, c := range []struct{ tz, own, used, notUsed string }{
		{"Europe/Zurich", "CH", "CH DE LI", "FR AT"},
		{"Europe/Busingen", "DE", "DE CH LI", "FR"},
		{"Europe/Vaduz", "LI", "LI", "FR"},
		{"Europe/Berlin", "DE", "DE DK NO SE SJ", "CH PL FR"},
		{"Europe/Copenhagen", "DK", "DK", "FR"},
		{"Arctic/Longyearbyen", "SJ", "SJ NO DE DK SE", "FI"},
		{"Asia/Riyadh", "SA", "SA AQ KW YE", "AE"},
		{"Asia/Kuwait", "KW", "KW", "US"},
		{"America/Puerto_Rico", "PR", "PR AG AI AW BL BQ CA CW DM GD GP KN LC MF MS SX TT VC VG VI", "US DO"},
		{"Africa/Lagos", "NG", "NG AO BJ CD CF CG CM GA GQ NE", "GH ZA"},
		{"Africa/Maputo", "MZ", "MZ BI BW CD MW RW ZM ZW", "ZA"},
		{"Africa/Abidjan", "CI", "CI BF GH GM GN IS ML MR SH SL SN TG", "NG"},
		{"Asia/Bangkok", "TH", "TH CX KH LA VN", "MY"},
		{"Pacific/Port_Moresby", "PG", "PG AQ FM", "AU"},
		{"Asia/Dubai", "AE", "AE OM RE SC TF", "SA"},
		{"America/Toronto", "CA", "CA BS", "US"},
		{"America/Panama", "PA", "PA CA KY", "US"},
		{"America/Phoenix", "US", "US CA", "MX"},
		{"Europe/Simferopol", "UA", "UA RU", "BY"},
		{"Europe/Belgrade", "RS", "RS BA HR ME MK SI", "HU"},
		{"Asia/Tokyo", "JP", "JP AU", "KR"},
		{"Asia/Calcutta", "IN", "IN", "PK"},
		{"Europe/Kiev", "UA", "UA", "RU"},
		{"Asia/Saigon", "VN", "VN", "TH"},
		{"America/Buenos_Aires", "AR", "AR", "UY"},
		{"US/Eastern", "US", "US", "CA"},
		// Backward names whose table country was the link target's.
		{"Africa/Asmera", "KE", "ER", "US"},
		{"Africa/Timbuktu", "CI", "ML", "US"},
		{"America/Coral_Harbour", "PA", "CA", "US"},
		{"Pacific/Ponape", "SB", "FM", "US"},
		{"Pacific/Truk", "PG", "FM", "US"},
		{"Pacific/Yap", "PG", "FM", "US"},
		{"Iceland", "CI", "IS", "US"},
		{"Atlantic/Jan_Mayen", "DE", "SJ NO", "US"},
		{"America/Virgin", "PR", "VI", "US"},
	} {
		if own, _, _ := s.ZoneCountries(c.tz); own != c.own {
			t.Errorf("ZoneCountries(%q) own %q, want %q", c.tz, own, c.own)
		}
		for _, cc := range strings.Fields(c.used) {
			if !uses(c.tz, cc) {
				t.Errorf("%s is not used in %s", c.tz, cc)
			}
		}
		for _, cc := range strings.Fields(c.notUsed) {
			if uses(c.tz, cc) {
				t.Errorf("%s is used in %s", c.tz, cc)
			}
		}
	}
	// Countries with several zones: each zone is the country's own.
	for cc, zones := range map[string]string{
		"US": "America/New_York America/Chicago America/Denver America/Los_Angeles America/Anchorage Pacific/Honolulu America/Detroit America/Indiana/Indianapolis US/Pacific",
		"RU": "Europe/Moscow Asia/Yekaterinburg Asia/Novosibirsk Asia/Vladivostok Europe/Kaliningrad Asia/Kamchatka",
		"BR": "America/Sao_Paulo America/Manaus America/Recife America/Noronha America/Rio_Branco Brazil/East",
		"AU": "Australia/Sydney Australia/Perth Australia/Adelaide Australia/Brisbane Australia/Darwin Australia/Hobart Antarctica/Macquarie",
		"CA": "America/Toronto America/Vancouver America/Edmonton America/Winnipeg America/Halifax America/St_Johns America/Regina America/Montreal",
		"ID": "Asia/Jakarta Asia/Makassar Asia/Jayapura Asia/Pontianak",
		"MX": "America/Mexico_City America/Cancun America/Tijuana America/Hermosillo America/Monterrey",
		"KZ": "Asia/Almaty Asia/Qostanay Asia/Aqtobe Asia/Aqtau Asia/Oral",
	} {
		for _, tz := range strings.Fields(zones) {
			if own, _, _ := s.ZoneCountries(tz); own != cc {
				t.Errorf("ZoneCountries(%q) own %q, want %q", tz, own, cc)
			}
		}
	}
}

func TestCoverageAndFeeds(t *testing.T) {
	s := embeddedSnapshot(t)
	c := s.Coverage()
	if c.DCRanges < 40000 || c.CloudProviders != 9 || c.TorExits < 2000 || c.DisposableDomains < 70000 {
		t.Errorf("Coverage = %+v", c)
	}
	feeds := s.Feeds()
	if len(feeds) != len(FeedNames) {
		t.Fatalf("Feeds() has %d feeds, want %d", len(feeds), len(FeedNames))
	}
	for i, f := range feeds {
		if f.Name != FeedNames[i] || f.Source != SourceEmbedded || f.Entries <= 0 {
			t.Errorf("feed %d = %+v", i, f)
		}
		if f.Date == "" && f.Name != FeedTZ {
			t.Errorf("feed %s has no date", f.Name)
		}
	}
}

func TestNilSnapshot(t *testing.T) {
	var s *Snapshot
	a := netip.MustParseAddr("8.8.8.8")
	if c := s.Classify(a); c != (Classification{}) {
		t.Errorf("nil Classify = %+v", c)
	}
	if r := s.Bare(a); r.Known || r.Verdict != VerdictAllow {
		t.Errorf("nil Bare = %+v", r)
	}
	if s.DisposableEmail("mailinator.com") || s.Coverage() != (Coverage{}) || s.Feeds() != nil {
		t.Error("nil snapshot answered something")
	}
	if _, ok := s.ZoneCountry("Europe/Berlin"); ok {
		t.Error("nil ZoneCountry ok")
	}
	if c := embeddedSnapshot(t).Classify(netip.Addr{}); c != (Classification{}) {
		t.Errorf("Classify(zero addr) = %+v", c)
	}
}

func TestLookupsDoNotAllocate(t *testing.T) {
	s := embeddedSnapshot(t)
	addrs := []netip.Addr{
		netip.MustParseAddr("8.8.8.8"), netip.MustParseAddr("73.0.0.1"),
		netip.MustParseAddr("2606:54c0::1"), netip.MustParseAddr("102.130.113.9"),
	}
	n := testing.AllocsPerRun(200, func() {
		for _, a := range addrs {
			_ = s.Classify(a)
			_ = s.Bare(a)
		}
		_ = s.DisposableEmail("Someone@Sub.Mailinator.COM")
		_ = s.DisposableEmail("someone@gmail.com")
		_, _ = s.ZoneCountry("Asia/Calcutta")
		_, _, _ = s.ZoneCountries("Europe/Zurich")
		_ = s.Coverage()
	})
	if n != 0 {
		t.Fatalf("lookups allocate %v times per run", n)
	}
}

// writeFeed writes a feed file into dir/feeds.
func writeFeed(t *testing.T, dir string, f *feedfile.File) string {
	t.Helper()
	b, err := feedfile.Marshal(nil, f)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, FeedsSubdir, f.Name+feedfile.Ext)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func torFeed(date string, addr uint32) *feedfile.File {
	return &feedfile.File{
		Header: feedfile.Header{Name: FeedTor, Kind: feedfile.KindRanges, Date: date, Entries: 1},
		Ranges: feedfile.Ranges{V4: feedfile.Table4{Start: []uint32{addr}, End: []uint32{addr}, Val: []uint32{0}}},
	}
}

func TestLoadDirOverridesFeedByFeed(t *testing.T) {
	dir := t.TempDir()
	// 192.0.2.1 as a "Tor exit" makes the override visible.
	p := writeFeed(t, dir, torFeed("2099-01-01", 192<<24|2<<8|1))
	s, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Classify(netip.MustParseAddr("192.0.2.1")).Tor {
		t.Error("override Tor feed not used")
	}
	if s.Classify(netip.MustParseAddr("102.130.113.9")).Tor {
		t.Error("embedded Tor feed still used")
	}
	if !s.Classify(netip.MustParseAddr("1.178.1.1")).Datacenter {
		t.Error("other feeds lost")
	}
	for _, f := range s.Feeds() {
		want := SourceEmbedded
		if f.Name == FeedTor {
			want = SourceDataDir
			if f.Path != p || f.Date != "2099-01-01" || f.Entries != 1 {
				t.Errorf("tor feed info %+v", f)
			}
		}
		if f.Source != want {
			t.Errorf("%s: source %q, want %q", f.Name, f.Source, want)
		}
	}
	if s.Coverage().TorExits != 1 {
		t.Errorf("coverage %+v", s.Coverage())
	}
}

func TestLoadDirPrefersNewerEmbedded(t *testing.T) {
	dir := t.TempDir()
	writeFeed(t, dir, torFeed("2000-01-01", 192<<24|2<<8|1))
	s, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if s.Classify(netip.MustParseAddr("192.0.2.1")).Tor || !s.Classify(netip.MustParseAddr("102.130.113.9")).Tor {
		t.Error("an override older than the embedded feed was used")
	}
}

func TestLoadDirMissingAndCorrupt(t *testing.T) {
	if _, err := LoadDir(filepath.Join(t.TempDir(), "nothing")); err != nil {
		t.Fatalf("missing data dir: %v", err)
	}
	dir := t.TempDir()
	p := writeFeed(t, dir, torFeed("2099-01-01", 1))
	b, _ := os.ReadFile(p)
	b[len(b)/2] ^= 0xff
	os.WriteFile(p, b, 0o644)
	if _, err := LoadDir(dir); err == nil {
		t.Fatal("corrupt override loaded")
	}
	// A file holding another feed under the wrong name.
	dir = t.TempDir()
	f := torFeed("2099-01-01", 1)
	f.Name = FeedProxy
	b, _ = feedfile.Marshal(nil, f)
	os.MkdirAll(filepath.Join(dir, FeedsSubdir), 0o755)
	os.WriteFile(filepath.Join(dir, FeedsSubdir, FeedTor+feedfile.Ext), b, 0o644)
	if _, err := LoadDir(dir); err == nil {
		t.Fatal("misnamed override loaded")
	}
}

func TestStoreSwapWhileReading(t *testing.T) {
	a := embeddedSnapshot(t)
	dir := t.TempDir()
	writeFeed(t, dir, torFeed("2099-01-01", 192<<24|2<<8|1))
	b, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	st := NewStore(a)
	var stop atomic.Bool
	var wg sync.WaitGroup
	addr := netip.MustParseAddr("102.130.113.9")
	for i := 0; i < runtime.GOMAXPROCS(0); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				s := st.Current()
				c := s.Classify(addr)
				if (s == a) != c.Tor {
					t.Error("a snapshot answered with another's data")
					return
				}
			}
		}()
	}
	deadline := time.Now().Add(100 * time.Millisecond)
	for time.Now().Before(deadline) {
		st.Swap(b)
		st.Swap(a)
	}
	stop.Store(true)
	wg.Wait()
	if old := st.Swap(nil); old != a {
		t.Error("Swap did not return the previous snapshot")
	}
	if st.Current().Classify(addr).Tor {
		t.Error("nil snapshot answered")
	}
}

// The broad disposable list names a few public suffixes — msk.ru and pp.ua
// (regional and personal second-level domains), za.com (CentralNic's
// company names), ddns.net (dynamic DNS) — whose subdomains belong to
// unrelated registrants: a company's mail at romashka.msk.ru is no
// throwaway inbox. A listed name covers its subdomains only when it is a
// registrable domain (mailinator.com), never a public suffix; the suffix
// itself, as written, still matches.
func TestDisposableEmailListedPublicSuffixCoversNoRegistrant(t *testing.T) {
	s := embeddedSnapshot(t)
	for _, e := range []string{"info@romashka.msk.ru", "sales@kvartira.pp.ua", "hr@acme.za.com", "me@myhome.ddns.net", "x@a.b.pp.ua"} {
		if s.DisposableEmail(e) {
			t.Errorf("DisposableEmail(%q) = true: a listed public suffix covered a registrant's domain", e)
		}
	}
	for _, e := range []string{"user@msk.ru", "pp.ua", "user@sub.mailinator.com", "user@a.b.sub.mailinator.com"} {
		if !s.DisposableEmail(e) {
			t.Errorf("DisposableEmail(%q) = false, want true", e)
		}
	}
}
