package fastapi

import (
	"bufio"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/intel/nettoken"
)

// hopWant is what parseHop should make of a hop: ParseAddr's address, or
// the address of a hop written with its port or in brackets.
func hopWant(hop string) (netip.Addr, error) {
	a, err := netip.ParseAddr(hop)
	if err == nil {
		return a, nil
	}
	if ap, perr := netip.ParseAddrPort(hop); perr == nil {
		return ap.Addr(), nil
	}
	if strings.HasPrefix(hop, "[") && strings.HasSuffix(hop, "]") {
		if a, berr := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(hop, "["), "]")); berr == nil && a.Is6() {
			return a, nil
		}
	}
	return netip.Addr{}, err
}

// TestParseHopKeepsNoView: a hop parsed without a copy leaves nothing of
// the request's buffer in the address, zone or not, and parses as
// hopWant says.
func TestParseHopKeepsNoView(t *testing.T) {
	for _, hop := range []string{"73.0.0.1", "2001:db8::7", "fe80::1%eth0", "::ffff:10.0.0.1", "", "not-an-ip", "1.2.3.4%",
		"203.0.113.9:51234", "[2001:db8::7]:443", "[fe80::1%eth0]:80", "[2001:db8::7]", "[1.2.3.4]", "1.2.3.4:"} {
		buf := []byte(hop)
		got, err := parseHop(buf)
		want, werr := hopWant(hop)
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

// FuzzParseHop: any hop parses as hopWant says.
func FuzzParseHop(f *testing.F) {
	for _, s := range []string{"73.0.0.1", "fe80::1%eth0", "::1", " 1.1.1.1", "300.1.1.1", "1.2.3.4:80", "[::1]:443", "[::1]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, hop string) {
		got, err := parseHop([]byte(hop))
		want, werr := hopWant(hop)
		if (err != nil) != (werr != nil) || got != want {
			t.Fatalf("%q: %v %v; ParseAddr %v %v", hop, got, err, want, werr)
		}
	})
}

// TestClientAddrLastXFFLine: a trusted proxy that adds its hop as an
// X-Forwarded-For line of its own, after the one the client sent, names the
// client in the last line; the client's own line is not believed.
func TestClientAddrLastXFFLine(t *testing.T) {
	s := &Server{}
	s.cfg.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	for _, tc := range []struct{ raw, want string }{
		{"X-Forwarded-For: 203.0.113.9\r\nX-Forwarded-For: 198.51.100.7\r\n", "198.51.100.7"},
		{"X-Forwarded-For: 203.0.113.9\r\nX-Forwarded-For: 198.51.100.7, 10.0.0.2\r\n", "198.51.100.7"},
		{"X-Forwarded-For: 203.0.113.9, 198.51.100.7\r\n", "198.51.100.7"},
		{"X-Forwarded-For: 203.0.113.9\r\nX-Forwarded-For: 10.0.0.2\r\n", "203.0.113.9"},
	} {
		var ctx fasthttp.RequestCtx
		raw := "GET / HTTP/1.1\r\nHost: x\r\n" + tc.raw + "\r\n"
		if err := ctx.Request.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
			t.Fatal(err)
		}
		ctx.SetRemoteAddr(net.TCPAddrFromAddrPort(netip.MustParseAddrPort("10.0.0.1:4000")))
		if got := s.clientAddr(&ctx); got != netip.MustParseAddr(tc.want) {
			t.Errorf("%q: client %v, want %s", tc.raw, got, tc.want)
		}
	}
}

// TestProxyHeadersEarlierXFFLine: a visitor's forwarding proxy's
// X-Forwarded-For line, before the one our trusted proxy added for the
// client, is proxy evidence as a hop left of the client on one line is.
func TestProxyHeadersEarlierXFFLine(t *testing.T) {
	s := &Server{}
	s.cfg.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	for _, tc := range []struct {
		raw  string
		want uint8
	}{
		{"X-Forwarded-For: 198.51.100.7\r\nX-Forwarded-For: 203.0.113.5\r\n", nettoken.HeaderXFF},
		{"X-Forwarded-For: 198.51.100.7, 203.0.113.5\r\n", nettoken.HeaderXFF},
		{"X-Forwarded-For: 203.0.113.5\r\n", 0},
		{"X-Forwarded-For: 203.0.113.5, 10.0.0.2\r\n", 0},
	} {
		var ctx fasthttp.RequestCtx
		raw := "GET / HTTP/1.1\r\nHost: x\r\n" + tc.raw + "\r\n"
		if err := ctx.Request.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
			t.Fatal(err)
		}
		ctx.SetRemoteAddr(net.TCPAddrFromAddrPort(netip.MustParseAddrPort("10.0.0.1:4000")))
		client := s.clientAddr(&ctx)
		if client != netip.MustParseAddr("203.0.113.5") {
			t.Fatalf("%q: client %v", tc.raw, client)
		}
		if flags, infra := s.proxyHeaders(&ctx, client); flags&nettoken.HeaderXFF != tc.want || infra {
			t.Errorf("%q: flags %#x infra %v, want XFF flag %#x", tc.raw, flags, infra, tc.want)
		}
	}
}

// TestClientAddrHopWithPort: a trusted proxy that writes the client's hop
// with its port (Azure Application Gateway) or an IPv6 hop in brackets
// still names the client; the walk does not stop at the proxy.
func TestClientAddrHopWithPort(t *testing.T) {
	s := &Server{}
	s.cfg.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	for _, tc := range []struct{ raw, want string }{
		{"X-Forwarded-For: 203.0.113.9:51234\r\n", "203.0.113.9"},
		{"X-Forwarded-For: 198.51.100.7, [2001:db8::7]:443\r\n", "2001:db8::7"},
		{"X-Forwarded-For: [2001:db8::7]\r\n", "2001:db8::7"},
		{"X-Forwarded-For: 203.0.113.9:51234, 10.0.0.2:80\r\n", "203.0.113.9"},
	} {
		var ctx fasthttp.RequestCtx
		raw := "GET / HTTP/1.1\r\nHost: x\r\n" + tc.raw + "\r\n"
		if err := ctx.Request.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
			t.Fatal(err)
		}
		ctx.SetRemoteAddr(net.TCPAddrFromAddrPort(netip.MustParseAddrPort("10.0.0.1:4000")))
		if got := s.clientAddr(&ctx); got != netip.MustParseAddr(tc.want) {
			t.Errorf("%q: client %v, want %s", tc.raw, got, tc.want)
		}
	}
}
