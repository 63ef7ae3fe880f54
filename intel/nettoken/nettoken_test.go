package nettoken

import (
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fraudd/fraudd/intel/netlists"
)

var (
	key   = []byte("0123456789abcdef0123456789abcdef")
	at    = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	codec = New(key)
)

func facts(addr string, cands ...string) Facts {
	f := Facts{Issued: at, Addr: netip.MustParseAddr(addr), Report: true, WebRTC: WebRTCOK}
	for _, c := range cands {
		f.AddCandidate(netip.MustParseAddr(c), IsPublic)
	}
	return f
}

func TestRoundTrip(t *testing.T) {
	for _, f := range []Facts{
		facts("73.0.0.1"),
		facts("2606:54c0::1", "73.0.0.1", "2001:4860::1"),
		{Issued: at, Infra: true, Headers: HeaderVia | HeaderXFF, WebRTC: WebRTCTimeout},
		{}, // nothing known at all
		facts("8.8.8.8", "1.1.1.1", "9.9.9.9", "4.4.4.4", "5.5.5.5", "6.6.6.6"), // only 4 kept
	} {
		tok := codec.Sign("acc_one", &f)
		if !strings.HasPrefix(tok, Prefix) || len(tok) > MaxLen {
			t.Fatalf("token %q (len %d, max %d)", tok, len(tok), MaxLen)
		}
		got, ok := codec.Verify("acc_one", tok)
		if !ok {
			t.Fatalf("own token refused: %q", tok)
		}
		want := f
		if want.Issued.IsZero() {
			want.Issued = time.Unix(0, 0).UTC()
		}
		if got != want {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
		}
	}
	if f := facts("8.8.8.8", "1.1.1.1", "9.9.9.9", "4.4.4.4", "5.5.5.5"); f.NCand != MaxCandidates {
		t.Fatalf("kept %d candidates", f.NCand)
	}
}

func TestCandidatesFiltered(t *testing.T) {
	f := facts("73.0.0.1", "192.168.1.5", "10.0.0.1", "::ffff:73.0.0.9", "73.0.0.9", "fe80::1")
	if f.NCand != 1 || f.Candidates[0] != netip.MustParseAddr("73.0.0.9") {
		t.Fatalf("candidates %v (%d)", f.Candidates, f.NCand)
	}
}

// TestRefused: every tampered byte, another account, another key, truncation,
// padding, other alphabets and garbage are all the same "not ok".
func TestRefused(t *testing.T) {
	f := facts("73.0.0.1", "1.2.3.4")
	tok := codec.Sign("acc_one", &f)
	if _, ok := codec.Verify("acc_two", tok); ok {
		t.Fatal("another account's token verified")
	}
	if _, ok := New([]byte("another key")).Verify("acc_one", tok); ok {
		t.Fatal("token verified under another key")
	}
	body := tok[len(Prefix):]
	for i := 0; i < len(body); i++ {
		for _, c := range []byte{'A', 'B', '_', '-', 'z'} {
			if body[i] == c {
				continue
			}
			mut := Prefix + body[:i] + string(c) + body[i+1:]
			if _, ok := codec.Verify("acc_one", mut); ok {
				t.Fatalf("tampered token verified (byte %d → %c): %q", i, c, mut)
			}
		}
	}
	for _, bad := range []string{
		"", Prefix, "nt2." + body, "NT1." + body, tok[:len(tok)-1], tok[:len(tok)-3], tok + "A", tok + "=",
		tok + "AAAA", Prefix + strings.Repeat("A", MaxLen), "test_clean", "nt1.!!!!", Prefix + "+/+/",
	} {
		if _, ok := codec.Verify("acc_one", bad); ok {
			t.Fatalf("%q verified", bad)
		}
	}
}

func TestVerifyDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race")
	}
	f := facts("2606:54c0::1", "73.0.0.1", "2001:4860::1")
	tok := codec.Sign("acc_one", &f)
	codec.Verify("acc_one", tok) // warm the pool
	if n := testing.AllocsPerRun(200, func() {
		if _, ok := codec.Verify("acc_one", tok); !ok {
			t.Fatal("refused")
		}
	}); n != 0 {
		t.Fatalf("Verify allocates %.1f times", n)
	}
}

var (
	snapOnce sync.Once
	snap     *netlists.Snapshot
	snapErr  error
)

func embedded(t testing.TB) *netlists.Snapshot {
	snapOnce.Do(func() { snap, snapErr = netlists.LoadEmbedded() })
	if snapErr != nil {
		t.Fatal(snapErr)
	}
	return snap
}

