package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// Device events and device history (the browser collector's records).
//
// Retention is by time-bucketed keys and range deletes, never by scanning:
//
//	event   prefixEvent  | day (uint32 BE, days since 1970-01-01 UTC) | id (16 bytes)
//	history prefixDevice | period (uint16 BE, 90-day periods since 1970) | visitor hash
//
// An event id starts with its day (EventDay), so the id alone finds the key.
// PruneEvents drops every day before the retention horizon with one
// DeleteRange. A history record lives in the period of its last sighting;
// a sighting in a later period moves it forward (LoadHistory looks in the
// current and the previous period), and PruneHistory drops every period
// before the previous one: a device unseen for 90 days becomes eligible,
// and is gone within 180.

// EventRetention is how long device events are kept.
const EventRetention = 30 * 24 * time.Hour

// HistoryPeriod is the bucket length of device history.
const HistoryPeriod = 90 * 24 * time.Hour

// EventIDLen is the binary length of an event id.
const EventIDLen = 16

// MaxVisitorLen bounds a visitor hash.
const MaxVisitorLen = 32

const (
	eventVersion   = 1
	historyVersion = 1
)

// Day is a UTC day number (days since 1970-01-01).
type Day uint32

// DayOf is the UTC day of t.
func DayOf(t time.Time) Day {
	s := t.Unix()
	if s < 0 {
		return 0
	}
	return Day(s / 86400)
}

// EventDay is the day an event id was minted on (its first four bytes).
func EventDay(id [EventIDLen]byte) Day { return Day(binary.BigEndian.Uint32(id[:4])) }

// DeviceEvent is one collection from collector.js with the verdicts computed
// when it arrived.
type DeviceEvent struct {
	ID      [EventIDLen]byte
	Account string
	Created time.Time
	Origin  string     // the page's Origin header, "" when none was sent
	Addr    netip.Addr // the caller's address
	Schema  uint8      // the signal schema version the collector sent
	Signals []byte     // the signals as received (JSON), for re-assessment and audits

	// Verdicts (device.Verdict, stored without importing it).
	Flags     uint16 // EventFlag* bits
	Tampering uint16 // tampering score × 10000
	Checked   uint8  // device.Checked bits
	VisitorID string
	Findings  []string

	// Uses counts the evaluations that resolved the event; FirstUse is the
	// first of them. The second resolve is a replay (evidence.device_replayed).
	Uses     uint32
	FirstUse time.Time
}

// Verdict flag bits of DeviceEvent.Flags.
const (
	EventAutomation uint16 = 1 << iota
	EventAntidetect
	EventEmulator
	EventVirtualMachine
	EventIncognito
	EventPrivacyMode
	EventIPBlocklisted
	EventComplete
)

func eventKey(dst []byte, id [EventIDLen]byte) []byte {
	dst = append(dst, prefixEvent)
	return append(dst, id[:]...)
}

// MarshalEvent appends the binary form of e (version 1).
func MarshalEvent(dst []byte, e *DeviceEvent) []byte {
	dst = append(dst, eventVersion)
	dst = append(dst, e.ID[:]...)
	dst = appendString(dst, e.Account)
	dst = appendTime(dst, e.Created)
	dst = appendString(dst, e.Origin)
	ab, _ := e.Addr.MarshalBinary() // never fails; the zero Addr is empty
	dst = appendBytes(dst, ab)
	dst = append(dst, e.Schema)
	dst = appendBytes(dst, e.Signals)
	dst = appendUvarint(dst, uint64(e.Flags))
	dst = appendUvarint(dst, uint64(e.Tampering))
	dst = append(dst, e.Checked)
	dst = appendString(dst, e.VisitorID)
	dst = appendStrings(dst, e.Findings)
	dst = appendUvarint(dst, uint64(e.Uses))
	return appendTime(dst, e.FirstUse)
}

// UnmarshalEvent decodes MarshalEvent output.
func UnmarshalEvent(b []byte) (*DeviceEvent, error) {
	r := &reader{b: b}
	if v := r.byte1(); r.err == nil && v != eventVersion {
		return nil, fmt.Errorf("event version %d: %w", v, errCorrupt)
	}
	e := &DeviceEvent{}
	if len(r.b) < EventIDLen {
		return nil, fmt.Errorf("event id: %w", errCorrupt)
	}
	copy(e.ID[:], r.b)
	r.b = r.b[EventIDLen:]
	e.Account = r.string()
	e.Created = r.time()
	e.Origin = r.string()
	if ab := r.bytes(); r.err == nil {
		if err := e.Addr.UnmarshalBinary(ab); err != nil {
			return nil, fmt.Errorf("event address: %w", errCorrupt)
		}
	}
	e.Schema = r.byte1()
	e.Signals = r.bytes()
	e.Flags = uint16(r.uvarint())
	e.Tampering = uint16(r.uvarint())
	e.Checked = r.byte1()
	e.VisitorID = r.string()
	e.Findings = r.strings()
	e.Uses = uint32(r.uvarint())
	e.FirstUse = r.time()
	if r.err != nil || len(r.b) != 0 {
		return nil, fmt.Errorf("decode event: %w", errCorrupt)
	}
	return e, nil
}

