// Package feedfile is the on-disk form of one intelligence feed: a small
// binary header (name, kind, snapshot date, entry count, inputs) followed by a
// zstd-compressed body of delta-encoded columns, and a CRC-32C trailer.
//
// Layout (all integers are unsigned LEB128 varints unless noted):
//
//	magic    "FRDFEED" + version byte (1)
//	header   name, kind(byte), date, entries, #inputs, {name, date, entries}…
//	body     codec(byte: 0 stored, 1 zstd), raw length, stored length, bytes
//	trailer  CRC-32C (Castagnoli) of everything before it, 4 bytes little endian
//
// Strings are a varint length and the bytes. The body depends on the kind:
//
//	Ranges   labels; IPv4 table; IPv6 table. A table is n, then n gaps
//	         (start minus previous end+1), n sizes (end-start, written as k+1
//	         when it is 2^k-1, else 0 and the literal), n values.
//	ASNs     dictionary of strings; n; n ASN deltas; n name, kind and country
//	         dictionary indexes.
//	Domains  n; per name the length of the prefix shared with the previous
//	         name and the rest (names sorted).
//	Zones    n; per zone its name and countries (own first, space-separated).
//	Shares   n; n ASN deltas; n IPv4 shares; n IPv6 shares.
//
// Encoding is deterministic: the same feed always gives the same bytes, so a
// rebuild from unchanged data leaves git with nothing to commit.
package feedfile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Version is the format version written after the magic. Readers refuse
// other versions rather than guess.
const Version = 1

// Ext is the file name extension of a feed file.
const Ext = ".fdf"

const magic = "FRDFEED"

// Body codecs.
const (
	codecStored byte = 0
	codecZstd   byte = 1
)

// maxBody bounds the decompressed body so a corrupt or hostile length cannot
// make a reader allocate without limit.
const maxBody = 256 << 20

// Kind says which body a file carries.
type Kind uint8

// Body kinds.
const (
	KindRanges  Kind = 1 // address ranges with a label or value each
	KindASNs    Kind = 2 // AS numbers with a name, kind and country each
	KindDomains Kind = 3 // a set of domain names
	KindZones   Kind = 4 // IANA time zone names with a country each
	KindShares  Kind = 5 // AS numbers with a share of their IPv4 and IPv6 space each
)