func TestNetwork(t *testing.T) {
	s := embedded(t)
	type want struct {
		tor, relay, vpn, proxy, open, dc, blocked, mobile, complete, sdk bool
		service, country                                                 string
	}
	for _, c := range []struct {
		name string
		f    Facts
		w    want
	}{
		{"residential", facts("73.0.0.1"), want{complete: true, country: "US"}},
		{"residential, candidate in its /24", facts("73.0.0.1", "73.0.0.200"), want{complete: true, country: "US"}},
		{"residential, WebRTC shows another address", facts("73.0.0.1", "24.0.0.1"), want{proxy: true, complete: true, country: "US"}},
		{"dual stack is not a mismatch", facts("2601:1c0:4001::1", "73.0.0.1"), want{complete: true, country: s.Country(netip.MustParseAddr("2601:1c0:4001::1"))}},
		{"IPv6 same /64", facts("2601:1c0:4001::1", "2601:1c0:4001::ffff"), want{complete: true, country: s.Country(netip.MustParseAddr("2601:1c0:4001::1"))}},
		{"IPv6 other /64", facts("2601:1c0:4001::1", "2601:1c0:4002::1"), want{proxy: true, complete: true, country: s.Country(netip.MustParseAddr("2601:1c0:4001::1"))}},
		{"Via header", func() Facts { f := facts("73.0.0.1"); f.Headers = HeaderVia; return f }(), want{proxy: true, complete: true, country: "US"}},
		{"no browser report", func() Facts { f := facts("73.0.0.1"); f.Report = false; return f }(), want{country: "US"}},
		{"tor", facts("102.130.113.9"), want{tor: true, complete: true, service: "TOR", country: s.Country(netip.MustParseAddr("102.130.113.9"))}},
		{"privacy relay, mismatch explained", facts("104.28.28.1", "73.0.0.1"), want{relay: true, complete: true, service: "iCloud Private Relay", country: s.Country(netip.MustParseAddr("104.28.28.1"))}},
		{"vpn with label", facts("2.56.252.1", "73.0.0.1"), want{vpn: true, dc: true, complete: true, service: "NordVPN", country: s.Country(netip.MustParseAddr("2.56.252.1"))}},
		{"open proxy", facts("144.31.222.106"), want{open: true, complete: true, country: s.Country(netip.MustParseAddr("144.31.222.106")), dc: s.Classify(netip.MustParseAddr("144.31.222.106")).Datacenter, service: s.Classify(netip.MustParseAddr("144.31.222.106")).Service}},
		{"cloud", facts("1.178.1.1"), want{dc: true, complete: true, service: "AWS", country: s.Country(netip.MustParseAddr("1.178.1.1"))}},
		{"blocklisted", facts("77.90.185.20"), want{blocked: true, complete: true, country: s.Country(netip.MustParseAddr("77.90.185.20")), dc: s.Classify(netip.MustParseAddr("77.90.185.20")).Datacenter, service: s.Classify(netip.MustParseAddr("77.90.185.20")).Service}},
		{"mobile", facts("172.32.0.1"), want{mobile: true, complete: true, country: s.Country(netip.MustParseAddr("172.32.0.1"))}},
		{"private address", facts("192.168.1.10", "73.0.0.1"), want{sdk: true}},
		{"loopback", facts("127.0.0.1"), want{sdk: true}},
		{"missing", Facts{Issued: at, Report: true}, want{sdk: true}},
		{"own infrastructure", func() Facts { f := facts("73.0.0.1"); f.Infra = true; return f }(), want{sdk: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := Network(&c.f, s)
			g := want{n.Tor, n.PrivacyRelay, n.VPN, n.Proxy, n.OpenProxy, n.Datacenter, n.Blocklisted, n.Mobile, n.Complete, n.SDKBlocked, n.Service, n.Country}
			if g != c.w {
				t.Fatalf("\n got %+v\nwant %+v", g, c.w)
			}
			if n.Degraded {
				t.Fatal("a token's answer is never degraded")
			}
		})
	}
}

func TestAge(t *testing.T) {
	f := facts("73.0.0.1")
	if a := Age(&f, at.Add(90*time.Second+400*time.Millisecond)); a != 90 {
		t.Fatalf("age %d", a)
	}
	if a := Age(&f, at.Add(-time.Hour)); a != 0 {
		t.Fatalf("negative age %d", a)
	}
}

func FuzzVerify(f *testing.F) {
	fa := facts("2606:54c0::1", "73.0.0.1")
	f.Add(codec.Sign("acc", &fa))
	f.Add("nt1.AAAA")
	f.Add("")
	f.Fuzz(func(t *testing.T, tok string) {
		got, ok := codec.Verify("acc", tok)
		if !ok {
			return
		}
		// Whatever verifies re-signs to the same token (one spelling).
		if again := codec.Sign("acc", &got); again != tok {
			t.Fatalf("verified %q re-signs as %q", tok, again)
		}
	})
}

func BenchmarkVerify(b *testing.B) {
	f := facts("73.0.0.1", "24.0.0.1")
	tok := codec.Sign("acc_0123456789ab", &f)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := codec.Verify("acc_0123456789ab", tok); !ok {
			b.Fatal("refused")
		}
	}
}

func BenchmarkVerifyAndNetwork(b *testing.B) {
	s := embedded(b)
	f := facts("73.0.0.1", "24.0.0.1")
	tok := codec.Sign("acc_0123456789ab", &f)
	b.ReportAllocs()
	for b.Loop() {
		got, _ := codec.Verify("acc_0123456789ab", tok)
		_ = Network(&got, s)
	}
}

func BenchmarkSign(b *testing.B) {
	f := facts("73.0.0.1", "24.0.0.1")
	b.ReportAllocs()
	for b.Loop() {
		_ = codec.Sign("acc_0123456789ab", &f)
	}
}
