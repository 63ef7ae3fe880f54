package feeds

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fraudd/fraudd/intel/netlists"
	"github.com/fraudd/fraudd/intel/netlists/feedfile"
)

// upstream is a loopback stand-in for the feeds' upstream servers.
type upstream struct {
	*httptest.Server
	files map[string]string // path → body; missing paths answer 404
	hits  atomic.Int64
}

func newUpstream(t *testing.T, files map[string]string) *upstream {
	u := &upstream{files: files}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		if r.Header.Get("User-Agent") == "" {
			http.Error(w, "no user agent", http.StatusForbidden)
			return
		}
		body, ok := u.files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Last-Modified", "Tue, 01 Sep 2026 10:00:00 GMT")
		fmt.Fprint(w, body)
	}))
	t.Cleanup(u.Close)
	return u
}

// manyAddrs returns n distinct public IPv4 addresses from 11.0.0.1 on, one
// per line, with an optional prefix ("http://") and suffix (":8080").
func manyAddrs(n int, pre, suf string) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "%s11.%d.%d.1%s\n", pre, i/256, i%256, suf)
	}
	return b.String()
}

// torAddrs lists the first n relay addresses onionooDoc writes.
func torAddrs(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "12.%d.%d.1\n", i/256, i%256)
	}
	return b.String()
}

func onionooDoc(n int) string {
	var relays []string
	for i := 0; i < n; i++ {
		relays = append(relays, fmt.Sprintf(`{"or_addresses":["12.%d.%d.1:9001"]}`, i/256, i%256))
	}
	relays = append(relays, `{"or_addresses":["[2001:1620:51a1::999]:9001"],"exit_addresses":["13.0.0.1"]}`)
	return `{"relays_published":"2026-09-02 11:00:00","relays":[` + strings.Join(relays, ",") + `]}`
}

func TestUpdateWritesValidatedFeeds(t *testing.T) {
	emb, err := netlists.LoadEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	prevTor := emb.Coverage().TorExits
	up := newUpstream(t, map[string]string{
		"/onionoo": onionooDoc(prevTor),
		// Each source keeps at least half its entries (inputShrank): the
		// bulk list's are relays Onionoo lists too, but 14.0.0.1.
		"/bulk":       "14.0.0.1\n" + torAddrs(1200),
		"/monosans":   manyAddrs(1000, "http://", ":8080"),
		"/iplocate":   manyAddrs(500, "socks5://", ":1080"),
		"/ipsum":      "# Last update: Wed, 02 Sep 2026 03:00:00 +0200\n77.1.1.1\t5\n77.1.1.2\t2\n",
		"/disposable": "mailinator.com\nnew-throwaway.example\n",
	})
	sources := []Source{
		{Feed: FeedTor, URL: up.URL + "/onionoo", Format: FormatOnionoo},
		{Feed: FeedTor, URL: up.URL + "/bulk", Format: FormatAddrs},
		{Feed: FeedProxy, URL: up.URL + "/monosans", Format: FormatProxyLines},
		{Feed: FeedProxy, URL: up.URL + "/iplocate", Format: FormatProxyLines},
		// Shrinks from ~14,000 to 1: rejected.
		{Feed: FeedBlocklist, URL: up.URL + "/ipsum", Format: FormatIpsum},
		// One source of three is missing upstream: the feed fails whole.
		{Feed: FeedDisposable, URL: up.URL + "/disposable", Format: FormatDomains},
		{Feed: FeedDisposable, URL: up.URL + "/missing", Format: FormatDomains},
	}
	dir := t.TempDir()
	rep, err := Update(context.Background(), up.Client(), sources, dir, emb)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		FeedTor: StatusUpdated, FeedProxy: StatusUpdated,
		FeedBlocklist: StatusRejected, FeedDisposable: StatusFailed,
	}
	if len(rep.Feeds) != len(want) {
		t.Fatalf("report %+v", rep)
	}
	for _, f := range rep.Feeds {
		if f.Status != want[f.Feed] {
			t.Errorf("%s: %s (%v), want %s", f.Feed, f.Status, f.Err, want[f.Feed])
		}
		_, statErr := os.Stat(filepath.Join(dir, netlists.FeedsSubdir, f.Feed+feedfile.Ext))
		if written := statErr == nil; written != (f.Status == StatusUpdated) {
			t.Errorf("%s: file written %v with status %s", f.Feed, written, f.Status)
		}
	}
	if rep.Updated() != 2 || rep.Err() == nil {
		t.Errorf("Updated %d, Err %v", rep.Updated(), rep.Err())
	}
	tor := rep.Feeds[0]
	if tor.Date != "2026-09-02" || tor.Entries != prevTor+3 || tor.Prev != prevTor {
		t.Errorf("tor result %+v", tor)
	}
	if p := rep.Feeds[1]; p.Date != "2026-09-01" || p.Entries != 1000 {
		t.Errorf("proxy result %+v", p)
	}

	s, err := netlists.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		addr string
		tor  bool
	}{{"12.0.0.1", true}, {"14.0.0.1", true}, {"13.0.0.1", true}, {"2001:1620:51a1::999", true}, {"102.130.113.9", false}}
	for _, c := range checks {
		if got := s.Classify(netip.MustParseAddr(c.addr)).Tor; got != c.tor {
			t.Errorf("after update %s Tor = %v, want %v", c.addr, got, c.tor)
		}
	}
	if !s.Classify(netip.MustParseAddr("11.3.231.1")).OpenProxy {
		t.Error("updated proxy feed not used")
	}
	if !s.Classify(netip.MustParseAddr("77.90.185.20")).Blocklisted {
		t.Error("rejected blocklist replaced the embedded one")
	}
	infos, err := Status(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range infos {
		fromDir := in.Name == FeedTor || in.Name == FeedProxy
		if (in.Source == netlists.SourceDataDir) != fromDir {
			t.Errorf("status %+v", in)
		}
		if in.Name == FeedTor && (in.Date != "2026-09-02" || in.Entries != prevTor+3) {
			t.Errorf("tor status %+v", in)
		}
	}
}