func (k Kind) String() string {
	switch k {
	case KindRanges:
		return "ranges"
	case KindASNs:
		return "asns"
	case KindDomains:
		return "domains"
	case KindZones:
		return "zones"
	case KindShares:
		return "shares"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Input describes one source a feed was built from.
type Input struct {
	Name    string // file name or URL
	Date    string // snapshot date, YYYY-MM-DD, "" when unknown
	Entries int    // entries read from it
}

// Header is what a file says about itself, readable without the body.
type Header struct {
	Name    string // feed name, e.g. "tor"
	Kind    Kind
	Date    string // snapshot date of the feed (its newest input), YYYY-MM-DD
	Entries int    // distinct entries in the feed as the sources count them
	Inputs  []Input
}

// Table4 holds sorted, disjoint, inclusive IPv4 ranges as parallel columns.
type Table4 struct {
	Start, End, Val []uint32
}

// Table6 holds sorted, disjoint, inclusive IPv6 ranges as parallel columns.
type Table6 struct {
	Start, End []U128
	Val        []uint32
}

// Ranges is the body of a KindRanges file. Val is an index into Labels when
// Labels is non-empty and a raw value (an AS number, say) otherwise.
type Ranges struct {
	Labels []string
	V4     Table4
	V6     Table6
}

// ASN is one row of a KindASNs file.
type ASN struct {
	ASN     uint32
	Name    string // organisation or provider label
	Kind    string // e.g. "cloud", "hosting", "mobile"; may be ""
	Country string // ISO 3166-1 alpha-2 or ""
}

// Share is one row of a KindShares file: the part of an AS's announced IPv4
// and IPv6 space that has some property, in basis points (0 to 10000), or
// NoShare when the AS announces no space of that family.
type Share struct {
	ASN    uint32
	V4, V6 uint16
}

// NoShare marks a family an AS announces no space in.
const NoShare = 0xffff

// MaxShare is a whole AS's space, in basis points.
const MaxShare = 10000

// Zone is one row of a KindZones file.
type Zone struct {
	Name string
	// Country is the zone's own ISO country, then every other country tzdata
	// says uses the zone (zone1970.tab), sorted, space-separated: "CH DE LI"
	// for Europe/Zurich, "IN" for Asia/Calcutta.
	Country string
}

// File is a whole feed file. Exactly the body field matching Kind is used.
type File struct {
	Header
	Ranges  Ranges
	ASNs    []ASN    // sorted by ASN, unique
	Domains []string // sorted, unique
	Zones   []Zone   // sorted by name, unique
	Shares  []Share  // sorted by ASN, unique
}

var (
	encOnce sync.Once
	enc     *zstd.Encoder
	decOnce sync.Once
	dec     *zstd.Decoder
)

func encoder() *zstd.Encoder {
	encOnce.Do(func() {
		// Single-threaded best compression: deterministic output, and the
		// files are built rarely but stored in git forever.
		enc, _ = zstd.NewWriter(nil,
			zstd.WithEncoderLevel(zstd.SpeedBestCompression),
			zstd.WithEncoderConcurrency(1),
			zstd.WithEncoderCRC(false),
			zstd.WithSingleSegment(true))
	})
	return enc
}

func decoder() *zstd.Decoder {
	decOnce.Do(func() {
		dec, _ = zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(0),
			zstd.WithDecoderMaxMemory(maxBody))
	})
	return dec
}

// Marshal appends the encoded file to dst. It checks the body's invariants
// (sorted, disjoint, values in range) and refuses to write a file a reader
// would reject.
func Marshal(dst []byte, f *File) ([]byte, error) {
	if err := f.validate(); err != nil {
		return dst, fmt.Errorf("feedfile: %s: %w", f.Name, err)
	}
	start := len(dst)
	dst = append(dst, magic...)
	dst = append(dst, Version)
	dst = appendString(dst, f.Name)
	dst = append(dst, byte(f.Kind))
	dst = appendString(dst, f.Date)
	dst = binary.AppendUvarint(dst, uint64(f.Entries))
	dst = binary.AppendUvarint(dst, uint64(len(f.Inputs)))
	for _, in := range f.Inputs {
		dst = appendString(dst, in.Name)
		dst = appendString(dst, in.Date)
		dst = binary.AppendUvarint(dst, uint64(in.Entries))
	}
	var body []byte
	switch f.Kind {
	case KindRanges:
		body = appendRanges(nil, &f.Ranges)
	case KindASNs:
		body = appendASNs(nil, f.ASNs)
	case KindDomains:
		body = appendDomains(nil, f.Domains)
	case KindZones:
		body = appendZones(nil, f.Zones)
	case KindShares:
		body = appendShares(nil, f.Shares)
	}
	// Tiny bodies grow under zstd; those are stored as they are.
	codec, stored := codecStored, body
	if comp := encoder().EncodeAll(body, nil); len(comp) < len(body) {
		codec, stored = codecZstd, comp
	}
	dst = append(dst, codec)
	dst = binary.AppendUvarint(dst, uint64(len(body)))
	dst = binary.AppendUvarint(dst, uint64(len(stored)))
	dst = append(dst, stored...)
	sum := crc32.Checksum(dst[start:], crcTable)
	return binary.LittleEndian.AppendUint32(dst, sum), nil
}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ReadHeader decodes only the header of an encoded file (no decompression),
// for status listings. It still verifies the checksum.
func ReadHeader(b []byte) (Header, error) {
	h, _, err := readHeader(b)
	return h, err
}

func readHeader(b []byte) (Header, *reader, error) {
	var h Header
	if len(b) < len(magic)+1+4 || string(b[:len(magic)]) != magic {
		return h, nil, errors.New("feedfile: not a feed file")
	}
	if v := b[len(magic)]; v != Version {
		return h, nil, fmt.Errorf("feedfile: format version %d, this build reads %d", v, Version)
	}
	payload := b[:len(b)-4]
	if got, want := crc32.Checksum(payload, crcTable), binary.LittleEndian.Uint32(b[len(b)-4:]); got != want {
		return h, nil, errors.New("feedfile: checksum mismatch (truncated or corrupt file)")
	}
	r := &reader{b: payload[len(magic)+1:]}
	h.Name = r.str()
	h.Kind = Kind(r.byte())
	h.Date = r.str()
	h.Entries = r.number()
	n := r.count()
	if n > 0 && r.err == nil {
		h.Inputs = make([]Input, 0, min(n, 64))
		for i := 0; i < n && r.err == nil; i++ {
			h.Inputs = append(h.Inputs, Input{Name: r.str(), Date: r.str(), Entries: r.number()})
		}
	}
	if r.err != nil {
		return Header{}, nil, fmt.Errorf("feedfile: header: %w", r.err)
	}
	return h, r, nil
}

// Unmarshal decodes a whole file.
func Unmarshal(b []byte) (*File, error) {
	h, r, err := readHeader(b)
	if err != nil {
		return nil, err
	}
	codec, rawLen, storedLen := r.byte(), r.uvarint(), r.uvarint()
	if r.err != nil || rawLen > maxBody || storedLen != uint64(len(r.b)) {
		return nil, fmt.Errorf("feedfile: %s: bad body lengths", h.Name)
	}
	var body []byte
	switch codec {
	case codecStored:
		body = r.b
	case codecZstd:
		// The length is a hint for the buffer, not trusted beyond a sane
		// ratio: a damaged header must not allocate a gigabyte up front.
		var err error
		body, err = decoder().DecodeAll(r.b, make([]byte, 0, min(rawLen, 64*storedLen+1024)))
		if err != nil {
			return nil, fmt.Errorf("feedfile: %s: decompress: %w", h.Name, err)
		}
	default:
		return nil, fmt.Errorf("feedfile: %s: unknown codec %d", h.Name, codec)
	}
	if uint64(len(body)) != rawLen {
		return nil, fmt.Errorf("feedfile: %s: body is %d bytes, header says %d", h.Name, len(body), rawLen)
	}
	f := &File{Header: h}
	br := &reader{b: body}
	switch h.Kind {
	case KindRanges:
		f.Ranges = br.ranges()
	case KindASNs:
		f.ASNs = br.asns()
	case KindDomains:
		f.Domains = br.domains()
	case KindZones:
		f.Zones = br.zones()
	case KindShares:
		f.Shares = br.shares()
	default:
		return nil, fmt.Errorf("feedfile: %s: unknown kind %d", h.Name, h.Kind)
	}
	if br.err == nil && len(br.b) != 0 {
		br.err = fmt.Errorf("%d trailing bytes", len(br.b))
	}
	if br.err != nil {
		return nil, fmt.Errorf("feedfile: %s: body: %w", h.Name, br.err)
	}
	if err := f.validate(); err != nil {
		return nil, fmt.Errorf("feedfile: %s: %w", h.Name, err)
	}
	return f, nil
}

func (f *File) validate() error {
	if f.Name == "" {
		return errors.New("empty feed name")
	}
	switch f.Kind {
	case KindRanges:
		r := &f.Ranges
		t4, t6 := &r.V4, &r.V6
		if len(t4.End) != len(t4.Start) || len(t4.Val) != len(t4.Start) ||
			len(t6.End) != len(t6.Start) || len(t6.Val) != len(t6.Start) {
			return errors.New("range columns differ in length")
		}
		for i := range t4.Start {
			if t4.End[i] < t4.Start[i] || i > 0 && t4.Start[i] <= t4.End[i-1] {
				return fmt.Errorf("IPv4 range %d not sorted and disjoint", i)
			}
			if len(r.Labels) > 0 && int(t4.Val[i]) >= len(r.Labels) {
				return fmt.Errorf("IPv4 range %d: label %d out of range", i, t4.Val[i])
			}
		}
		for i := range t6.Start {
			if t6.End[i].Less(t6.Start[i]) || i > 0 && !t6.End[i-1].Less(t6.Start[i]) {
				return fmt.Errorf("IPv6 range %d not sorted and disjoint", i)
			}
			if len(r.Labels) > 0 && int(t6.Val[i]) >= len(r.Labels) {
				return fmt.Errorf("IPv6 range %d: label %d out of range", i, t6.Val[i])
			}
		}
	case KindASNs:
		for i := 1; i < len(f.ASNs); i++ {
			if f.ASNs[i].ASN <= f.ASNs[i-1].ASN {
				return fmt.Errorf("ASN %d not sorted and unique", f.ASNs[i].ASN)
			}
		}
	case KindDomains:
		for i := 1; i < len(f.Domains); i++ {
			if f.Domains[i] <= f.Domains[i-1] {
				return fmt.Errorf("domain %q not sorted and unique", f.Domains[i])
			}
		}
	case KindZones:
		for i := 1; i < len(f.Zones); i++ {
			if f.Zones[i].Name <= f.Zones[i-1].Name {
				return fmt.Errorf("zone %q not sorted and unique", f.Zones[i].Name)
			}
		}
	case KindShares:
		for i, r := range f.Shares {
			if i > 0 && r.ASN <= f.Shares[i-1].ASN {
				return fmt.Errorf("ASN %d not sorted and unique", r.ASN)
			}
			if !validShare(r.V4) || !validShare(r.V6) {
				return fmt.Errorf("ASN %d: share out of range", r.ASN)
			}
		}
	default:
		return fmt.Errorf("unknown kind %d", f.Kind)
	}
	return nil
}

func validShare(v uint16) bool { return v <= MaxShare || v == NoShare }

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// appendSize writes a range size (end-start): as k+1 when it is 2^k-1, which
// is every CIDR block, else as 0 and the literal.
func appendSize(dst []byte, size U128) []byte {
	if k := size.ones(); k >= 0 {
		return binary.AppendUvarint(dst, uint64(k)+1)
	}
	dst = append(dst, 0)
	return appendU128(dst, size)
}

// appendU128 writes u as a LEB128 varint of up to 19 bytes.
func appendU128(dst []byte, u U128) []byte {
	for u.Hi != 0 || u.Lo >= 0x80 {
		dst = append(dst, byte(u.Lo)|0x80)
		u.Lo = u.Lo>>7 | u.Hi<<57
		u.Hi >>= 7
	}
	return append(dst, byte(u.Lo))
}

func appendRanges(dst []byte, r *Ranges) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(r.Labels)))
	for _, l := range r.Labels {
		dst = appendString(dst, l)
	}
	t4 := &r.V4
	dst = binary.AppendUvarint(dst, uint64(len(t4.Start)))
	next := uint64(0) // first address after the previous range
	for i := range t4.Start {
		dst = binary.AppendUvarint(dst, uint64(t4.Start[i])-next)
		next = uint64(t4.End[i]) + 1
	}
	for i := range t4.Start {
		dst = appendSize(dst, U128{Lo: uint64(t4.End[i] - t4.Start[i])})
	}
	for _, v := range t4.Val {
		dst = binary.AppendUvarint(dst, uint64(v))
	}
	t6 := &r.V6
	dst = binary.AppendUvarint(dst, uint64(len(t6.Start)))
	var next6 U128
	for i := range t6.Start {
		dst = appendU128(dst, t6.Start[i].Sub(next6))
		next6 = t6.End[i].Add(U128{Lo: 1})
	}
	for i := range t6.Start {
		dst = appendSize(dst, t6.End[i].Sub(t6.Start[i]))
	}
	for _, v := range t6.Val {
		dst = binary.AppendUvarint(dst, uint64(v))
	}
	return dst
}

