package netlists

import (
	"bufio"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var regenSample = flag.Bool("regen-consumer-sample", false, "draw testdata/consumer_sample.csv again from the embedded AS table")

// consumerSample is a committed sample of consumer broadband and mobile
// addresses: random addresses of each network below, drawn from the IP → AS
// table, plus addresses of those networks that are on the blocklist (an
// infected home router is still a home router).
const consumerSample = "testdata/consumer_sample.csv"

// consumerASNs are the networks sampled: the named ones and
// consumer networks of ten more countries.
var consumerASNs = []struct {
	asn  uint32
	kind string
}{
	{7922, "broadband"},  // Comcast, US
	{20115, "broadband"}, // Charter, US
	{11427, "broadband"}, // Charter (Texas), US
	{3320, "broadband"},  // Deutsche Telekom, DE
	{3215, "broadband"},  // Orange, FR
	{2856, "broadband"},  // BT, GB
	{21928, "mobile"},    // T-Mobile US
	{6167, "mobile"},     // Verizon Wireless, US
	{4713, "broadband"},  // NTT OCN, JP
	{1221, "broadband"},  // Telstra, AU
	{812, "broadband"},   // Rogers, CA
	{3352, "broadband"},  // Telefonica, ES
	{1136, "broadband"},  // KPN, NL
	{26599, "broadband"}, // Vivo (Telefonica Brasil), BR
	{55836, "mobile"},    // Reliance Jio, IN
	{3269, "broadband"},  // Telecom Italia, IT
	{4766, "broadband"},  // Korea Telecom, KR
	{9121, "broadband"},  // Turk Telekom, TR
	{8151, "broadband"},  // Telmex (Uninet), MX
	{12322, "broadband"}, // Free, FR
	{3209, "broadband"},  // Vodafone, DE
	{5089, "broadband"},  // Virgin Media, GB
	{206067, "mobile"},   // Three, GB
	{16135, "mobile"},    // Turkcell, TR
	{9605, "mobile"},     // NTT Docomo, JP
	{45609, "mobile"},    // Bharti Airtel mobile, IN
}

const (
	samplePerAS        = 60 // random IPv4 addresses per network
	sampleV6PerAS      = 10 // random IPv6 addresses per network (when it has IPv6)
	sampleBlockedPerAS = 20 // blocklisted addresses per network, at most
)

type sampleRow struct {
	addr      netip.Addr
	asn       uint32
	kind      string
	blocklist bool
}

// TestConsumerSampleRaisesNothing: no anonymising flag may fire on a
// consumer or mobile address, and all flags together on at most 1% of them.
func TestConsumerSampleRaisesNothing(t *testing.T) {
	s := embeddedSnapshot(t)
	if *regenSample {
		writeConsumerSample(t, s)
	}
	rows := readConsumerSample(t)
	asns := map[uint32]bool{}
	var anon, dc, blocked int
	for _, r := range rows {
		asns[r.asn] = true
		c := s.Classify(r.addr)
		if c.ASN != r.asn {
			t.Errorf("%s: AS%d, sample says AS%d (redraw the sample with -regen-consumer-sample)", r.addr, c.ASN, r.asn)
		}
		if c.Anonymous() {
			anon++
			t.Errorf("%s (AS%d %s): anonymising flag %+v", r.addr, r.asn, r.kind, c)
		}
		if c.Datacenter {
			dc++
			t.Logf("%s (AS%d %s): datacenter, sources %b", r.addr, r.asn, r.kind, c.Sources)
		}
		if r.blocklist {
			blocked++
			if !c.Blocklisted {
				t.Errorf("%s: sampled as blocklisted, not blocklisted now", r.addr)
			}
		}
	}
	if len(asns) != len(consumerASNs) || len(rows) < 1000 || blocked == 0 {
		t.Fatalf("sample: %d rows, %d networks, %d blocklisted", len(rows), len(asns), blocked)
	}
	rate := float64(anon+dc) / float64(len(rows))
	t.Logf("%d addresses in %d networks (%d blocklisted): %d anonymising, %d datacenter: false-positive rate %.2f%%",
		len(rows), len(asns), blocked, anon, dc, 100*rate)
	if rate > 0.01 {
		t.Errorf("false-positive rate %.2f%% over 1%%", 100*rate)
	}
}

func readConsumerSample(t *testing.T) []sampleRow {
	t.Helper()
	f, err := os.Open(consumerSample)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []sampleRow
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || strings.HasPrefix(line, "addr,") {
			continue
		}
		fs := strings.Split(line, ",")
		if len(fs) != 4 {
			t.Fatalf("bad sample line %q", line)
		}
		a, err := netip.ParseAddr(fs[0])
		n, err2 := strconv.ParseUint(fs[1], 10, 32)
		if err != nil || err2 != nil {
			t.Fatalf("bad sample line %q", line)
		}
		rows = append(rows, sampleRow{a, uint32(n), fs[2], fs[3] == "1"})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// writeConsumerSample draws the sample from the snapshot's AS table with a
// fixed seed, so that drawing again from the same table gives the same file.
func writeConsumerSample(t *testing.T, s *Snapshot) {
	t.Helper()
	rng := rand.New(rand.NewPCG(13, 2026))
	var b strings.Builder
	b.WriteString("# Consumer broadband and mobile addresses drawn from the IP -> AS table\n")
	b.WriteString("# (go test ./intel/netlists -run TestConsumerSample -regen-consumer-sample).\n")
	b.WriteString("addr,asn,kind,blocklisted\n")
	for _, ca := range consumerASNs {
		var r4, r6 []int
		for i, v := range s.asn.v4.val {
			if s.asnRows[v].asn == ca.asn {
				r4 = append(r4, i)
			}
		}
		for i, v := range s.asn.v6.val {
			if s.asnRows[v].asn == ca.asn {
				r6 = append(r6, i)
			}
		}
		if len(r4) == 0 {
			t.Fatalf("AS%d has no IPv4 space", ca.asn)
		}
		// Weighted by size: a random address of the AS's whole space.
		var total uint64
		for _, i := range r4 {
			total += uint64(s.asn.v4.end[i]-s.asn.v4.start[i]) + 1
		}
		seen := map[netip.Addr]bool{}
		for len(seen) < samplePerAS {
			x := rng.Uint64N(total)
			for _, i := range r4 {
				n := uint64(s.asn.v4.end[i]-s.asn.v4.start[i]) + 1
				if x < n {
					a := uint32(s.asn.v4.start[i]) + uint32(x)
					addr := netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)})
					if !seen[addr] {
						seen[addr] = true
						fmt.Fprintf(&b, "%s,%d,%s,0\n", addr, ca.asn, ca.kind)
					}
					break
				}
				x -= n
			}
		}
		for j := 0; j < sampleV6PerAS && len(r6) > 0; j++ {
			i := r6[rng.IntN(len(r6))]
			st := s.asn.v6.start[i]
			// A random interface in the range's first /64s.
			st.Lo = rng.Uint64()
			if e := s.asn.v6.end[i]; e.Less(st) || st.Less(s.asn.v6.start[i]) {
				st = s.asn.v6.start[i]
			}
			fmt.Fprintf(&b, "%s,%d,%s,0\n", st.Addr(), ca.asn, ca.kind)
		}
		var blocked []netip.Addr
		for i, v := range s.lists.v4.val {
			if v&flagBlocklist == 0 {
				continue
			}
			a := s.lists.v4.start[i]
			addr := netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)})
			if s.Classify(addr).ASN == ca.asn {
				blocked = append(blocked, addr)
			}
		}
		rng.Shuffle(len(blocked), func(i, j int) { blocked[i], blocked[j] = blocked[j], blocked[i] })
		blocked = blocked[:min(len(blocked), sampleBlockedPerAS)]
		slices.SortFunc(blocked, netip.Addr.Compare)
		for _, a := range blocked {
			fmt.Fprintf(&b, "%s,%d,%s,1\n", a, ca.asn, ca.kind)
		}
	}
	if err := os.MkdirAll("testdata", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(consumerSample, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestHostingShareThreshold pins the measurement behind HostingShareMin on
// the embedded feeds: among the 300 largest networks (by IPv4 space) every
// one at or above the threshold is a cloud, hosting or CDN network (on a
// hosting list, a cloud/hosting/CDN provider, or reviewed by hand below),
// while every mobile carrier and every sampled consumer network stays under
// it.
func TestHostingShareThreshold(t *testing.T) {
	s := embeddedSnapshot(t)
	// Over the threshold and on no list, reviewed by hand (none so far).
	reviewed := map[uint32]bool{}
	size := make([]uint64, len(s.asnRows))
	for i, v := range s.asn.v4.val {
		size[v] += uint64(s.asn.v4.end[i]-s.asn.v4.start[i]) + 1
	}
	idx := make([]int, len(s.asnRows))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return -cmpU64(size[a], size[b]) })
	over := 0
	for _, i := range idx[:300] {
		r := &s.asnRows[i]
		if !r.overShare() {
			continue
		}
		over++
		switch r.providerKind {
		case "cloud", "hosting", "cdn":
			continue
		}
		if !r.datacenter && !reviewed[r.asn] {
			t.Errorf("AS%d %q (%d addresses) has hosting share %d bp: not a known hosting network", r.asn, r.org, size[i], r.hosting)
		}
	}
	if over < 10 {
		t.Errorf("only %d of the 300 largest networks over the threshold", over)
	}
	consumer := map[uint32]bool{}
	for _, c := range consumerASNs {
		consumer[c.asn] = true
	}
	checked := 0
	for i := range s.asnRows {
		r := &s.asnRows[i]
		if !r.mobile && !consumer[r.asn] {
			continue
		}
		checked++
		if r.overShare() || r.hostingAS() {
			t.Errorf("AS%d %q (mobile %v): hosting share %d bp reads as hosting", r.asn, r.org, r.mobile, r.hosting)
		}
	}
	if checked < len(consumerASNs)+30 {
		t.Errorf("only %d carrier and consumer networks checked", checked)
	}
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