func TestUpdateRejectsEmptyAndGarbage(t *testing.T) {
	up := newUpstream(t, map[string]string{
		"/empty": "# nothing today\n",
		"/html":  "<html><body>maintenance</body></html>",
	})
	dir := t.TempDir()
	rep, err := Update(context.Background(), up.Client(), []Source{
		{Feed: FeedTor, URL: up.URL + "/empty", Format: FormatAddrs},
		{Feed: FeedProxy, URL: up.URL + "/html", Format: FormatProxyLines},
		{Feed: "no-such-feed", URL: up.URL + "/empty", Format: FormatAddrLines},
	}, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Feeds {
		if f.Status == StatusUpdated || f.Err == nil {
			t.Errorf("%s: %+v", f.Feed, f)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(dir, netlists.FeedsSubdir))
	if len(entries) != 0 {
		t.Errorf("files written: %v", entries)
	}
}

func TestUpdateStopsOnCancel(t *testing.T) {
	up := newUpstream(t, map[string]string{"/a": manyAddrs(5, "", "")})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rep, err := Update(ctx, up.Client(), []Source{
		{Feed: FeedTor, URL: up.URL + "/a", Format: FormatAddrs},
		{Feed: FeedProxy, URL: up.URL + "/a", Format: FormatProxyLines},
	}, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Feeds) != 1 || rep.Feeds[0].Status != StatusFailed || up.hits.Load() != 0 {
		t.Fatalf("report %+v, hits %d", rep, up.hits.Load())
	}
}

func TestRefresherSwapsSnapshot(t *testing.T) {
	emb, err := netlists.LoadEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	up := newUpstream(t, map[string]string{"/proxies": manyAddrs(1000, "http://", ":3128")})
	store := netlists.NewStore(emb)
	r := &Refresher{
		Sources: []Source{{Feed: FeedProxy, URL: up.URL + "/proxies", Format: FormatProxyLines}},
		DataDir: t.TempDir(),
		Store:   store,
		Client:  up.Client(),
		Logger:  slog.New(slog.NewTextHandler(&strings.Builder{}, nil)),
	}
	addr := netip.MustParseAddr("11.0.7.1")
	if store.Current().Classify(addr).OpenProxy {
		t.Fatal("test address already a proxy")
	}
	if err := r.Run(context.Background()); err != nil { // Interval 0: once
		t.Fatal(err)
	}
	if store.Current() == emb || !store.Current().Classify(addr).OpenProxy {
		t.Fatal("refreshed snapshot not swapped in")
	}
	// Nothing new upstream: the same data is written again and swapped, but
	// a failing upstream leaves the snapshot alone.
	up.files = map[string]string{}
	before := store.Current()
	rep, err := r.Refresh(context.Background())
	if err != nil || rep.Updated() != 0 || store.Current() != before {
		t.Fatalf("failed refresh: %+v, %v; swapped %v", rep, err, store.Current() != before)
	}
}

func TestRefresherRunStopsWithContext(t *testing.T) {
	up := newUpstream(t, map[string]string{})
	r := &Refresher{
		Interval: 1 << 62,
		Sources:  []Source{{Feed: FeedProxy, URL: up.URL + "/x", Format: FormatProxyLines}},
		DataDir:  t.TempDir(),
		Store:    netlists.NewStore(nil),
		Client:   up.Client(),
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()
	for up.hits.Load() == 0 {
		// wait for the first attempt
		select {
		case err := <-done:
			t.Fatalf("Run returned early: %v", err)
		default:
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestDefaultSourcesAreWellFormed(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range DefaultSources() {
		if _, ok := specByName(s.Feed); !ok {
			t.Errorf("source for unknown feed %q", s.Feed)
		}
		if !strings.HasPrefix(s.URL, "https://") {
			t.Errorf("%s: not https: %s", s.Feed, s.URL)
		}
		empty := []byte{}
		if s.Format == FormatOnionoo {
			empty = []byte("{}")
		}
		if _, err := parse(s.Format, empty); err != nil {
			t.Errorf("%s: format %q: %v", s.Feed, s.Format, err)
		}
		seen[s.Feed] = true
	}
	for _, f := range []string{FeedTor, FeedDatacenter, FeedVPN, FeedVPNProvider, FeedPrivacyRelay, FeedProxy, FeedBlocklist, FeedDisposable} {
		if !seen[f] {
			t.Errorf("feed %s has no upstream", f)
		}
	}
}

// ip2asnTable is a synthetic iptoasn.com table with n ranges (a /24 each
// from 11.0.0.0 on, n/2 distinct AS numbers from 4200000000 on, past every
// real one), plus a "Not routed" row, an IPv6 row and an organisation name
// with a '#' in it. The ranges run from 11.0.0.0 up to at most 58.0.0.0.
func ip2asnTable(n int) string {
	var b strings.Builder
	b.WriteString("0.0.0.0\t0.255.255.255\t0\tNone\tNot routed\n")
	for i := 0; i < n; i++ {
		a := 11<<24 + uint32(i)<<8
		lo := netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), 0})
		hi := netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), 255})
		fmt.Fprintf(&b, "%s\t%s\t%d\tDE\tNet #%d GmbH\n", lo, hi, 4200000000+i/2, i/2)
	}
	b.WriteString("2a0f:1234::\t2a0f:1234:ffff:ffff:ffff:ffff:ffff:ffff\t4200000001\tDE\tNet #0 GmbH\n")
	return b.String()
}

