package feedfile

import (
	"encoding/binary"
	"encoding/hex"
	"hash/crc32"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func smallRanges() *File {
	return &File{
		Header: Header{
			Name: "tor", Kind: KindRanges, Date: "2026-08-22", Entries: 3,
			Inputs: []Input{{Name: "tor/a.txt", Date: "2026-08-22", Entries: 3}},
		},
		Ranges: Ranges{
			Labels: []string{"x", "y"},
			V4: Table4{
				Start: []uint32{0x01020300, 0x01020304},
				End:   []uint32{0x01020303, 0x01020306}, // a /30 and a 3-address range
				Val:   []uint32{0, 1},
			},
			V6: Table6{
				Start: []U128{{Hi: 0x2606_4700_0000_0000}},
				End:   []U128{{Hi: 0x2606_4700_0000_0000, Lo: ^uint64(0)}}, // a /64
				Val:   []uint32{1},
			},
		},
	}
}

// TestFormatPinned pins the encoding of a small file byte for byte. If it
// fails, the format changed: bump Version and rebuild the embedded feeds
// rather than update the expected bytes alone.
func TestFormatPinned(t *testing.T) {
	got, err := Marshal(nil, smallRanges())
	if err != nil {
		t.Fatal(err)
	}
	// magic, version 1, "tor", kind 1, date, 3 entries, 1 input {name,
	// date, 3}, codec 0 (stored: a tiny body grows under zstd), 37, 37, then
	// the body: labels [x y]; IPv4 n=2, gaps 0x01020300 and 0, sizes /30 (3)
	// and literal 2, values 0 1; IPv6 n=1, gap 2606:4700::, size /64 (65),
	// value 1; CRC-32C.
	const want = "46524446454544" + "01" + "03746f72" + "01" + "0a323032362d30382d3232" + "03" +
		"01" + "09746f722f612e747874" + "0a323032362d30382d3232" + "03" +
		"00" + "25" + "25" +
		"02" + "0178" + "0179" +
		"02" + "80868808" + "00" + "03" + "0002" + "00" + "01" +
		"01" + "8080808080808080808080808080c0a3864c" + "41" + "01" +
		"c9fab29c"
	if h := hex.EncodeToString(got); h != want {
		t.Fatalf("encoding changed:\n got %s\nwant %s", h, want)
	}
	back, err := Unmarshal(got)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, smallRanges()) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", back, smallRanges())
	}
	again, _ := Marshal(nil, back)
	if string(again) != string(got) {
		t.Fatal("re-encoding a decoded file changed its bytes")
	}
}

func TestRoundTripKinds(t *testing.T) {
	files := []*File{
		{Header: Header{Name: "asn-info", Kind: KindASNs, Entries: 3}, ASNs: []ASN{
			{ASN: 1, Name: "Level 3", Country: "US"}, {ASN: 15169, Name: "Google LLC", Kind: "cloud", Country: "US"},
			{ASN: 4294967295, Name: "", Kind: "", Country: ""},
		}},
		{Header: Header{Name: "disposable", Kind: KindDomains, Entries: 4}, Domains: []string{
			"a.example", "mailinator.com", "mailinator.net", "sub.mailinator.com",
		}},
		{Header: Header{Name: "tz", Kind: KindZones, Entries: 2}, Zones: []Zone{
			{Name: "Asia/Calcutta", Country: "IN"}, {Name: "Europe/Berlin", Country: "DE"},
		}},
		{Header: Header{Name: "asn-hosting", Kind: KindShares, Entries: 3}, Shares: []Share{
			{ASN: 7922, V4: 3, V6: 0}, {ASN: 16509, V4: MaxShare, V6: 9876}, {ASN: 4294967295, V4: NoShare, V6: 1},
		}},
		{Header: Header{Name: "empty", Kind: KindRanges}},
		{Header: Header{Name: "edges", Kind: KindRanges, Entries: 2}, Ranges: Ranges{
			V4: Table4{Start: []uint32{0, 0xfffffff0}, End: []uint32{0, 0xffffffff}, Val: []uint32{7, 4294967295}},
			V6: Table6{
				Start: []U128{{}, {Hi: 1, Lo: 5}, {Hi: ^uint64(0), Lo: 0}},
				End:   []U128{{Lo: 0}, {Hi: 3, Lo: 2}, {Hi: ^uint64(0), Lo: ^uint64(0)}},
				Val:   []uint32{0, 1, 2},
			},
		}},
	}
	for _, f := range files {
		b, err := Marshal(nil, f)
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		back, err := Unmarshal(b)
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		norm(f)
		norm(back)
		if !reflect.DeepEqual(back, f) {
			t.Fatalf("%s round trip:\n got %+v\nwant %+v", f.Name, back, f)
		}
		h, err := ReadHeader(b)
		if err != nil || !reflect.DeepEqual(h, f.Header) {
			t.Fatalf("%s header %+v, %v", f.Name, h, err)
		}
	}
}

