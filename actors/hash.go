package actors

import "net/netip"

// Mix64 scrambles x so that every output bit depends on every input bit
// (the splitmix64 finaliser). Shards route by the low bits of a hash, so keys
// that differ only in high bits (IPv6 prefixes, counters) still spread evenly.
func Mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// HashString hashes a key such as an account id (FNV-1a, then Mix64). It does
// not allocate and is stable across processes.
func HashString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return Mix64(h)
}

// HashAddr hashes an address. IPv4-mapped IPv6 addresses hash as their IPv4
// form; the zone is ignored.
func HashAddr(a netip.Addr) uint64 {
	a = a.Unmap()
	b := a.As16()
	hi := uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
		uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
	lo := uint64(b[8])<<56 | uint64(b[9])<<48 | uint64(b[10])<<40 | uint64(b[11])<<32 |
		uint64(b[12])<<24 | uint64(b[13])<<16 | uint64(b[14])<<8 | uint64(b[15])
	return Mix64(hi ^ Mix64(lo))
}