// dict numbers distinct strings in order of first use.
type dict struct {
	idx  map[string]uint64
	list []string
}

func (d *dict) id(s string) uint64 {
	if i, ok := d.idx[s]; ok {
		return i
	}
	i := uint64(len(d.list))
	d.idx[s] = i
	d.list = append(d.list, s)
	return i
}

func appendASNs(dst []byte, rows []ASN) []byte {
	d := dict{idx: map[string]uint64{}}
	for _, r := range rows {
		d.id(r.Name)
		d.id(r.Kind)
		d.id(r.Country)
	}
	dst = binary.AppendUvarint(dst, uint64(len(d.list)))
	for _, s := range d.list {
		dst = appendString(dst, s)
	}
	dst = binary.AppendUvarint(dst, uint64(len(rows)))
	prev := uint32(0)
	for _, r := range rows {
		dst = binary.AppendUvarint(dst, uint64(r.ASN-prev))
		prev = r.ASN
	}
	for _, r := range rows {
		dst = binary.AppendUvarint(dst, d.id(r.Name))
	}
	for _, r := range rows {
		dst = binary.AppendUvarint(dst, d.id(r.Kind))
	}
	for _, r := range rows {
		dst = binary.AppendUvarint(dst, d.id(r.Country))
	}
	return dst
}

