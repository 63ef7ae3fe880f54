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

// TestBadASNListReadsEveryRow: brianhama's list has a row ending in a
// quote and a space (`…xserver.ua" `); read with encoding/csv's lazy quotes
// that quote swallowed the next row (AS212238) into its field.
func TestBadASNListReadsEveryRow(t *testing.T) {
	needShared(t)
	data, err := os.ReadFile(filepath.Join(sharedData, "datacenter/brianhama-bad-asn-list.csv"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := parse(FormatBadASNCSV, data)
	if err != nil {
		t.Fatal(err)
	}
	got := map[uint32]bool{}
	for _, a := range p.asns {
		got[a.ASN] = true
	}
	lines := strings.Split(string(data), "\n")
	for i, l := range lines[1:] { // the header first
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		f := strings.SplitN(l, ",", 2)
		n, err := strconv.ParseUint(strings.Trim(strings.TrimSpace(f[0]), `"`), 10, 32)
		if err != nil {
			t.Fatalf("line %d unreadable by the test: %q", i+2, l)
		}
		if !got[uint32(n)] {
			t.Errorf("line %d: AS%d (%q) dropped by the parser", i+2, n, l)
		}
	}
	if p.skipped != 0 {
		t.Errorf("%d rows skipped", p.skipped)
	}
}

// TestSplitCSVLine: one line is one record, quoted as RFC 4180 quotes, with
// encoding/csv's lazy reading of a stray quote.
func TestSplitCSVLine(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{`1,2,3`, []string{"1", "2", "3"}},
		{`"212238","DataCamp Limited"`, []string{"212238", "DataCamp Limited"}},
		{`"1","Hosting, Inc."`, []string{"1", "Hosting, Inc."}},
		{`"1", "say ""hi""",x`, []string{"1", `say "hi"`, "x"}},
		{`"1","xserver.ua" `, []string{"1", `xserver.ua" `}},
		{`1,"unclosed, field`, []string{"1", "unclosed, field"}},
		{`1,a"b,c`, []string{"1", `a"b`, "c"}},
		{`a,`, []string{"a", ""}},
		{`"a",`, []string{"a", ""}},
		{``, []string{""}},
	} {
		if got := splitCSVLine(c.in, nil); !slices.Equal(got, c.want) {
			t.Errorf("splitCSVLine(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	// A stray quote costs its own row at most, never the rows after it.
	p := mustParse(t, FormatBadASNCSV, "ASN,Entity\n\"1\",\"a\" \n\"2\",\"b\"\r\n3,\"c\n4,d\n")
	var asns []uint32
	for _, a := range p.asns {
		asns = append(asns, a.ASN)
	}
	if !slices.Equal(asns, []uint32{1, 2, 3, 4}) {
		t.Errorf("read %v, want ASes 1 to 4", asns)
	}
}

// TestByteOrderMarkIsNotAnEntry: a UTF-8 byte order mark before a file's
// first line cost that line in every line format.
func TestByteOrderMarkIsNotAnEntry(t *testing.T) {
	for _, c := range []struct {
		f  Format
		in string
	}{
		{FormatAddrLines, "\ufeff1.2.3.0/24\r\n5.6.7.8\r\n"},
		{FormatDomains, "\ufeffmailinator.com\r\nfoo.com\r\n"},
		{FormatProxyLines, "\ufeffhttp://1.2.3.4:80\r\nsocks5://u:p@5.6.7.8:1080\r\n"},
		{FormatAddrs, "\ufeff1.2.3.4\n5.6.7.8\n"},
		{FormatIpsum, "\ufeff1.2.3.4\t5\n5.6.7.8\t4\n"},
		{FormatCloudCSV, "\ufeff1.2.3.0/24,aws\n5.6.7.0/24,gcp\n"},
	} {
		p := mustParse(t, c.f, c.in)
		if p.entries() != 2 || p.skipped != 0 {
			t.Errorf("%s %q: %d entries, %d skipped; want 2 and none", c.f, c.in, p.entries(), p.skipped)
		}
	}
}

// TestCloudListRefusesWideBlocks: as every other range list, the published
// cloud ranges take no block wider than an IPv4 /8 or an IPv6 /16 (one /0
// row would mark every address a cloud's).
func TestCloudListRefusesWideBlocks(t *testing.T) {
	p := mustParse(t, FormatCloudCSV, "cidr,provider\n0.0.0.0/0,aws\n::/0,gcp\n3.0.0.0/7,aws\n1.178.1.0/24,aws\n2600:1f00::/24,aws\n")
	if len(p.spans) != 2 || p.skipped != 3 {
		t.Fatalf("%d spans, %d skipped; want the /24 and the IPv6 /24, 3 skipped", len(p.spans), p.skipped)
	}
}

// TestUpdateRefusesAnExclusionThatEmptiesTheFeed: the VPN feed subtracts
// Apple's relay lines. Served the VPN list itself in their place, the
// update kept the feed's entry count whole (it counts the sources before
// the exclusion) and wrote a VPN table without a generic VPN range in it.
func TestUpdateRefusesAnExclusionThatEmptiesTheFeed(t *testing.T) {
	needShared(t)
	emb, err := netlists.LoadEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(sharedData, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	v4, v6, apple := read("vpn/x4bnet-vpn-ipv4.txt"), read("vpn/x4bnet-vpn-ipv6.txt"), read("vpn/x4bnet-input-apple.txt")
	// update refreshes the VPN feed into a fresh dir with appleList served
	// as the exclusion source.
	update := func(appleList string) (FeedResult, string) {
		up := newUpstream(t, map[string]string{"/vpn4": v4, "/vpn6": v6, "/apple": appleList})
		dir := t.TempDir()
		rep, err := Update(context.Background(), up.Client(), []Source{
			{Feed: FeedVPN, URL: up.URL + "/vpn4", Format: FormatAddrLines},
			{Feed: FeedVPN, URL: up.URL + "/vpn6", Format: FormatAddrLines},
			{Feed: FeedVPN, URL: up.URL + "/apple", Format: FormatAddrLines, Exclude: true},
		}, dir, emb)
		if err != nil {
			t.Fatal(err)
		}
		return rep.Feeds[0], dir
	}
	for _, c := range []struct {
		name, apple string
	}{
		{"the lists themselves", apple + v4 + v6},
		{"wide blocks, no more lines than Apple's", wideBlocks()},
	} {
		f, dir := update(c.apple)
		if f.Status != StatusRejected {
			t.Errorf("%s as the exclusion: %s (%v); want it rejected and the old feed kept", c.name, f.Status, f.Err)
		}
		if _, err := os.Stat(filepath.Join(dir, netlists.FeedsSubdir, FeedVPN+".fdf")); err == nil {
			t.Errorf("%s as the exclusion: a VPN feed was written", c.name)
		}
	}
	// The right file passes: the exclusion takes out Apple's lines only.
	f, dir := update(apple)
	if f.Status != StatusUpdated {
		t.Fatalf("the real lists: %s (%v)", f.Status, f.Err)
	}
	s, err := netlists.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if a := netip.MustParseAddr("2.56.188.1"); s.Classify(a).Sources&netlists.SourceVPNRanges != emb.Classify(a).Sources&netlists.SourceVPNRanges {
		t.Errorf("%s classified differently after the refresh", a)
	}
}

// wideBlocks is every IPv4 /8 and every IPv6 /16 of 2000::/4: the widest
// blocks a list may hold, in fewer lines than Apple's relay list has.
func wideBlocks() string {
	var b strings.Builder
	for i := 1; i < 224; i++ {
		b.WriteString(strconv.Itoa(i) + ".0.0.0/8\n")
	}
	for i := 0x2000; i < 0x3000; i++ {
		b.WriteString(strconv.FormatInt(int64(i), 16) + "::/16\n")
	}
	return b.String()
}

// TestOverrideWinsATie: a curated correction of a source's own row (the
// same range) wins only when its input is an override; a narrower row
// wins either way.
func TestOverrideWinsATie(t *testing.T) {
	sp := spec{name: FeedGeo, kind: feedfile.KindRanges, labelled: true}
	src := input{part: part{format: FormatGeoRanges}, name: "source", data: []byte("2001:218:2009::,2001:218:3000:ffff:ffff:ffff:ffff:ffff,AU\n")}
	fix := input{part: part{format: FormatGeoRanges}, name: "fixes", data: []byte("2001:218:2009::,2001:218:3000:ffff:ffff:ffff:ffff:ffff,JP\n")}
	country := func(f *feedfile.File) string {
		t.Helper()
		if len(f.Ranges.V6.Val) != 1 {
			t.Fatalf("%d ranges", len(f.Ranges.V6.Val))
		}
		return f.Ranges.Labels[f.Ranges.V6.Val[0]]
	}
	f, err := assemble(sp, []input{src, fix})
	if err != nil {
		t.Fatal(err)
	}
	if got := country(f); got != "AU" {
		t.Fatalf("a plain later input's tie: %s, want the source's AU", got)
	}
	fix.override = true
	if f, err = assemble(sp, []input{src, fix}); err != nil {
		t.Fatal(err)
	}
	if got := country(f); got != "JP" {
		t.Fatalf("an override's tie: %s, want JP", got)
	}
}
