package fastapi

import (
	"encoding/json"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/actors/checks"
)

// FuzzMatchPath: any request path routes as a plain scan of the route table
// in order would route it (the exact-path index and the segment-count skip
// change nothing), and a matched route's pattern with its parameters put
// back gives the path.
func FuzzMatchPath(f *testing.F) {
	for _, p := range []string{"/v1/lookup/1.1.1.1", "/v1/lookup/", "/v1/lookup/10.0.0.0/8", "//admin/v1/accounts/a/rules/", "/console", "/console/x/y", "/mcp/", "/", ""} {
		f.Add("GET", p)
		f.Add("POST", p)
	}
	s := New(Config{AdminToken: "adm"}, Deps{})
	f.Fuzz(func(t *testing.T, method, path string) {
		var r request
		rt, allow := matchIn(&s.all, []byte(method), []byte(path), &r)
		// Reference: every route in order, no index.
		p := strings.Trim(path, "/")
		var want *route
		var wantAllow []string
		var wr request
		for _, x := range s.routes {
			if !matchSegs(x.segs, p, &wr) {
				continue
			}
			if x.method == method || (x.method == "GET" && method == "HEAD") {
				want = x
				break
			}
			wantAllow = append(wantAllow, x.method)
			if x.method == "GET" {
				wantAllow = append(wantAllow, "HEAD")
			}
		}
		if want == nil {
			wr.nparams = 0
		}
		if rt != want || (want == nil && allow != strings.Join(wantAllow, ", ")) {
			t.Fatalf("%s %q: route %v allow %q; a scan gives %v allow %q", method, path, rt, allow, want, wantAllow)
		}
		if rt == nil {
			return
		}
		if r.nparams != wr.nparams || r.params != wr.params {
			t.Fatalf("%s %q: params %q, a scan gives %q", method, path, r.params[:r.nparams], wr.params[:wr.nparams])
		}
		got, k := make([]string, 0, len(rt.segs)), 0
		for _, seg := range rt.segs {
			if strings.HasPrefix(seg, "{") {
				got = append(got, r.params[k])
				k++
				continue
			}
			got = append(got, seg)
		}
		if back := strings.Join(got, "/"); back != p && !(rt.rest && back == p+"/") {
			t.Fatalf("%q matched %s with %q: back %q", path, rt.pattern, r.params[:r.nparams], back)
		}
	})
}

