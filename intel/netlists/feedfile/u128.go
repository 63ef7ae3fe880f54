package feedfile

import (
	"math/bits"
	"net/netip"
)

// U128 is an IPv6 address as a 128-bit unsigned integer (Hi holds the first
// eight bytes). Range tables compare and subtract these instead of netip.Addr
// so that a lookup is plain integer work.
type U128 struct{ Hi, Lo uint64 }

// FromAddr16 returns a's 16-byte form as a U128. For IPv4 that is the
// IPv4-mapped address; callers keep IPv4 in separate uint32 tables.
func FromAddr16(a netip.Addr) U128 {
	b := a.As16()
	return U128{
		Hi: uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
			uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7]),
		Lo: uint64(b[8])<<56 | uint64(b[9])<<48 | uint64(b[10])<<40 | uint64(b[11])<<32 |
			uint64(b[12])<<24 | uint64(b[13])<<16 | uint64(b[14])<<8 | uint64(b[15]),
	}
}

// Addr returns u as an IPv6 netip.Addr.
func (u U128) Addr() netip.Addr {
	var b [16]byte
	for i := 0; i < 8; i++ {
		b[i] = byte(u.Hi >> (56 - 8*i))
		b[8+i] = byte(u.Lo >> (56 - 8*i))
	}
	return netip.AddrFrom16(b)
}

// Less reports u < v.
func (u U128) Less(v U128) bool { return u.Hi < v.Hi || u.Hi == v.Hi && u.Lo < v.Lo }

// Cmp returns -1, 0 or +1.
func (u U128) Cmp(v U128) int {
	switch {
	case u.Hi < v.Hi:
		return -1
	case u.Hi > v.Hi:
		return 1
	case u.Lo < v.Lo:
		return -1
	case u.Lo > v.Lo:
		return 1
	}
	return 0
}

// Add returns u+v modulo 2^128.
func (u U128) Add(v U128) U128 {
	lo, c := bits.Add64(u.Lo, v.Lo, 0)
	hi, _ := bits.Add64(u.Hi, v.Hi, c)
	return U128{hi, lo}
}

// Sub returns u-v modulo 2^128.
func (u U128) Sub(v U128) U128 {
	lo, b := bits.Sub64(u.Lo, v.Lo, 0)
	hi, _ := bits.Sub64(u.Hi, v.Hi, b)
	return U128{hi, lo}
}

// IsMax reports whether u is the largest 128-bit value.
func (u U128) IsMax() bool { return u.Hi == ^uint64(0) && u.Lo == ^uint64(0) }

// ones returns k if u == 2^k-1 (k in 0..128), else -1.
func (u U128) ones() int {
	switch {
	case u.Hi == 0:
		if u.Lo&(u.Lo+1) != 0 {
			return -1
		}
		return bits.OnesCount64(u.Lo)
	case u.Lo == ^uint64(0):
		if u.Hi&(u.Hi+1) != 0 {
			return -1
		}
		return 64 + bits.OnesCount64(u.Hi)
	}
	return -1
}

// mask returns 2^k-1 for k in 0..128.
func mask(k int) U128 {
	switch {
	case k <= 0:
		return U128{}
	case k < 64:
		return U128{0, 1<<uint(k) - 1}
	case k == 64:
		return U128{0, ^uint64(0)}
	case k < 128:
		return U128{1<<uint(k-64) - 1, ^uint64(0)}
	}
	return U128{^uint64(0), ^uint64(0)}
}