// TestUpdateRefreshesTheASTable: one download of iptoasn.com's table
// replaces the AS and AS-name feeds, so addresses announced after the
// embedded snapshot get an AS, and the hosting shares are derived again
// from the new table.
func TestUpdateRefreshesTheASTable(t *testing.T) {
	emb, err := netlists.LoadEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	var prevASN, prevInfo int
	for _, f := range emb.Feeds() {
		switch f.Name {
		case FeedASN:
			prevASN = f.Entries
		case FeedASNInfo:
			prevInfo = f.Entries
		}
	}
	n := max(prevASN/2+1, prevInfo+2) // enough not to count as a collapse
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(ip2asnTable(n)))
	zw.Close()
	up := newUpstream(t, map[string]string{"/ip2asn-combined.tsv.gz": gz.String()})
	sources := []Source{
		{Feed: FeedASN, URL: up.URL + "/ip2asn-combined.tsv.gz", Format: FormatIP2ASN},
		{Feed: FeedASNInfo, URL: up.URL + "/ip2asn-combined.tsv.gz", Format: FormatIP2ASNInfo},
	}
	dir := t.TempDir()
	rep, err := Update(context.Background(), up.Client(), sources, dir, emb)
	if err != nil {
		t.Fatal(err)
	}
	if up.hits.Load() != 1 {
		t.Errorf("%d downloads of one file", up.hits.Load())
	}
	want := []string{FeedASN, FeedASNInfo, FeedASNHosting}
	if len(rep.Feeds) != len(want) {
		t.Fatalf("report %+v", rep)
	}
	for i, f := range rep.Feeds {
		if f.Feed != want[i] || f.Status != StatusUpdated || f.Date != "2026-09-01" {
			t.Errorf("result %d: %+v, want %s updated on 2026-09-01", i, f, want[i])
		}
	}
	if rep.Feeds[0].Entries != n+1 || rep.Feeds[1].Entries != n/2 {
		t.Errorf("entries: asn %d, asn-info %d", rep.Feeds[0].Entries, rep.Feeds[1].Entries)
	}
	s, err := netlists.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for addr, asn := range map[string]uint32{"11.0.3.9": 4200000001, "2a0f:1234::1": 4200000001, "11.1.0.200": 4200000128} {
		c := s.Classify(netip.MustParseAddr(addr))
		if c.ASN != asn || c.Org != fmt.Sprintf("Net #%d GmbH", asn-4200000000) || c.RegCountry != "DE" {
			t.Errorf("%s: AS%d %q %q, want AS%d", addr, c.ASN, c.Org, c.RegCountry, asn)
		}
	}
	if c := s.Classify(netip.MustParseAddr("73.0.0.1")); c.ASN != 0 {
		t.Errorf("73.0.0.1 is in no range of the new table, got AS%d", c.ASN)
	}
	for _, f := range s.Feeds() {
		fromDir := f.Name == FeedASN || f.Name == FeedASNInfo || f.Name == FeedASNHosting
		if (f.Source == netlists.SourceDataDir) != fromDir {
			t.Errorf("%s loaded from %s", f.Name, f.Source)
		}
	}
	// The derived shares are those of the new table: 11.0.0.0/8, the first
	// AS's space, is in no datacenter range.
	h, err := netlists.ReadFeed(dir, FeedASNHosting)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Shares) != n/2 || h.Shares[0].ASN != 4200000000 || h.Shares[0].V4 != 0 || h.Shares[0].V6 != feedfile.NoShare {
		t.Errorf("hosting shares: %d rows, first %+v", len(h.Shares), h.Shares[0])
	}
}

