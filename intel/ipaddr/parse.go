// Package ipaddr reads IP addresses the way people paste them and answers
// whether an address is publicly routable.
//
// Everything here works on net/netip values. The parsers never panic on
// input; IsPublic and Prefix64 do not allocate.
package ipaddr

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"unicode/utf8"
)

// maxLooseLen bounds the pasted text we are willing to look at. A pasted URL
// can carry a long path, but the address is always near the start; anything
// longer than this is not a paste of one address.
const maxLooseLen = 2048

// Errors returned by the parsers. Callers map them to the public
// "Invalid IP format." answer; the wrapped detail is for logs and tests.
var (
	ErrEmpty   = errors.New("ipaddr: empty input")
	ErrInvalid = errors.New("ipaddr: not an IP address")
	ErrZone    = errors.New("ipaddr: zoned addresses are not accepted")
)

// ParseStrict parses exactly one textual address, as found in the path of
// GET /v1/lookup/{ip}: no surrounding space, brackets, port or URL. Zones are
// rejected. mapped reports an IPv4-mapped IPv6 address (::ffff:a.b.c.d); the
// address is then returned as written, still mapped, so that IsPublic says
// false and the caller answers "Private or reserved" as SPEC 4.2 requires.
func ParseStrict(s string) (addr netip.Addr, mapped bool, err error) {
	if s == "" {
		return netip.Addr{}, false, ErrEmpty
	}
	if strings.IndexByte(s, '%') >= 0 {
		return netip.Addr{}, false, ErrZone
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, false, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return a, a.Is4In6(), nil
}

// ParseLoose reads the pasted forms of SPEC 4.7 and returns the address they
// name:
//
//	1.2.3.4                     1.2.3.4:80
//	2606:4700::1111             [2606:4700::1111]:443
//	https://1.2.3.4:8080/path   http://[2606:4700::1111]/
//	fullwidth digits, dots and colons (１．２．３．４, １。２。３。４, ［…］：４４３)
//	::ffff:1.2.3.4              (read as the IPv4 address 1.2.3.4)
//
// with surrounding white space (including U+3000) ignored. Zones
// (fe80::1%eth0) are rejected. The result is never IPv4-mapped: the caller
// checks one canonical spelling per address, so two spellings of one address
// deduplicate.
func ParseLoose(s string) (netip.Addr, error) {
	if len(s) > maxLooseLen {
		return netip.Addr{}, fmt.Errorf("%w: input longer than %d bytes", ErrInvalid, maxLooseLen)
	}
	if !isASCII(s) {
		var ok bool
		if s, ok = foldWide(s); !ok {
			return netip.Addr{}, fmt.Errorf("%w: unexpected character", ErrInvalid)
		}
	}
	s = strings.TrimSpace(s)
	if s == "" {
		return netip.Addr{}, ErrEmpty
	}
	host, err := hostOf(s)
	if err != nil {
		return netip.Addr{}, err
	}
	if strings.IndexByte(host, '%') >= 0 {
		return netip.Addr{}, ErrZone
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return a.Unmap(), nil
}

// hostOf strips a URL scheme, user info, path, brackets and port from s and
// returns the part that should be an address.
func hostOf(s string) (string, error) {
	if i := strings.Index(s, "://"); i >= 0 {
		if !isScheme(s[:i]) {
			return "", fmt.Errorf("%w: malformed URL scheme", ErrInvalid)
		}
		rest := s[i+3:]
		if j := strings.IndexAny(rest, "/?#"); j >= 0 {
			rest = rest[:j]
		}
		if j := strings.LastIndexByte(rest, '@'); j >= 0 {
			rest = rest[j+1:]
		}
		if rest == "" {
			return "", fmt.Errorf("%w: URL without host", ErrInvalid)
		}
		s = rest
	}
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", fmt.Errorf("%w: missing ']'", ErrInvalid)
		}
		host, tail := s[1:end], s[end+1:]
		if tail != "" {
			if tail[0] != ':' || !isPort(tail[1:]) {
				return "", fmt.Errorf("%w: bad port after ']'", ErrInvalid)
			}
		}
		// Brackets exist for IPv6; "[1.2.3.4]" is not a form anyone uses.
		if strings.IndexByte(host, ':') < 0 {
			return "", fmt.Errorf("%w: brackets around a non-IPv6 address", ErrInvalid)
		}
		return host, nil
	}
	// One colon can only be IPv4 with a port; two or more is bare IPv6,
	// which cannot carry a port without brackets.
	if i := strings.IndexByte(s, ':'); i >= 0 && strings.IndexByte(s[i+1:], ':') < 0 {
		if !isPort(s[i+1:]) {
			return "", fmt.Errorf("%w: bad port", ErrInvalid)
		}
		return s[:i], nil
	}
	return s, nil
}

// isScheme reports whether s is an RFC 3986 scheme name.
func isScheme(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return true
}

// isPort reports whether s is a decimal TCP/UDP port (0-65535).
func isPort(s string) bool {
	if s == "" || len(s) > 5 {
		return false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + int(c-'0')
	}
	return n <= 65535
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// foldWide maps the fullwidth and ideographic characters people paste from
// East Asian input methods to their ASCII counterparts. Any other non-ASCII
// rune makes the input invalid (ok false), so nothing exotic reaches the
// address parser.
func foldWide(s string) (string, bool) {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		switch {
		case r < utf8.RuneSelf:
			b.WriteByte(byte(r))
		case r >= 0xFF10 && r <= 0xFF19: // ０-９
			b.WriteByte(byte('0' + r - 0xFF10))
		case r >= 0xFF21 && r <= 0xFF26: // Ａ-Ｆ
			b.WriteByte(byte('A' + r - 0xFF21))
		case r >= 0xFF41 && r <= 0xFF46: // ａ-ｆ
			b.WriteByte(byte('a' + r - 0xFF41))
		case r == 0xFF0E || r == 0x3002 || r == 0xFF61: // ． 。 ｡
			b.WriteByte('.')
		case r == 0xFF1A: // ：
			b.WriteByte(':')
		case r == 0xFF3B: // ［
			b.WriteByte('[')
		case r == 0xFF3D: // ］
			b.WriteByte(']')
		case r == 0xFF0F: // ／
			b.WriteByte('/')
		case r == 0x3000 || r == 0x00A0 || r == 0xFEFF || r == 0x200B: // ideographic, no-break, BOM, zero-width spaces
			b.WriteByte(' ')
		default:
			return "", false
		}
	}
	return b.String(), true
}
