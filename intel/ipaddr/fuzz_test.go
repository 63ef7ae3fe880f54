package ipaddr

import (
	"net/netip"
	"testing"
)

// looseSeeds are the pasted forms of SPEC 4.7 and their neighbours.
var looseSeeds = []string{
	"1.2.3.4", "1.2.3.4:80", "[2001:db8::1]:443", "[2606:4700::1111]:443",
	"https://1.2.3.4:8080/path", "http://[2606:4700::1111]/", "１．２．３．４",
	"１。２。３。４", "２６０６：４７００：：１１１１", "::ffff:1.2.3.4", " 8.8.8.8 ",
	"fe80::1%eth0", "2606:4700::1111", "", "[", "http://", "1.2.3.4:99999",
}

func FuzzParseLoose(f *testing.F) {
	for _, s := range looseSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseLoose(s)
		if err != nil {
			if a.IsValid() {
				t.Fatalf("ParseLoose(%q) returned %v with error %v", s, a, err)
			}
		} else {
			if !a.IsValid() || a.Zone() != "" || a.Is4In6() {
				t.Fatalf("ParseLoose(%q) = %v: invalid, zoned or mapped", s, a)
			}
			again, err := ParseLoose(a.String())
			if err != nil || again != a {
				t.Fatalf("canonical %q of %q re-parses to %v, %v", a.String(), s, again, err)
			}
		}
		// On plain input the loose reader agrees with netip.
		if p, perr := netip.ParseAddr(s); perr == nil && p.Zone() == "" && !p.Is4In6() {
			if err != nil || a != p {
				t.Fatalf("ParseLoose(%q) = %v, %v; netip.ParseAddr = %v", s, a, err, p)
			}
		}
		// The strict reader accepts a subset of the loose one.
		if sa, mapped, serr := ParseStrict(s); serr == nil {
			if err != nil || sa.Unmap() != a || mapped != sa.Is4In6() {
				t.Fatalf("ParseStrict(%q) = %v, %v but ParseLoose = %v, %v", s, sa, mapped, a, err)
			}
		}
		_ = IsPublic(a)
		_ = Prefix64(a)
	})
}