// norm makes empty slices nil so DeepEqual compares content.
func norm(f *File) {
	if len(f.Ranges.V4.Start) == 0 {
		f.Ranges.V4 = Table4{}
	}
	if len(f.Ranges.V6.Start) == 0 {
		f.Ranges.V6 = Table6{}
	}
	if len(f.Domains) == 0 {
		f.Domains = nil
	}
	if len(f.ASNs) == 0 {
		f.ASNs = nil
	}
	if len(f.Zones) == 0 {
		f.Zones = nil
	}
}

func TestRoundTripRandomRanges(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	for round := 0; round < 50; round++ {
		f := &File{Header: Header{Name: "r", Kind: KindRanges}}
		x := uint64(r.IntN(1000))
		for x <= 0xffffffff && len(f.Ranges.V4.Start) < 500 {
			end := min(x+uint64(r.IntN(1<<uint(r.IntN(33)))), 0xffffffff)
			f.Ranges.V4.Start = append(f.Ranges.V4.Start, uint32(x))
			f.Ranges.V4.End = append(f.Ranges.V4.End, uint32(end))
			f.Ranges.V4.Val = append(f.Ranges.V4.Val, r.Uint32())
			x = end + 1 + uint64(r.IntN(1<<uint(r.IntN(30))))
		}
		y := U128{Hi: r.Uint64() >> 8}
		for i := 0; i < 300; i++ {
			var size U128
			if k := r.IntN(129); k > 0 {
				size = mask(k)
			} else {
				size = U128{Hi: r.Uint64() >> 40, Lo: r.Uint64()}
			}
			end := y.Add(size)
			if end.Less(y) {
				break
			}
			f.Ranges.V6.Start = append(f.Ranges.V6.Start, y)
			f.Ranges.V6.End = append(f.Ranges.V6.End, end)
			f.Ranges.V6.Val = append(f.Ranges.V6.Val, uint32(i))
			if end.IsMax() {
				break
			}
			y = end.Add(U128{Lo: 1 + uint64(r.IntN(1000))})
			if y.Less(end) {
				break
			}
		}
		b, err := Marshal(nil, f)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Unmarshal(b)
		if err != nil {
			t.Fatal(err)
		}
		norm(f)
		norm(back)
		if !reflect.DeepEqual(back.Ranges, f.Ranges) {
			t.Fatalf("round %d: ranges differ", round)
		}
	}
}

func TestMarshalRejectsBadTables(t *testing.T) {
	bad := []*File{
		{Header: Header{Name: "", Kind: KindRanges}},
		{Header: Header{Name: "k", Kind: 9}},
		{Header: Header{Name: "overlap", Kind: KindRanges}, Ranges: Ranges{V4: Table4{Start: []uint32{1, 3}, End: []uint32{3, 4}, Val: []uint32{0, 0}}}},
		{Header: Header{Name: "reversed", Kind: KindRanges}, Ranges: Ranges{V4: Table4{Start: []uint32{5}, End: []uint32{4}, Val: []uint32{0}}}},
		{Header: Header{Name: "label", Kind: KindRanges}, Ranges: Ranges{Labels: []string{"a"}, V4: Table4{Start: []uint32{1}, End: []uint32{1}, Val: []uint32{1}}}},
		{Header: Header{Name: "cols", Kind: KindRanges}, Ranges: Ranges{V4: Table4{Start: []uint32{1}, End: []uint32{1}}}},
		{Header: Header{Name: "asn", Kind: KindASNs}, ASNs: []ASN{{ASN: 2}, {ASN: 2}}},
		{Header: Header{Name: "dom", Kind: KindDomains}, Domains: []string{"b.com", "a.com"}},
		{Header: Header{Name: "tz", Kind: KindZones}, Zones: []Zone{{Name: "B"}, {Name: "A"}}},
		{Header: Header{Name: "share-order", Kind: KindShares}, Shares: []Share{{ASN: 3}, {ASN: 2}}},
		{Header: Header{Name: "share-range", Kind: KindShares}, Shares: []Share{{ASN: 3, V4: MaxShare + 1}}},
	}
	for _, f := range bad {
		if _, err := Marshal(nil, f); err == nil {
			t.Errorf("Marshal(%q) accepted an invalid file", f.Name)
		}
	}
}

