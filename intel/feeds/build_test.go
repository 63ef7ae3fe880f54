package feeds

import (
	"bufio"
	"compress/gzip"
	"encoding/csv"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/fraudd/fraudd/intel/netlists"
	"github.com/fraudd/fraudd/intel/netlists/feedfile"
	"github.com/fraudd/fraudd/internal/testtools"
)

// sharedData is the raw snapshot directory next to the repository. Tests
// that need it skip when it is absent (a clone without the raw data).
const sharedData = "../../../shared/data"

func needShared(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(sharedData, "SOURCES.md")); err != nil {
		testtools.Skip(t, "raw snapshots in "+sharedData, "the shared data directory beside the repository")
	}
}

var (
	buildOnce sync.Once
	buildDir  string
	buildMan  Manifest
	buildErr  error
)

func TestMain(m *testing.M) {
	code := testtools.Main(m)
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// build runs Build on the raw snapshots once per test binary.
func build(t *testing.T) (string, Manifest) {
	t.Helper()
	needShared(t)
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "fraudd-feeds-build")
		if buildErr == nil {
			buildMan, buildErr = Build(sharedData, buildDir)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildDir, buildMan
}

// TestEmbeddedDataIsCurrent checks that the committed feed files are exactly
// what the build makes from the raw snapshots: nobody edited them by hand,
// and a change to a parser or to the format was followed by a rebuild
// (`fraudd feeds build --from ../shared/data`).
func TestEmbeddedDataIsCurrent(t *testing.T) {
	dir, m := build(t)
	for _, f := range m.Feeds {
		built, err := os.ReadFile(filepath.Join(dir, f.Name+feedfile.Ext))
		if err != nil {
			t.Fatal(err)
		}
		emb, err := netlists.ReadEmbedded(f.Name)
		if err != nil {
			t.Fatal(err)
		}
		if string(built) != string(emb) {
			t.Errorf("%s: embedded file differs from a fresh build; run fraudd feeds build", f.Name)
		}
	}
	js, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile("../netlists/data/" + ManifestFile)
	if err != nil {
		t.Fatal(err)
	}
	if string(js) != string(committed) {
		t.Error("manifest.json differs from a fresh build")
	}
	var back Manifest
	if err := json.Unmarshal(js, &back); err != nil || len(back.Feeds) != len(netlists.FeedNames) {
		t.Errorf("manifest: %v, %d feeds", err, len(back.Feeds))
	}
	total := 0
	for _, f := range m.Feeds {
		total += f.Bytes
		t.Logf("%-15s %-8s %-10s %8d entries %9d bytes", f.Name, f.Kind, f.Date, f.Entries, f.Bytes)
	}
	if total > 15<<20 {
		t.Errorf("feeds total %d bytes, over the 15 MB budget", total)
	}
}

// geoFixed reports whether curated/geo_fixes.csv corrects a's country (to
// JP): WIDE's 2001:200::/32, and NTT's 2001:218::/32 where the source says
// AU (its rows for NTT's PoPs in other countries stay).
func geoFixed(a netip.Addr, sourceCC string) bool {
	return netip.MustParsePrefix("2001:200::/32").Contains(a) ||
		netip.MustParsePrefix("2001:218::/32").Contains(a) && sourceCC == "AU"
}

// fillerMoved reports whether the AU-filler rule (aufiller.go) may have
// given the IPv6 address a the country cc where the source says AU: its AS
// is registered in cc, an APNIC country other than AU.
func fillerMoved(s *netlists.Snapshot, a, cc string) bool {
	addr := netip.MustParseAddr(a)
	c := s.Classify(addr)
	return addr.Is6() && c.ASN != 0 && c.RegCountry == cc && cc != auFillerCountry && apnicRegion[cc]
}

// geoFixRows is the number of rows in curated/geo_fixes.csv.
const geoFixRows = 1 + 11

func TestBuildCountsMatchSources(t *testing.T) {
	_, m := build(t)
	// Entry counts from SOURCES.md (after deduplication where lists overlap).
	want := map[string]int{
		FeedCloud:        10363,
		FeedDatacenter:   42566 + 8752,
		FeedBlocklist:    14217,
		FeedASNInfo:      91065,
		FeedASN:          411961 + 103197,
		FeedGeo:          334373 + 216295 + geoFixRows, // + curated/geo_fixes.csv
		FeedTZ:           542,
		FeedMobileAS:     44,
		FeedProviderAS:   57,
		FeedPrivacyRelay: 3290 + 10455,
	}
	for _, f := range m.Feeds {
		if w, ok := want[f.Name]; ok && f.Entries != w {
			t.Errorf("%s: %d entries, want %d", f.Name, f.Entries, w)
		}
		if f.Entries == 0 {
			t.Errorf("%s: empty", f.Name)
		}
	}
}

// TestBuiltTablesAnswerLikeTheSources samples rows of the raw AS and geo
// tables and checks that a snapshot of the built files answers each row's
// first and last address as the row says. The geo table nests some narrower
// rows inside broader ones (the narrower wins, as with prefixes), so only
// rows that overlap no other row are sampled.
func TestBuiltTablesAnswerLikeTheSources(t *testing.T) {
	dir, _ := build(t)
	// LoadDir reads <dir>/feeds; point a data dir at the build output.
	data := t.TempDir()
	if err := os.Symlink(dir, filepath.Join(data, netlists.FeedsSubdir)); err != nil {
		t.Fatal(err)
	}
	s, err := netlists.LoadDir(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range s.Feeds() {
		if f.Source != netlists.SourceDataDir {
			t.Fatalf("%s loaded from %s", f.Name, f.Source)
		}
	}
	// eachAlone calls fn for every n-th row that overlaps no other row.
	eachAlone := func(name string, n int, fn func(rec []string)) {
		fh, err := os.Open(filepath.Join(sharedData, name))
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
		zr, err := gzip.NewReader(fh)
		if err != nil {
			t.Fatal(err)
		}
		r := csv.NewReader(bufio.NewReader(zr))
		r.FieldsPerRecord = -1
		var maxEnd netip.Addr // greatest end before the candidate
		var cand []string
		candAlone := false
		for i := 0; ; i++ {
			rec, err := r.Read()
			if err != nil {
				break
			}
			rec = append([]string(nil), rec...)
			start := netip.MustParseAddr(rec[0])
			if cand != nil {
				cEnd := netip.MustParseAddr(cand[1])
				if candAlone && cEnd.Less(start) && (i/n)%2 == 0 {
					fn(cand)
				}
				if !maxEnd.IsValid() || maxEnd.Less(cEnd) {
					maxEnd = cEnd
				}
			}
			candAlone = !maxEnd.IsValid() || maxEnd.Less(start)
			cand = rec
		}
	}
	checked, moved := 0, 0
	for _, name := range []string{"asn/asn-ipv4.csv.gz", "asn/asn-ipv6.csv.gz"} {
		eachAlone(name, 50, func(rec []string) {
			asn, _ := strconv.ParseUint(rec[2], 10, 32)
			for _, a := range []string{rec[0], rec[1]} {
				c := s.Classify(netip.MustParseAddr(a))
				if c.ASN != uint32(asn) || c.Org != strings.TrimSpace(rec[3]) {
					t.Errorf("%s: ASN %d %q, source says %s %q", a, c.ASN, c.Org, rec[2], rec[3])
				}
				checked++
			}
		})
	}
	for _, name := range []string{"geo/geo-whois-asn-country-ipv4.csv.gz", "geo/geo-whois-asn-country-ipv6.csv.gz"} {
		eachAlone(name, 50, func(rec []string) {
			for _, a := range []string{rec[0], rec[1]} {
				want := rec[2]
				if geoFixed(netip.MustParseAddr(a), rec[2]) {
					want = "JP" // the source's known bug, corrected (curated/geo_fixes.csv)
				}
				got := s.Country(netip.MustParseAddr(a))
				if got != want && want == auFillerCountry && fillerMoved(s, a, got) {
					moved++
					want = got
				}
				if got != want {
					t.Errorf("%s: country %q, source says %q", a, got, rec[2])
				}
				checked++
			}
		})
	}
	t.Logf("%d addresses checked, %d of them moved out of AU by the AU-filler rule", checked, moved)
	if moved == 0 || moved*100 > checked {
		t.Errorf("the AU-filler rule moved %d of %d sampled addresses", moved, checked)
	}
	if checked < 100000 {
		t.Fatalf("only %d addresses checked", checked)
	}
}
