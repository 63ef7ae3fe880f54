package fastapi

import (
	"net/netip"
	"strings"
	"testing"
)

// TestAllowlistMappedPrefixIsIPv4: callers' addresses are unmapped
// (::ffff:198.51.100.7 is read as 198.51.100.7), and a bare mapped address
// is stored as its IPv4 form; a mapped CIDR must be too, or it is stored as
// an IPv6 prefix no caller ever matches and the account's own servers get
// 403 with their live key.
func TestAllowlistMappedPrefixIsIPv4(t *testing.T) {
	got, err := canonicalPrefixes([]string{"::ffff:198.51.100.0/120", "::ffff:198.51.100.9"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"198.51.100.0/24", "198.51.100.9/32"}
	for i, w := range want {
		if got[i] != w {
			t.Fatalf("allowlist %d stored as %q, want %q", i, got[i], w)
		}
	}
	if !netip.MustParsePrefix(got[0]).Contains(netip.MustParseAddr("::ffff:198.51.100.7").Unmap()) {
		t.Fatal("a caller inside the mapped CIDR is not on the allowlist")
	}
}

// FuzzCanonicalPrefixes: any allowlist entry of the admin API is read
// without panicking. One that is accepted is stored as a masked prefix that
// reads back as itself, and every caller address the entry names — the
// address itself, or each address inside the CIDR, as callers' addresses
// are unmapped — is inside what is stored.
func FuzzCanonicalPrefixes(f *testing.F) {
	for _, s := range []string{"203.0.113.7", " 2001:db8::1/64 ", "::ffff:198.51.100.0/120", "::ffff:198.51.100.9", "::ffff:0:0/95",
		"fe80::1%eth0", "10.0.0.0/33", "0.0.0.0/0", "::/0", "1.2.3.4/32/1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out, err := canonicalPrefixes([]string{s})
		if err != nil {
			return
		}
		p, perr := netip.ParsePrefix(out[0])
		if len(out) != 1 || perr != nil || p != p.Masked() || p.Addr().Zone() != "" {
			t.Fatalf("%q stored as %q", s, out)
		}
		if again, err := canonicalPrefixes(out); err != nil || again[0] != out[0] {
			t.Fatalf("%q stored as %q, which reads back as %q, %v", s, out[0], again, err)
		}
		var named netip.Addr
		if in, err := netip.ParsePrefix(strings.TrimSpace(s)); err == nil {
			named = in.Masked().Addr() // the CIDR's first address
			if in.Addr().Is4In6() && in.Bits() < 96 {
				return // an IPv6 prefix wider than the mapped range: kept in IPv6 form
			}
		} else {
			named = netip.MustParseAddr(strings.TrimSpace(s))
		}
		if !p.Contains(named.Unmap()) {
			t.Fatalf("%q stored as %q, which does not hold %v", s, out[0], named.Unmap())
		}
	})
}
