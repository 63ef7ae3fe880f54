package fastapi

import (
	"net/netip"
	"testing"
)

// TestParseHopKeepsNoView: a hop parsed without a copy leaves nothing of
// the request's buffer in the address, zone or not, and parses as
// ParseAddr does.
func TestParseHopKeepsNoView(t *testing.T) {
	for _, hop := range []string{"73.0.0.1", "2001:db8::7", "fe80::1%eth0", "::ffff:10.0.0.1", "", "not-an-ip", "1.2.3.4%"} {
		buf := []byte(hop)
		got, err := parseHop(buf)
		want, werr := netip.ParseAddr(hop)
		if (err != nil) != (werr != nil) || got != want {
			t.Fatalf("%q: %v %v; ParseAddr %v %v", hop, got, err, want, werr)
		}
		for i := range buf {
			buf[i] = 'x'
		}
		if err == nil && got.String() != want.String() {
			t.Fatalf("%q: the address changed with the buffer: %v", hop, got)
		}
	}
}

// FuzzParseHop: any hop parses as netip.ParseAddr would.
func FuzzParseHop(f *testing.F) {
	for _, s := range []string{"73.0.0.1", "fe80::1%eth0", "::1", " 1.1.1.1", "300.1.1.1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, hop string) {
		got, err := parseHop([]byte(hop))
		want, werr := netip.ParseAddr(hop)
		if (err != nil) != (werr != nil) || got != want {
			t.Fatalf("%q: %v %v; ParseAddr %v %v", hop, got, err, want, werr)
		}
	})
}