// FuzzReadFreeIP: POST /api/lookup's body (anyone's) names an address only
// when it is one JSON object whose "ip" is a string, read as encoding/json
// reads it.
func FuzzReadFreeIP(f *testing.F) {
	for _, s := range []string{`{"ip":"1.1.1.1"}`, `{"ip":"1.1.1.1:80","x":1}`, `{"IP":"8.8.8.8"}`, `{"ip":"\u0031.1.1.1"}`, `{"ip":null}`, `{"ip":5}`, ` {"ip":"2606:4700::1111"} `, `{"ip":"1.1.1.1"}x`, `{"ip":"1.1.1.1","ip":"8.8.8.8"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got := readFreeIP(body)
		if !got.OK() && (got.Err() == checks.MissingIP().Err()) {
			return
		}
		if !json.Valid(body) {
			// sonic v1.15 skips an unread string value without checking
			// its escapes (bytedance/sonic#938): such a body, not JSON, is
			// read like the JSON it nearly is. Only what the ip member
			// gives is this property's.
			return
		}
		var in struct {
			IP json.RawMessage `json:"ip"`
		}
		if err := json.Unmarshal(body, &in); err != nil {
			t.Fatalf("%q: encoding/json: %v, read as %+v", body, err, got)
		}
		var s string
		if json.Unmarshal(in.IP, &s) != nil {
			if got.OK() {
				t.Fatalf("%q: ip %s is not a string, read as %+v", body, in.IP, got)
			}
			return
		}
		if want := checks.PastedTarget(s); want.OK() != got.OK() || want.Addr != got.Addr {
			t.Fatalf("%q: read as %+v, encoding/json's string %q gives %+v", body, got, s, want)
		}
	})
}

// FuzzClientAddr: with a trusted proxy as the peer, the client is the
// right-most X-Forwarded-For hop (across lines, last line last) that is not
// trusted, the walk stopping at the first unreadable hop.
func FuzzClientAddr(f *testing.F) {
	f.Add("203.0.113.9, 10.0.0.2", "")
	f.Add("203.0.113.9", "198.51.100.7, 10.0.0.2")
	f.Add("[2001:db8::1]:443, 10.1.1.1:80", "garbage, 10.0.0.3")
	f.Add("fe80::1%eth0", "::ffff:10.0.0.1")
	s := &Server{}
	s.cfg.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	peer := netip.MustParseAddr("10.9.9.9")
	f.Fuzz(func(t *testing.T, line1, line2 string) {
		var ctx fasthttp.RequestCtx
		ctx.SetRemoteAddr(net.TCPAddrFromAddrPort(netip.AddrPortFrom(peer, 1)))
		var lines []string
		for _, l := range []string{line1, line2} {
			if l == "" {
				continue
			}
			if strings.ContainsAny(l, "\r\n\x00") {
				return
			}
			ctx.Request.Header.Add("X-Forwarded-For", l)
			lines = append(lines, l)
		}
		sent := ctx.Request.Header.PeekAll("X-Forwarded-For")
		if len(sent) != len(lines) {
			return // fasthttp folded or dropped a line: not this property's case
		}
		want := peer
		var hops []string
		for _, l := range sent {
			hops = append(hops, strings.Split(string(l), ",")...)
		}
		for i := len(hops) - 1; i >= 0; i-- {
			h := strings.TrimSpace(hops[i])
			if h == "" {
				continue // an empty list element is skipped
			}
			a, err := parseHop([]byte(h))
			if err != nil {
				break
			}
			want = a.Unmap()
			if !s.trusted(want) {
				break
			}
		}
		if got := s.clientAddr(&ctx); got != want {
			t.Fatalf("X-Forwarded-For %q: client %v, want %v", sent, got, want)
		}
	})
}

// acceptsGzipRef reads Accept-Encoding as RFC 9110 §12.5.3 does: gzip is
// acceptable when listed (or covered by *) with a weight above 0; an
// explicit gzip entry wins over *.
func acceptsGzipRef(ae string) (bool, bool) {
	star, gz := -1.0, -1.0
	for _, item := range strings.Split(ae, ",") {
		parts := strings.Split(item, ";")
		coding := strings.ToLower(strings.TrimSpace(parts[0]))
		q := 1.0
		if len(parts) > 2 {
			return false, false // RFC 9110: a coding takes one weight and nothing else
		}
		for _, p := range parts[1:] {
			p = strings.TrimSpace(p)
			if !(len(p) >= 2 && (p[0] == 'q' || p[0] == 'Q') && p[1] == '=') {
				return false, false
			}
			if len(p) >= 2 && (p[0] == 'q' || p[0] == 'Q') && p[1] == '=' {
				v, err := strconv.ParseFloat(p[2:], 64)
				if !qvalue.MatchString(p[2:]) || err != nil {
					return false, false // not a weight this reference judges
				}
				q = v
			}
		}
		switch coding {
		case "gzip":
			if gz < 0 {
				gz = q
			}
		case "*":
			if star < 0 {
				star = q
			}
		}
	}
	if gz >= 0 {
		return gz > 0, true
	}
	return star > 0, true
}

var qvalue = regexp.MustCompile(`^(0(\.[0-9]{0,3})?|1(\.0{0,3})?)$`)

// FuzzAcceptsGzip: acceptsGzip agrees with RFC 9110 on every value whose
// weights are plain numbers.
func FuzzAcceptsGzip(f *testing.F) {
	for _, s := range []string{"gzip", "br, gzip;q=0.9", "gzip;q=0", "*;q=0, gzip", "GZIP;Q=0.000", "identity", "*"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ae string) {
		want, judged := acceptsGzipRef(ae)
		if !judged || strings.ContainsAny(ae, "\"") {
			return
		}
		if got := acceptsGzip([]byte(ae)); got != want {
			t.Fatalf("Accept-Encoding %q: gzip %v, RFC 9110 %v", ae, got, want)
		}
	})
}
