package storage

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func testAEAD(t *testing.T, key string) cipher.AEAD {
	t.Helper()
	k := bytes.Repeat([]byte(key), 32)[:32]
	b, err := aes.NewCipher(k)
	if err != nil {
		t.Fatal(err)
	}
	a, err := cipher.NewGCM(b)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func testSample(customer string, dev byte, last time.Time) *GPUSample {
	s := &GPUSample{Customer: customer, Visitor: "vis_" + string('a'+dev), Last: last}
	s.Device[0] = dev
	for i := range s.Features {
		s.Features[i] = float32(i) / GPUFeatures
	}
	return s
}

func TestGPUSampleFormat(t *testing.T) {
	a := testAEAD(t, "k")
	at := time.Unix(1_790_000_000, 0).UTC()
	s := testSample("acct_1", 7, at)
	s.Event = "evt_1"
	k, v, err := SealGPUSample(a, s)
	if err != nil {
		t.Fatal(err)
	}
	// Key: 0x35, len, customer, 16-byte device hash.
	if got, want := hex.EncodeToString(k), "3506"+hex.EncodeToString([]byte("acct_1"))+"07"+"000000000000000000000000000000"; got != want {
		t.Fatalf("key %s, want %s", got, want)
	}
	// Value: version 2, clear Unix seconds, 12-byte nonce, sealed body
	// (visitor, features, event).
	if v[0] != 2 || !bytes.Equal(v[1:9], []byte{0, 0, 0, 0, 0x6a, 0xb1, 0x3b, 0x80}) || len(v) != 9+12+1+len(s.Visitor)+4*GPUFeatures+1+len(s.Event)+16 {
		t.Fatalf("value header % x (len %d)", v[:9], len(v))
	}
	if bytes.Contains(v, []byte(s.Visitor)) {
		t.Fatal("visitor id stored in clear")
	}
	got, err := OpenGPUSample(a, k, v)
	if err != nil || *got != *s {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	if _, err := OpenGPUSample(testAEAD(t, "x"), k, v); !errors.Is(err, ErrSealed) {
		t.Fatalf("other key: %v", err)
	}
	k2, _, _ := SealGPUSample(a, testSample("acct_2", 7, at))
	if _, err := OpenGPUSample(a, k2, v); !errors.Is(err, ErrSealed) {
		t.Fatalf("moved value: %v", err)
	}
	if _, err := OpenGPUSample(a, k, v[:5]); err == nil {
		t.Fatal("truncated value opened")
	}
	if bytes.Contains(v, []byte(s.Event)) {
		t.Fatal("event id stored in clear")
	}
	// A version 1 record (no event id) still opens, with none.
	plain := []byte{byte(len(s.Visitor))}
	plain = append(plain, s.Visitor...)
	for _, f := range s.Features {
		plain = binary.BigEndian.AppendUint32(plain, math.Float32bits(f))
	}
	v1 := append([]byte{1}, v[1:9+12]...)
	v1 = a.Seal(v1, v[9:9+12], plain, k)
	old, err := OpenGPUSample(a, k, v1)
	if want := *s; err != nil || func() bool { want.Event = ""; return *old != want }() {
		t.Fatalf("version 1 record: %+v %v", old, err)
	}
	// A version 1 body under version 2's byte, or the reverse, does not.
	v1[0] = 2
	if _, err := OpenGPUSample(a, k, v1); err == nil {
		t.Fatal("a body without its event id opened as version 2")
	}
}

func TestGPUSamplesStore(t *testing.T) {
	fs := vfs.NewMem()
	db, err := Open("d", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	a := testAEAD(t, "k")
	now := time.Unix(1_790_000_000, 0).UTC()
	for _, s := range []*GPUSample{testSample("c", 1, now), testSample("c", 2, now.Add(-40*24*time.Hour)), testSample("cc", 1, now)} {
		if err := db.PutGPUSample(a, s); err != nil {
			t.Fatal(err)
		}
	}
	got, err := db.LoadGPUSamples(a, "c", now.Add(-30*24*time.Hour))
	if err != nil || len(got) != 1 || got[0].Device[0] != 1 || got[0].Customer != "c" {
		t.Fatalf("load: %+v %v", got, err)
	}
	// The stale one was deleted; the other customer (a longer id sharing the
	// prefix) is untouched.
	if got, _ := db.LoadGPUSamples(a, "c", time.Time{}); len(got) != 1 {
		t.Fatalf("stale kept: %d", len(got))
	}
	if got, _ := db.LoadGPUSamples(a, "cc", time.Time{}); len(got) != 1 {
		t.Fatalf("other customer: %d", len(got))
	}
	if err := db.DeleteGPUSamples("c"); err != nil {
		t.Fatal(err)
	}
	if got, _ := db.LoadGPUSamples(a, "c", time.Time{}); len(got) != 0 {
		t.Fatalf("after delete: %d", len(got))
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open("d", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got, _ := db.LoadGPUSamples(a, "cc", time.Time{}); len(got) != 1 || got[0].Visitor != "vis_b" {
		t.Fatalf("after reopen: %+v", got)
	}
}

func TestPruneGPUSamples(t *testing.T) {
	db, err := Open("d", Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	a := testAEAD(t, "k")
	now := time.Unix(1_790_000_000, 0).UTC()
	cut := now.Add(-30 * 24 * time.Hour)
	for _, s := range []*GPUSample{testSample("c", 1, now), testSample("c", 2, cut), testSample("d", 1, cut.Add(-time.Hour))} {
		if err := db.PutGPUSample(a, s); err != nil {
			t.Fatal(err)
		}
	}
	// Only the customers mine accepts.
	if err := db.PruneGPUSamples(cut, func(c string) bool { return c == "c" }); err != nil {
		t.Fatal(err)
	}
	if got, _ := db.LoadGPUSamples(a, "c", time.Time{}); len(got) != 1 || got[0].Device[0] != 1 {
		t.Fatalf("c after prune: %+v", got)
	}
	if got, _ := db.LoadGPUSamples(a, "d", time.Time{}); len(got) != 1 {
		t.Fatalf("d pruned though not mine: %d", len(got))
	}
	if err := db.PruneGPUSamples(cut, nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := db.LoadGPUSamples(a, "d", time.Time{}); len(got) != 0 {
		t.Fatalf("d kept: %d", len(got))
	}
}