// TestUpdateRejectsAnEmptySource: one source of a feed answering 200 with
// no entries (an empty or comment-only body) is a failed source, so the
// feed keeps its old file rather than losing that source's part (here every
// IPv6 datacenter range) while the other source keeps it above the shrink
// limit.
func TestUpdateRejectsAnEmptySource(t *testing.T) {
	emb, err := netlists.LoadEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	prev := emb.Coverage().DCRanges
	up := newUpstream(t, map[string]string{
		"/dc4": manyAddrs(prev/2+1000, "", ""),
		"/dc6": "# regenerating\n",
	})
	dir := t.TempDir()
	rep, err := Update(context.Background(), up.Client(), []Source{
		{Feed: FeedDatacenter, URL: up.URL + "/dc4", Format: FormatAddrLines},
		{Feed: FeedDatacenter, URL: up.URL + "/dc6", Format: FormatAddrLines},
	}, dir, emb)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Feeds) == 0 || rep.Feeds[0].Status == StatusUpdated || rep.Feeds[0].Err == nil {
		t.Fatalf("datacenter feed with an empty IPv6 source: %+v", rep.Feeds)
	}
	s, err := netlists.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	// An IPv6 range of the embedded datacenter list.
	a := netip.MustParseAddr("2a01:4f8::1")
	before, after := emb.Classify(a).Sources&netlists.SourceDatacenterRanges, s.Classify(a).Sources&netlists.SourceDatacenterRanges
	if before == 0 || after == 0 {
		t.Errorf("%s: in the datacenter ranges %v before, %v after the update", a, before != 0, after != 0)
	}
}

// TestUpdateRejectsACollapsedSource: one source of a feed that comes back
// cut to a few lines is refused even when the feed's total stays within
// maxShrink (the other source is whole): its table would be replaced by
// nearly nothing. The old feed stays.
func TestUpdateRejectsACollapsedSource(t *testing.T) {
	emb, err := netlists.LoadEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	var prev netlists.FeedInfo
	for _, f := range emb.Feeds() {
		if f.Name == FeedProxy {
			prev = f
		}
	}
	if len(prev.Inputs) != 2 || prev.Inputs[1].Entries <= 10*maxShrink {
		t.Fatalf("the embedded proxy feed is not the two-source case this test needs: %+v", prev)
	}
	up := newUpstream(t, map[string]string{
		"/monosans": manyAddrs(prev.Entries, "http://", ":8080"), // whole: the total alone passes
		"/iplocate": manyAddrs(10, "socks5://", ":1080"),         // cut short
	})
	dir := t.TempDir()
	rep, err := Update(context.Background(), up.Client(), []Source{
		{Feed: FeedProxy, URL: up.URL + "/monosans", Format: FormatProxyLines},
		{Feed: FeedProxy, URL: up.URL + "/iplocate", Format: FormatProxyLines},
	}, dir, emb)
	if err != nil {
		t.Fatal(err)
	}
	if f := rep.Feeds[0]; f.Status != StatusRejected || f.Err == nil || !strings.Contains(f.Err.Error(), "source 2") {
		t.Fatalf("proxy: %s %v, want rejected naming source 2", f.Status, f.Err)
	}
	if _, err := os.Stat(filepath.Join(dir, netlists.FeedsSubdir, FeedProxy+feedfile.Ext)); err == nil {
		t.Fatal("the rejected feed was written")
	}
}
