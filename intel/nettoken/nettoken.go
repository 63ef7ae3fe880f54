// Package nettoken mints and verifies the network token of the browser
// collector (COLLECTOR.md) and turns a verified token into the network layer
// of an evaluation.
//
// # Format (version 1)
//
//	token   = "nt1." base64url(payload || mac)          (no padding)
//	payload = 0x01                                       version
//	          uvarint  issued, Unix seconds
//	          byte     flags: bit0 infra, bit1 report, bits 2–4 WebRTC status
//	          byte     proxy headers seen (HeaderVia, …)
//	          addr     the observed HTTP address
//	          byte     n ≤ MaxCandidates, then n × addr: public WebRTC candidates
//	addr    = 0x00 (none) | 0x04 + 4 bytes | 0x06 + 16 bytes
//	mac     = HMAC-SHA256(key, "fraudd/nt1" || uvarint(len account) || account || payload)[:16]
//
// The account id is bound by the MAC, not carried: a token verified for
// another account fails exactly like a tampered one, so a client cannot tell
// the two apart (both are `400 Invalid token.`). A token is about 60 bytes of
// base64 for an IPv4 visitor. The key comes from the master secret
// (the master secret's key for secrets.LabelNetworkToken); rotating the secret invalidates
// every outstanding token.
//
// # Expiry is advice
//
// ExpiresIn is what the collect endpoint answers as `expires_in`: after it the
// page should collect again (single-page apps call FraudCollector.collect()).
// An older token still verifies and evaluates; its age is reported as
// `evidence.network_age_s` so the caller decides how stale is too stale
// (COLLECTOR.md: "an old one still evaluates").
//
// Verify is pure (an HMAC over at most a few hundred bytes, no I/O) and does
// not allocate.
package nettoken

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"hash"
	"net/netip"
	"sync"
	"time"
)

// Prefix starts every version-1 token.
const Prefix = "nt1."

// ExpiresIn is the advised lifetime of a token (the `expires_in` answer).
const ExpiresIn = 15 * time.Minute

// MaxCandidates is how many WebRTC candidate addresses a token carries.
const MaxCandidates = 4

// macLen is the truncated HMAC length: 128 bits.
const macLen = 16

// maxRaw bounds a decoded token: version, issued, flags, headers, address,
// count, candidates, MAC.
const maxRaw = 1 + binary.MaxVarintLen64 + 1 + 1 + 17 + 1 + MaxCandidates*17 + macLen

// MaxLen is the longest token string Verify accepts.
const MaxLen = len(Prefix) + (maxRaw*8+5)/6

// maxAccount bounds the account id fed to the MAC (ids are short; this only
// sizes the scratch buffer).
const maxAccount = 256

// WebRTC is what the browser's WebRTC step reported.
type WebRTC uint8

const (
	WebRTCNotRun      WebRTC = iota // no report, or the step was not attempted
	WebRTCOK                        // ICE gathering finished (candidates may still be none)
	WebRTCUnsupported               // RTCPeerConnection missing: disabled or blocked by an extension
	WebRTCError                     // it threw or was refused
	WebRTCTimeout                   // gathering did not finish in time
)

// Proxy headers the collect endpoint saw on the browser's request. They are
// recorded only from an untrusted peer (or, for XFFChain, beyond the client
// address a trusted proxy reported), so the service's own proxies never count.
const (
	HeaderVia       uint8 = 1 << iota // Via
	HeaderForwarded                   // Forwarded (RFC 7239)
	HeaderXFF                         // X-Forwarded-For from an untrusted peer, or hops beyond the client
	HeaderOther                       // X-Proxy-ID, Proxy-Connection, X-BlueCoat-Via, Client-IP, X-Real-IP
)

// Facts is what a token states.
type Facts struct {
	Issued time.Time  // when the network reading was taken (whole seconds)
	Addr   netip.Addr // the observed HTTP address; invalid when none could be read
	// Infra: the observed address is the service's own infrastructure (the
	// peer was a trusted proxy that named no client).
	Infra bool
	// Report: the browser's report (the collector's JSON body) arrived.
	Report  bool
	WebRTC  WebRTC
	Headers uint8 // Header* bits
	// Candidates are the public addresses among the browser's WebRTC
	// candidates, at most MaxCandidates, deduplicated.
	Candidates [MaxCandidates]netip.Addr
	NCand      uint8
}

// AddCandidate records a WebRTC candidate address; non-public addresses,
// duplicates and any past MaxCandidates are ignored. It reports whether a was kept.
func (f *Facts) AddCandidate(a netip.Addr, public func(netip.Addr) bool) bool {
	a = a.Unmap()
	if !a.IsValid() || !public(a) || int(f.NCand) >= MaxCandidates {
		return false
	}
	for _, c := range f.Candidates[:f.NCand] {
		if c == a {
			return false
		}
	}
	f.Candidates[f.NCand] = a
	f.NCand++
	return true
}

// Codec mints and verifies tokens under one key. Safe for concurrent use.
type Codec struct {
	macs sync.Pool // *macState
}

type macState struct {
	h       hash.Hash
	scratch [maxAccount + binary.MaxVarintLen64 + 16]byte
	sum     [sha256.Size]byte
	raw     [maxRaw]byte // Verify decodes here: a stack buffer would escape through hash.Hash.Write
}

// New returns a Codec keyed with key (32 bytes from the master secret).
func New(key []byte) *Codec {
	k := append([]byte(nil), key...)
	c := &Codec{}
	c.macs.New = func() any { return &macState{h: hmac.New(sha256.New, k)} }
	return c
}

