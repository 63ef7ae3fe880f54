package storage

import (
	"testing"
	"time"
)

// marshalEventWith is MarshalEvent's layout with the three counters given
// as stored, whatever their range.
func marshalEventWith(e *DeviceEvent, flags, tampering, uses uint64) []byte {
	dst := []byte{eventVersion}
	dst = append(dst, e.ID[:]...)
	dst = appendString(dst, e.Account)
	dst = appendTime(dst, e.Created)
	dst = appendString(dst, e.Origin)
	ab, _ := e.Addr.MarshalBinary()
	dst = appendBytes(dst, ab)
	dst = append(dst, e.Schema)
	dst = appendBytes(dst, e.Signals)
	dst = appendUvarint(dst, flags)
	dst = appendUvarint(dst, tampering)
	dst = append(dst, e.Checked)
	dst = appendString(dst, e.VisitorID)
	dst = appendStrings(dst, e.Findings)
	dst = appendUvarint(dst, uses)
	return appendTime(dst, e.FirstUse)
}

// TestGarbledEventCountersRefused: a stored counter past its field's range
// is a corrupt record, not another value (flags that lose the automation
// bit, a tampering score over 1, uses past 2³² read as never used).
func TestGarbledEventCountersRefused(t *testing.T) {
	e := &DeviceEvent{Account: "acc_a", Created: time.Unix(1_790_000_000, 0).UTC(), Schema: 2, Signals: []byte(`{}`), VisitorID: "v", FirstUse: time.Unix(1_790_000_100, 0).UTC()}
	if got, err := UnmarshalEvent(marshalEventWith(e, uint64(EventAutomation), MaxTampering, 1<<32-1)); err != nil || got.Tampering != MaxTampering || got.Uses != 1<<32-1 {
		t.Fatalf("counters at their bounds: %+v %v", got, err)
	}
	for _, c := range []struct {
		name                   string
		flags, tampering, uses uint64
	}{
		{"flags over 16 bits", 1<<16 | uint64(EventAutomation), 0, 1},
		{"tampering score over 1", 0, MaxTampering + 1, 1},
		{"uses over 32 bits", 0, 0, 1 << 32},
	} {
		if got, err := UnmarshalEvent(marshalEventWith(e, c.flags, c.tampering, c.uses)); err == nil {
			t.Errorf("%s: accepted: flags=%#x tampering=%d uses=%d", c.name, got.Flags, got.Tampering, got.Uses)
		}
	}
}

// TestGarbledHistCountsRefused: a device-history day count past 32 bits is
// a corrupt record, not a small count.
func TestGarbledHistCountsRefused(t *testing.T) {
	record := func(n uint64) []byte {
		b := []byte{histVersion}
		b = appendUvarint(b, 1_790_000_000)
		b = appendUvarint(b, 1)
		b = appendUvarint(b, 20_700)
		b = appendUvarint(b, n)
		b = appendUvarint(b, 1_790_000_000)
		b = appendUvarint(b, 0)
		b = appendUvarint(b, 0)
		return appendUvarint(b, 0)
	}
	var r HistCustomerDevice
	if err := r.Unmarshal(record(5)); err != nil || len(r.Days) != 1 || r.Days[0].N != 5 {
		t.Fatalf("a day of 5 visits: %+v %v", r.Days, err)
	}
	if err := r.Unmarshal(record(1<<32 | 5)); err == nil {
		t.Fatalf("accepted: days %+v", r.Days)
	}
}
