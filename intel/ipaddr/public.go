package ipaddr

import "net/netip"

// block4 is an IPv4 prefix as a network number and mask, so the check is
// two integer operations and needs no allocation.
type block4 struct{ net, mask uint32 }

func b4(a, b, c, d byte, bits uint) block4 {
	mask := ^uint32(0) << (32 - bits)
	return block4{net: uint32(a)<<24 | uint32(b)<<16 | uint32(c)<<8 | uint32(d), mask: mask}
}

// notGlobal4 lists the IANA IPv4 special-purpose blocks that are not globally
// reachable (iana.org/assignments/iana-ipv4-special-registry), plus
// 192.88.99.0/24 (the deprecated 6to4 relay anycast, RFC 7526). 240.0.0.0/4
// covers 255.255.255.255.
var notGlobal4 = [...]block4{
	b4(0, 0, 0, 0, 8),       // "this network"
	b4(10, 0, 0, 0, 8),      // private
	b4(100, 64, 0, 0, 10),   // shared address space (CGNAT)
	b4(127, 0, 0, 0, 8),     // loopback
	b4(169, 254, 0, 0, 16),  // link local
	b4(172, 16, 0, 0, 12),   // private
	b4(192, 0, 0, 0, 24),    // IETF protocol assignments (see globalIn192_0_0)
	b4(192, 0, 2, 0, 24),    // TEST-NET-1
	b4(192, 88, 99, 0, 24),  // 6to4 relay anycast (deprecated)
	b4(192, 168, 0, 0, 16),  // private
	b4(198, 18, 0, 0, 15),   // benchmarking
	b4(198, 51, 100, 0, 24), // TEST-NET-2
	b4(203, 0, 113, 0, 24),  // TEST-NET-3
	b4(224, 0, 0, 0, 4),     // multicast
	b4(240, 0, 0, 0, 4),     // reserved, includes limited broadcast
}

// The registry marks two single addresses inside 192.0.0.0/24 as globally
// reachable: 192.0.0.9 (PCP anycast) and 192.0.0.10 (TURN anycast).
const (
	pcpAnycast4  = 192<<24 | 9
	turnAnycast4 = 192<<24 | 10
)

// block6 is an IPv6 prefix of at most 64 bits, compared on the high half.
type block6 struct{ net, mask uint64 }

func b6(hi uint64, bits uint) block6 {
	return block6{net: hi, mask: ^uint64(0) << (64 - bits)}
}

// Everything outside 2000::/3 (global unicast) is non-public: that covers
// ::/128, ::1, ::ffff:0:0/96, 64:ff9b::/96, 64:ff9b:1::/48, 100::/64,
// 5f00::/16, fc00::/7, fe80::/10 and ff00::/8 at once. Inside 2000::/3 these
// special-purpose blocks are not globally reachable:
var notGlobal6 = [...]block6{
	b6(0x2001_0000_0000_0000, 23), // IETF protocol assignments (see global6)
	b6(0x2001_0db8_0000_0000, 32), // documentation
	b6(0x2002_0000_0000_0000, 16), // 6to4
	b6(0x3fff_0000_0000_0000, 20), // documentation (RFC 9637)
}

// global6 are the sub-blocks of 2001::/23 the registry marks globally
// reachable: AMT 2001:3::/32, AS112-v6 2001:4:112::/48, ORCHIDv2
// 2001:20::/28 and DRIP 2001:30::/28. (The three single TEREDO-adjacent
// anycast addresses 2001:1::1-3 are handled in IsPublic.)
var global6 = [...]block6{
	b6(0x2001_0003_0000_0000, 32),
	b6(0x2001_0004_0112_0000, 48),
	b6(0x2001_0020_0000_0000, 28),
	b6(0x2001_0030_0000_0000, 28),
}

// IsPublic reports whether a is a globally reachable unicast address: false
// for the invalid address, zoned addresses, IPv4-mapped IPv6 and everything
// the IANA IPv4 and IPv6 special-purpose registries mark as not globally
// reachable. It does not allocate.
func IsPublic(a netip.Addr) bool {
	if !a.IsValid() || a.Zone() != "" {
		return false
	}
	if a.Is4() {
		b := a.As4()
		v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
		if v == pcpAnycast4 || v == turnAnycast4 {
			return true
		}
		for _, blk := range notGlobal4 {
			if v&blk.mask == blk.net {
				return false
			}
		}
		return true
	}
	b := a.As16()
	hi := uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
		uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
	if hi>>61 != 1 { // outside 2000::/3
		return false
	}
	for _, blk := range global6 {
		if hi&blk.mask == blk.net {
			return true
		}
	}
	if hi == 0x2001_0001_0000_0000 {
		lo := uint64(b[8])<<56 | uint64(b[9])<<48 | uint64(b[10])<<40 | uint64(b[11])<<32 |
			uint64(b[12])<<24 | uint64(b[13])<<16 | uint64(b[14])<<8 | uint64(b[15])
		if lo >= 1 && lo <= 3 { // 2001:1::1 PCP, 2001:1::2 TURN, 2001:1::3 DNS-SD SRP anycast
			return true
		}
	}
	for _, blk := range notGlobal6 {
		if hi&blk.mask == blk.net {
			return false
		}
	}
	return true
}

// Prefix64 returns the key under which an address shares per-network limits:
// its /64 for IPv6 and the address itself (/32) for IPv4. IPv4-mapped
// addresses are keyed as their IPv4 address. The result is comparable and
// usable as a map key; it does not allocate.
func Prefix64(a netip.Addr) netip.Prefix {
	a = a.Unmap().WithZone("")
	if a.Is4() {
		return netip.PrefixFrom(a, 32)
	}
	p, err := a.Prefix(64)
	if err != nil { // only for the invalid address
		return netip.Prefix{}
	}
	return p
}