// mac computes the truncated MAC of payload for account into st.sum.
func (c *Codec) mac(st *macState, account string, payload []byte) []byte {
	st.h.Reset()
	b := append(st.scratch[:0], "fraudd/nt1"...)
	if len(account) > maxAccount {
		account = account[:maxAccount]
	}
	b = binary.AppendUvarint(b, uint64(len(account)))
	b = append(b, account...)
	st.h.Write(b)
	st.h.Write(payload)
	return st.h.Sum(st.sum[:0])[:macLen]
}

// Sign mints a token stating f for account.
func (c *Codec) Sign(account string, f *Facts) string {
	var raw [maxRaw]byte
	p := raw[:0]
	p = append(p, 1)
	p = binary.AppendUvarint(p, uint64(max(f.Issued.Unix(), 0)))
	flags := byte(f.WebRTC&7) << 2
	if f.Infra {
		flags |= 1
	}
	if f.Report {
		flags |= 2
	}
	p = append(p, flags, f.Headers)
	p = appendAddr(p, f.Addr)
	n := min(int(f.NCand), MaxCandidates)
	p = append(p, byte(n))
	for _, a := range f.Candidates[:n] {
		p = appendAddr(p, a)
	}
	st := c.macs.Get().(*macState)
	p = append(p, c.mac(st, account, p)...)
	c.macs.Put(st)
	out := make([]byte, len(Prefix)+encodedLen(len(p)))
	copy(out, Prefix)
	encode(out[len(Prefix):], p)
	return string(out)
}

// Verify checks token for account and returns what it states. ok is false for
// anything malformed, tampered with, or minted for another account.
func (c *Codec) Verify(account, token string) (f Facts, ok bool) {
	if len(token) <= len(Prefix) || len(token) > MaxLen || token[:len(Prefix)] != Prefix {
		return f, false
	}
	st := c.macs.Get().(*macState)
	defer c.macs.Put(st)
	n, good := decode(st.raw[:], token[len(Prefix):])
	if !good || n < 1+1+1+1+1+1+macLen {
		return f, false
	}
	payload, tag := st.raw[:n-macLen], st.raw[n-macLen:n]
	if subtle.ConstantTimeCompare(c.mac(st, account, payload), tag) != 1 {
		return f, false
	}
	return parse(payload)
}

func parse(p []byte) (f Facts, ok bool) {
	if len(p) < 1 || p[0] != 1 {
		return f, false
	}
	p = p[1:]
	secs, k := binary.Uvarint(p)
	if k <= 0 || secs > 1<<40 {
		return f, false
	}
	p = p[k:]
	f.Issued = time.Unix(int64(secs), 0).UTC()
	if len(p) < 2 {
		return f, false
	}
	flags := p[0]
	f.Infra, f.Report, f.WebRTC = flags&1 != 0, flags&2 != 0, WebRTC(flags>>2&7)
	f.Headers = p[1]
	p = p[2:]
	if f.Addr, p, ok = readAddr(p); !ok {
		return f, false
	}
	if len(p) < 1 || p[0] > MaxCandidates {
		return f, false
	}
	f.NCand = p[0]
	p = p[1:]
	for i := range int(f.NCand) {
		if f.Candidates[i], p, ok = readAddr(p); !ok {
			return f, false
		}
	}
	return f, len(p) == 0
}

func appendAddr(p []byte, a netip.Addr) []byte {
	a = a.Unmap()
	switch {
	case a.Is4():
		b := a.As4()
		return append(append(p, 4), b[:]...)
	case a.Is6():
		b := a.As16()
		return append(append(p, 6), b[:]...)
	}
	return append(p, 0)
}

func readAddr(p []byte) (netip.Addr, []byte, bool) {
	if len(p) < 1 {
		return netip.Addr{}, p, false
	}
	switch p[0] {
	case 0:
		return netip.Addr{}, p[1:], true
	case 4:
		if len(p) < 5 {
			return netip.Addr{}, p, false
		}
		return netip.AddrFrom4([4]byte(p[1:5])), p[5:], true
	case 6:
		if len(p) < 17 {
			return netip.Addr{}, p, false
		}
		return netip.AddrFrom16([16]byte(p[1:17])), p[17:], true
	}
	return netip.Addr{}, p, false
}

// base64url without padding, written out so decoding a string needs no copy.
const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

var decodeMap = func() (m [256]byte) {
	for i := range m {
		m[i] = 0xff
	}
	for i := 0; i < len(alphabet); i++ {
		m[alphabet[i]] = byte(i)
	}
	return m
}()

func encodedLen(n int) int { return (n*8 + 5) / 6 }

func encode(dst, src []byte) {
	di := 0
	var acc uint32
	bits := 0
	for _, b := range src {
		acc = acc<<8 | uint32(b)
		bits += 8
		for bits >= 6 {
			bits -= 6
			dst[di] = alphabet[acc>>uint(bits)&63]
			di++
		}
	}
	if bits > 0 {
		dst[di] = alphabet[acc<<uint(6-bits)&63]
	}
}

// decode decodes s into dst, rejecting non-canonical trailing bits so every
// token has exactly one spelling.
func decode(dst []byte, s string) (int, bool) {
	if len(s)%4 == 1 {
		return 0, false
	}
	n := 0
	var acc uint32
	bits := 0
	for i := 0; i < len(s); i++ {
		v := decodeMap[s[i]]
		if v == 0xff {
			return 0, false
		}
		acc = acc<<6 | uint32(v)
		bits += 6
		if bits >= 8 {
			bits -= 8
			if n == len(dst) {
				return 0, false
			}
			dst[n] = byte(acc >> uint(bits))
			n++
		}
	}
	if bits > 0 && acc&(1<<uint(bits)-1) != 0 {
		return 0, false
	}
	return n, true
}