// DeviceHistory is one device's sightings (SPEC 2.2 times_seen, first_seen).
type DeviceHistory struct {
	Visitor   string // the keyed visitor hash (binary or hex; at most MaxVisitorLen bytes)
	FirstSeen time.Time
	LastSeen  time.Time
	TimesSeen int64
}

func periodOf(t time.Time) uint16 {
	d := uint32(DayOf(t)) / uint32(HistoryPeriod/(24*time.Hour))
	return uint16(min(d, 0xffff))
}

func historyKey(dst []byte, period uint16, visitor string) []byte {
	dst = append(dst, prefixDevice)
	dst = binary.BigEndian.AppendUint16(dst, period)
	return append(dst, visitor...)
}

// MarshalHistory appends the binary form of h (the visitor is in the key).
func MarshalHistory(dst []byte, h *DeviceHistory) []byte {
	dst = append(dst, historyVersion)
	dst = appendTime(dst, h.FirstSeen)
	dst = appendTime(dst, h.LastSeen)
	return appendUvarint(dst, uint64(max(h.TimesSeen, 0)))
}

// UnmarshalHistory decodes MarshalHistory output.
func UnmarshalHistory(visitor string, b []byte) (DeviceHistory, error) {
	r := &reader{b: b}
	if v := r.byte1(); r.err == nil && v != historyVersion {
		return DeviceHistory{}, fmt.Errorf("history version %d: %w", v, errCorrupt)
	}
	h := DeviceHistory{Visitor: visitor, FirstSeen: r.time(), LastSeen: r.time(), TimesSeen: int64(r.uvarint())}
	if r.err != nil || len(r.b) != 0 || h.TimesSeen < 0 {
		return DeviceHistory{}, fmt.Errorf("decode history: %w", errCorrupt)
	}
	return h, nil
}

// GetEvent reads an event; ErrNotFound when it does not exist (never
// existed, or pruned).
func (d *DB) GetEvent(id [EventIDLen]byte) (*DeviceEvent, error) {
	v, err := d.get(eventKey(nil, id))
	if err != nil {
		return nil, err
	}
	return UnmarshalEvent(v)
}

// LoadHistory reads a device's history as of now: from the current period,
// else the previous one. ok is false when the device has none.
func (d *DB) LoadHistory(visitor string, now time.Time) (h DeviceHistory, ok bool, err error) {
	if len(visitor) > MaxVisitorLen {
		return h, false, errors.New("visitor hash too long")
	}
	p := periodOf(now)
	for _, q := range []uint16{p, p - 1} {
		if q > p { // wrapped below period 0
			break
		}
		v, err := d.get(historyKey(nil, q, visitor))
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return h, false, err
		}
		h, err = UnmarshalHistory(visitor, v)
		return h, err == nil, err
	}
	return h, false, nil
}

// DeviceWrite is one group of device records to store together.
type DeviceWrite struct {
	Events    []*DeviceEvent
	Histories []*DeviceHistory
}

// WriteDevice stores events and histories as one synced batch: when it
// returns nil all of it survives a crash, when it fails none was written. A
// history is written into the period of its LastSeen and removed from the
// previous period, so one device has one record.
func (d *DB) WriteDevice(w DeviceWrite) error {
	if len(w.Events) == 0 && len(w.Histories) == 0 {
		return nil
	}
	b := d.db.NewBatch()
	var key, val []byte
	for _, e := range w.Events {
		key = eventKey(key[:0], e.ID)
		val = MarshalEvent(val[:0], e)
		_ = b.Set(key, val, nil)
	}
	for _, h := range w.Histories {
		if len(h.Visitor) > MaxVisitorLen || h.Visitor == "" {
			b.Close()
			return fmt.Errorf("history visitor hash of %d bytes", len(h.Visitor))
		}
		p := periodOf(h.LastSeen)
		key = historyKey(key[:0], p, h.Visitor)
		val = MarshalHistory(val[:0], h)
		_ = b.Set(key, val, nil)
		if p > 0 {
			_ = b.Delete(historyKey(key[:0], p-1, h.Visitor), nil)
		}
	}
	return d.commitBehind(b) // write-behind: synced within Options.WriteBehindSync
}

// PruneEvents deletes every event minted before the day of before, in one
// range delete.
func (d *DB) PruneEvents(before time.Time) error {
	lo := []byte{prefixEvent}
	hi := binary.BigEndian.AppendUint32([]byte{prefixEvent}, uint32(DayOf(before)))
	return d.deleteRange(lo, hi)
}

// PruneHistory deletes every history period before the previous one as of now.
func (d *DB) PruneHistory(now time.Time) error {
	p := periodOf(now)
	if p < 1 {
		return nil
	}
	lo := []byte{prefixDevice}
	hi := binary.BigEndian.AppendUint16([]byte{prefixDevice}, p-1)
	return d.deleteRange(lo, hi)
}

func (d *DB) deleteRange(lo, hi []byte) error {
	if d.broken.Load() {
		return fmt.Errorf("%w: broken", ErrUnavailable)
	}
	b := d.db.NewBatch()
	_ = b.DeleteRange(lo, hi, nil)
	return d.commit(b)
}