func TestUnmarshalRejectsDamage(t *testing.T) {
	good, _ := Marshal(nil, smallRanges())
	if _, err := Unmarshal(good[:len(good)-1]); err == nil {
		t.Error("truncated file accepted")
	}
	for i := range good {
		b := append([]byte(nil), good...)
		b[i] ^= 0x40
		if _, err := Unmarshal(b); err == nil {
			t.Errorf("flipping byte %d went unnoticed", i)
		}
	}
	v2 := append([]byte(nil), good...)
	v2[len(magic)] = Version + 1
	if _, err := Unmarshal(v2); err == nil || !strings.Contains(err.Error(), "version") {
		t.Errorf("other version: %v", err)
	}
	if _, err := Unmarshal([]byte("not a feed")); err == nil {
		t.Error("garbage accepted")
	}
}

func TestU128(t *testing.T) {
	for k := 0; k <= 128; k++ {
		if got := mask(k).ones(); got != k {
			t.Fatalf("mask(%d).ones() = %d", k, got)
		}
		b := appendU128(nil, mask(k))
		r := &reader{b: b}
		if got := r.u128(); got != mask(k) || r.err != nil || len(r.b) != 0 {
			t.Fatalf("u128 round trip of mask(%d) = %v, %v", k, got, r.err)
		}
	}
	if (U128{Hi: 1}).ones() != -1 || (U128{Lo: 6}).ones() != -1 {
		t.Fatal("ones() accepted a non-mask")
	}
	a := U128{Hi: 0, Lo: ^uint64(0)}
	if s := a.Add(U128{Lo: 1}); s != (U128{Hi: 1}) || s.Sub(U128{Lo: 1}) != a {
		t.Fatal("carry/borrow")
	}
}

// FuzzUnmarshal feeds the decoder arbitrary bytes with a valid checksum
// appended, so that it gets past the CRC and exercises the body decoders.
func FuzzUnmarshal(f *testing.F) {
	good, _ := Marshal(nil, smallRanges())
	f.Add(good[:len(good)-4])
	for _, fl := range []*File{
		{Header: Header{Name: "d", Kind: KindDomains}, Domains: []string{"a.com", "ab.com"}},
		{Header: Header{Name: "a", Kind: KindASNs}, ASNs: []ASN{{ASN: 1, Name: "x"}}},
		{Header: Header{Name: "z", Kind: KindZones}, Zones: []Zone{{Name: "A/B", Country: "DE"}}},
		{Header: Header{Name: "s", Kind: KindShares}, Shares: []Share{{ASN: 9, V4: 2500, V6: NoShare}}},
	} {
		b, _ := Marshal(nil, fl)
		f.Add(b[:len(b)-4])
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		b := binary.LittleEndian.AppendUint32(slices.Clone(payload), crc32.Checksum(payload, crcTable))
		file, err := Unmarshal(b)
		if err != nil {
			return
		}
		// Whatever decodes must re-encode to a file that decodes the same.
		again, err := Marshal(nil, file)
		if err != nil {
			t.Fatalf("decoded file does not re-encode: %v", err)
		}
		if _, err := Unmarshal(again); err != nil {
			t.Fatalf("re-encoded file does not decode: %v", err)
		}
	})
}

// storedFile encodes a header and a raw body (codec stored) with a valid
// checksum, so a test can hand Unmarshal a body Marshal would never write.
func storedFile(name string, kind Kind, body []byte) []byte {
	b := append([]byte(magic), Version)
	b = appendString(b, name)
	b = append(b, byte(kind))
	b = appendString(b, "")
	b = binary.AppendUvarint(b, 0) // entries
	b = binary.AppendUvarint(b, 0) // inputs
	b = append(b, codecStored)
	b = binary.AppendUvarint(b, uint64(len(body)))
	b = binary.AppendUvarint(b, uint64(len(body)))
	b = append(b, body...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
}

// A shared-prefix length that does not fit an int must be refused, not
// slice the previous name with a negative bound.
func TestUnmarshalDomainPrefixOverflow(t *testing.T) {
	body := binary.AppendUvarint(nil, 2)
	body = binary.AppendUvarint(body, 0)
	body = appendString(body, "a.com")
	body = binary.AppendUvarint(body, ^uint64(0)) // int(...) == -1
	body = appendString(body, "x")
	if _, err := Unmarshal(storedFile("d", KindDomains, body)); err == nil {
		t.Fatal("a huge domain prefix length was accepted")
	}
}