func appendShares(dst []byte, rows []Share) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(rows)))
	prev := uint32(0)
	for _, r := range rows {
		dst = binary.AppendUvarint(dst, uint64(r.ASN-prev))
		prev = r.ASN
	}
	for _, r := range rows {
		dst = binary.AppendUvarint(dst, uint64(r.V4))
	}
	for _, r := range rows {
		dst = binary.AppendUvarint(dst, uint64(r.V6))
	}
	return dst
}

func appendDomains(dst []byte, names []string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(names)))
	prev := ""
	for _, n := range names {
		k := 0
		for k < len(n) && k < len(prev) && n[k] == prev[k] {
			k++
		}
		dst = binary.AppendUvarint(dst, uint64(k))
		dst = appendString(dst, n[k:])
		prev = n
	}
	return dst
}

func appendZones(dst []byte, zones []Zone) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(zones)))
	for _, z := range zones {
		dst = appendString(dst, z.Name)
		dst = appendString(dst, z.Country)
	}
	return dst
}

// reader decodes varints and strings, remembering the first error so that
// callers can decode a whole structure and check once.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("truncated or malformed %s", what)
	}
	r.b = nil
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// count reads a length and checks it against the bytes left, so that a
// corrupt count cannot trigger a huge allocation: every counted item takes at
// least one byte.
func (r *reader) count() int {
	v := r.uvarint()
	if v > uint64(len(r.b)) {
		r.fail("count")
		return 0
	}
	return int(v)
}

