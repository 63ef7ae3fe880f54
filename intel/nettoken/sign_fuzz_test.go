package nettoken

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

// FuzzSignVerify: what the collect endpoint mints from a visitor's report
// (its address, proxy headers and the WebRTC addresses the page lists, read
// as CollectNetwork reads them) verifies for the account and states the
// same facts; for another account it does not verify. FuzzVerify cannot
// reach parse (it cannot forge the MAC); this does.
func FuzzSignVerify(f *testing.F) {
	f.Add("acc_1", int64(1_790_000_000), []byte{73, 0, 0, 1}, uint8(3), uint8(0x1d), "2606:4700::1111,1.1.1.1,10.0.0.1,fe80::1%eth0,1.1.1.1,::ffff:8.8.8.8")
	f.Add("", int64(-5), []byte{}, uint8(0), uint8(0xff), "")
	f.Fuzz(func(t *testing.T, account string, issued int64, addr []byte, flags, headers uint8, webrtc string) {
		fa := Facts{Issued: time.Unix(issued, 0), Infra: flags&1 != 0, Report: flags&2 != 0, WebRTC: WebRTC(flags >> 2 % 5), Headers: headers}
		switch len(addr) {
		case 4:
			fa.Addr = netip.AddrFrom4([4]byte(addr))
		case 16:
			fa.Addr = netip.AddrFrom16([16]byte(addr)).Unmap()
		}
		for _, s := range strings.Split(webrtc, ",") {
			if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
				fa.AddCandidate(a, IsPublic)
			}
		}
		tok := codec.Sign(account, &fa)
		if len(tok) > MaxLen {
			t.Fatalf("token of %d bytes, MaxLen %d", len(tok), MaxLen)
		}
		got, ok := codec.Verify(account, tok)
		if issued < 0 || issued > 1<<40 {
			return // the clock is never there; Sign clamps below 0 and parse refuses past 2^40
		}
		want := fa
		want.Issued = time.Unix(issued, 0).UTC()
		if !ok || got != want {
			t.Fatalf("signed %+v, verified %v as %+v", want, ok, got)
		}
		if _, ok := codec.Verify(account+"x", tok); ok && len(account) < maxAccount {
			t.Fatalf("a token for %q verifies for %q", account, account+"x")
		}
	})
}

// FuzzParse: any payload the MAC vouches for parses or fails without a
// panic, and what parses re-signs to a payload that parses the same.
func FuzzParse(f *testing.F) {
	f.Add([]byte{1, 0x80, 0x80, 0x80, 0x80, 0x04, 3, 0, 4, 73, 0, 0, 1, 1, 6, 0x26, 6, 0x47, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x11, 0x11})
	f.Add([]byte{1, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, p []byte) {
		fa, ok := parse(p)
		if !ok {
			return
		}
		if fa.NCand > MaxCandidates {
			t.Fatalf("%x: %d candidates", p, fa.NCand)
		}
		back, ok := codec.Verify("a", codec.Sign("a", &fa))
		fa.Addr = fa.Addr.Unmap()
		for i := range fa.Candidates[:fa.NCand] {
			fa.Candidates[i] = fa.Candidates[i].Unmap()
		}
		if !ok || back != fa {
			t.Fatalf("%x parsed as %+v, re-signed as %+v %v", p, fa, back, ok)
		}
	})
}
