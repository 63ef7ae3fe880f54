package storage

import (
	"encoding/hex"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func testEvent(day time.Time, n byte) *DeviceEvent {
	e := &DeviceEvent{
		Account: "acc_1", Created: day, Origin: "https://shop.example", Addr: netip.MustParseAddr("73.0.0.1"),
		Schema: 1, Signals: []byte(`{"v":1,"ua":"x"}`), Flags: EventAutomation | EventComplete, Tampering: 1234,
		Checked: 0x7f, VisitorID: "0123456789abcdef0123", Findings: []string{"headless_ua"},
	}
	d := DayOf(day)
	e.ID[0], e.ID[1], e.ID[2], e.ID[3] = byte(d>>24), byte(d>>16), byte(d>>8), byte(d)
	e.ID[15] = n
	return e
}

// TestEventFormatPinned pins the on-disk form: a change must bump the version.
func TestEventFormatPinned(t *testing.T) {
	at := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	e := testEvent(at, 7)
	e.Uses, e.FirstUse = 2, at.Add(time.Minute)
	b := MarshalEvent(nil, e)
	const want = "020000512b000000000000000000000007056163635f318180b2ff8a8797f518" +
		"1468747470733a2f2f73686f702e6578616d706c65044900000101107b2276223a312c227561223a2278227d" +
		"8101d2097f143031323334353637383961626364656630313233010b686561646c6573735f7561" +
		"0281b0cfc1ea8897f518"
	if got := hex.EncodeToString(b); got != want {
		t.Fatalf("event bytes changed (bump eventVersion and keep decoding the old form):\n got %s\nwant %s", got, want)
	}
	back, err := UnmarshalEvent(b)
	if err != nil {
		t.Fatal(err)
	}
	if back.ID != e.ID || back.Account != e.Account || !back.Created.Equal(e.Created) || back.Origin != e.Origin ||
		back.Addr != e.Addr || back.Schema != 1 || string(back.Signals) != string(e.Signals) || back.Flags != e.Flags ||
		back.Tampering != e.Tampering || back.Checked != e.Checked || back.VisitorID != e.VisitorID ||
		len(back.Findings) != 1 || back.Uses != 2 || !back.FirstUse.Equal(e.FirstUse) {
		t.Fatalf("round trip: %+v", back)
	}
	for i := range b {
		if _, err := UnmarshalEvent(b[:i]); err == nil {
			t.Fatalf("truncated at %d decoded", i)
		}
	}
	if back.RawSignals {
		t.Fatal("a version 2 record read as raw signals")
	}
	if _, err := UnmarshalEvent(append([]byte{3}, b[1:]...)); err == nil {
		t.Fatal("unknown version decoded")
	}
}

// TestEventVersion1StillDecodes: records written before the compact signals
// (version 1, the raw body) decode, say so, and are rewritten as they were.
func TestEventVersion1StillDecodes(t *testing.T) {
	const v1 = "010000512b000000000000000000000007056163635f318180b2ff8a8797f518" +
		"1468747470733a2f2f73686f702e6578616d706c65044900000101107b2276223a312c227561223a2278227d" +
		"8101d2097f143031323334353637383961626364656630313233010b686561646c6573735f7561" +
		"0281b0cfc1ea8897f518"
	b, _ := hex.DecodeString(v1)
	e, err := UnmarshalEvent(b)
	if err != nil {
		t.Fatal(err)
	}
	if !e.RawSignals || string(e.Signals) != `{"v":1,"ua":"x"}` || e.Account != "acc_1" || e.Uses != 2 || e.VisitorID != "0123456789abcdef0123" {
		t.Fatalf("version 1 record: %+v", e)
	}
	e.Uses++
	again, err := UnmarshalEvent(MarshalEvent(nil, e))
	if err != nil || !again.RawSignals || again.Uses != 3 {
		t.Fatalf("rewritten version 1 record: %v %+v", err, again)
	}
}

// FuzzUnmarshalEvent: a stored event record of any bytes decodes or fails
// cleanly, and whatever decodes survives an encode-decode round trip.
func FuzzUnmarshalEvent(f *testing.F) {
	at := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	f.Add(MarshalEvent(nil, testEvent(at, 1)))
	old := testEvent(at, 2)
	old.RawSignals = true
	f.Add(MarshalEvent(nil, old))
	f.Add([]byte{2})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := UnmarshalEvent(b)
		if err != nil {
			return
		}
		enc := MarshalEvent(nil, e)
		back, err := UnmarshalEvent(enc)
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v\n%x", err, enc)
		}
		if again := MarshalEvent(nil, back); string(again) != string(enc) {
			t.Fatalf("round trip differs:\n in %x\nout %x", enc, again)
		}
	})
}

func TestEventsStoreAndPrune(t *testing.T) {
	fs := vfs.NewMem()
	db, err := Open("d", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	day0 := time.Date(2026, 10, 1, 9, 0, 0, 0, time.UTC)
	old, mid, fresh := testEvent(day0, 1), testEvent(day0.AddDate(0, 0, 9), 2), testEvent(day0.AddDate(0, 0, 40), 3)
	if err := db.WriteDevice(DeviceWrite{Events: []*DeviceEvent{old, mid, fresh}}); err != nil {
		t.Fatal(err)
	}
	if EventDay(mid.ID) != DayOf(mid.Created) {
		t.Fatal("event day")
	}
	// Reopen: synced writes persist.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err = Open("d", Options{FS: fs}); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	got, err := db.GetEvent(mid.ID)
	if err != nil || got.VisitorID != mid.VisitorID {
		t.Fatalf("get: %v %+v", err, got)
	}
	// 30-day retention as of day0+40: old and mid go, fresh stays.
	if err := db.PruneEvents(fresh.Created.Add(-EventRetention)); err != nil {
		t.Fatal(err)
	}
	for _, e := range []*DeviceEvent{old, mid} {
		if _, err := db.GetEvent(e.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("event of %s survived pruning: %v", e.Created, err)
		}
	}
	if _, err := db.GetEvent(fresh.ID); err != nil {
		t.Fatalf("fresh event pruned: %v", err)
	}
	// Rewriting an event (a use) replaces it.
	fresh.Uses = 1
	if err := db.WriteDevice(DeviceWrite{Events: []*DeviceEvent{fresh}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := db.GetEvent(fresh.ID); got.Uses != 1 {
		t.Fatal("use not stored")
	}
}