// number reads a statistic (an entry count), bounded to fit an int anywhere.
func (r *reader) number() int {
	v := r.uvarint()
	if v > 1<<31-1 {
		r.fail("number")
		return 0
	}
	return int(v)
}

func (r *reader) byte() byte {
	if len(r.b) == 0 {
		r.fail("byte")
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) str() string {
	n := r.count()
	if r.err != nil {
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func (r *reader) u128() U128 {
	var u U128
	for shift := uint(0); ; shift += 7 {
		if len(r.b) == 0 || shift > 126 {
			r.fail("u128 varint")
			return U128{}
		}
		c := r.b[0]
		r.b = r.b[1:]
		v := uint64(c & 0x7f)
		if shift < 64 {
			u.Lo |= v << shift
			if shift > 57 {
				u.Hi |= v >> (64 - shift)
			}
		} else {
			u.Hi |= v << (shift - 64)
		}
		if c < 0x80 {
			return u
		}
	}
}

func (r *reader) size() U128 {
	k := r.uvarint()
	switch {
	case r.err != nil:
		return U128{}
	case k == 0:
		return r.u128()
	case k > 129:
		r.fail("range size")
		return U128{}
	}
	return mask(int(k - 1))
}

func (r *reader) ranges() Ranges {
	var out Ranges
	if n := r.count(); n > 0 {
		out.Labels = make([]string, n)
		for i := range out.Labels {
			out.Labels[i] = r.str()
		}
	}
	n := r.count()
	t4 := Table4{Start: make([]uint32, n), End: make([]uint32, n), Val: make([]uint32, n)}
	for i := 0; i < n; i++ {
		t4.Start[i] = r.u32() // gap for now
	}
	for i := 0; i < n; i++ {
		sz := r.size()
		if sz.Hi != 0 || sz.Lo > 0xffffffff {
			r.fail("IPv4 range size")
			return out
		}
		t4.End[i] = uint32(sz.Lo) // size for now
	}
	next := uint64(0) // first address after the previous range
	for i := 0; i < n; i++ {
		s := next + uint64(t4.Start[i])
		e := s + uint64(t4.End[i])
		if e > 0xffffffff {
			r.fail("IPv4 range")
			return out
		}
		t4.Start[i], t4.End[i] = uint32(s), uint32(e)
		next = e + 1
	}
	for i := 0; i < n; i++ {
		t4.Val[i] = r.u32()
	}
	out.V4 = t4

	n = r.count()
	t6 := Table6{Start: make([]U128, n), End: make([]U128, n), Val: make([]uint32, n)}
	for i := 0; i < n; i++ {
		t6.Start[i] = r.u128() // gap for now
	}
	for i := 0; i < n; i++ {
		t6.End[i] = r.size() // size for now
	}
	var next6 U128
	for i := 0; i < n; i++ {
		s := next6.Add(t6.Start[i])
		e := s.Add(t6.End[i])
		if s.Less(next6) || e.Less(s) || (i > 0 && next6.Hi == 0 && next6.Lo == 0) {
			r.fail("IPv6 range")
			return out
		}
		t6.Start[i], t6.End[i] = s, e
		next6 = e.Add(U128{Lo: 1})
	}
	for i := 0; i < n; i++ {
		t6.Val[i] = r.u32()
	}
	out.V6 = t6
	return out
}

func (r *reader) u32() uint32 {
	v := r.uvarint()
	if v > 0xffffffff {
		r.fail("value")
		return 0
	}
	return uint32(v)
}

func (r *reader) asns() []ASN {
	nd := r.count()
	d := make([]string, nd)
	for i := range d {
		d[i] = r.str()
	}
	n := r.count()
	rows := make([]ASN, n)
	prev := uint64(0)
	for i := range rows {
		prev += r.uvarint()
		if prev > 0xffffffff {
			r.fail("ASN")
			return nil
		}
		rows[i].ASN = uint32(prev)
	}
	get := func() string {
		i := r.uvarint()
		if i >= uint64(len(d)) {
			r.fail("dictionary index")
			return ""
		}
		return d[i]
	}
	for i := range rows {
		rows[i].Name = get()
	}
	for i := range rows {
		rows[i].Kind = get()
	}
	for i := range rows {
		rows[i].Country = get()
	}
	if r.err != nil {
		return nil
	}
	return rows
}

func (r *reader) shares() []Share {
	n := r.count()
	rows := make([]Share, n)
	prev := uint64(0)
	for i := range rows {
		prev += r.uvarint()
		if prev > 0xffffffff {
			r.fail("ASN")
			return nil
		}
		rows[i].ASN = uint32(prev)
	}
	for i := range rows {
		rows[i].V4 = r.u16()
	}
	for i := range rows {
		rows[i].V6 = r.u16()
	}
	if r.err != nil {
		return nil
	}
	return rows
}

func (r *reader) u16() uint16 {
	v := r.uvarint()
	if v > 0xffff {
		r.fail("share")
		return 0
	}
	return uint16(v)
}

func (r *reader) domains() []string {
	n := r.count()
	out := make([]string, 0, n)
	// Build all names in one buffer and slice strings out of it: one
	// allocation instead of one per name.
	var buf strings.Builder
	ends := make([]int, 0, n)
	prev := ""
	for i := 0; i < n && r.err == nil; i++ {
		k := r.uvarint()
		rest := r.str()
		if k > uint64(len(prev)) {
			r.fail("domain prefix")
			break
		}
		start := buf.Len()
		buf.WriteString(prev[:k])
		buf.WriteString(rest)
		ends = append(ends, buf.Len())
		prev = buf.String()[start:]
	}
	all := buf.String()
	s := 0
	for _, e := range ends {
		out = append(out, all[s:e])
		s = e
	}
	return out
}

func (r *reader) zones() []Zone {
	n := r.count()
	out := make([]Zone, n)
	for i := range out {
		out[i] = Zone{Name: r.str(), Country: r.str()}
	}
	return out
}

// SortDomains sorts and deduplicates names in place and returns the result.
func SortDomains(names []string) []string {
	slices.Sort(names)
	return slices.Compact(names)
}

// SortASNs sorts rows by AS number; for duplicates the first row wins.
func SortASNs(rows []ASN) []ASN {
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].ASN < rows[j].ASN })
	return slices.CompactFunc(rows, func(a, b ASN) bool { return a.ASN == b.ASN })
}

// SortZones sorts zones by name; for duplicates the first row wins.
func SortZones(z []Zone) []Zone {
	sort.SliceStable(z, func(i, j int) bool { return z[i].Name < z[j].Name })
	return slices.CompactFunc(z, func(a, b Zone) bool { return a.Name == b.Name })
}
