package accounts

import (
	"net/netip"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/internal/clock"
)

// TestAllowlistWithNoUsableEntryAdmitsNobody: an allowlist entry that does
// not parse as a prefix (a bare address, as ADMIN.md's "IPs or CIDRs"
// reads, or a record written by another version) is skipped; when that
// leaves no prefix the account still has an allowlist, and the live key
// must be refused everywhere rather than accepted from every address.
func TestAllowlistWithNoUsableEntryAdmitsNobody(t *testing.T) {
	clk := clock.NewOffset()
	s, db := start(t, vfs.NewMem(), clk)
	defer func() { s.Stop(); db.Close() }()
	c, err := s.Create(NewAccount{Email: "a@b.co", Plan: "free"})
	if err != nil {
		t.Fatal(err)
	}
	allow := []string{"198.51.100.7"}
	v, err := s.Update(c.View.ID, Patch{Allowlist: &allow})
	if err != nil {
		t.Fatal(err)
	}
	if v.Allowed(netip.MustParseAddr("192.0.2.1")) {
		t.Fatal("an allowlist whose entries did not parse admitted an address it does not list")
	}
	none := []string{}
	if v, err = s.Update(c.View.ID, Patch{Allowlist: &none}); err != nil || !v.Allowed(netip.MustParseAddr("192.0.2.1")) {
		t.Fatalf("an empty allowlist must admit every address: %v", err)
	}
}
