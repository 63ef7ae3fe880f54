package fastapi

import (
	"net/netip"
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
