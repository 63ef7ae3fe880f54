package storage

import (
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"
	"time"
)

// Device events: the browser collector's records (actors/events). Each
// device's global sightings, which events add up to, are in sightings.go;
// WriteDevice stores both together.
//
// Retention is by time-bucketed keys and range deletes, never by scanning:
//
//	event   prefixEvent  | day (uint32 BE, days since 1970-01-01 UTC) | id (16 bytes)
//
// An event id starts with its day (EventDay), so the id alone finds the key.
// PruneEvents drops every day before the retention horizon with one
// DeleteRange.

// EventRetention is how long device events are kept.
const EventRetention = 30 * 24 * time.Hour

// EventExpired reports whether an event created at created is past its
// retention as of now: pruned, or due to be at the next prune, and no
// longer to be read.
func EventExpired(created, now time.Time) bool { return created.Before(now.Add(-EventRetention)) }

// EventIDLen is the binary length of an event id.
const EventIDLen = 16

// MaxVisitorLen bounds a visitor hash.
const MaxVisitorLen = 32

// MaxEventSignals bounds the signals an event keeps (version 2): the
// collector's report cut to the fields the verdicts read, never the raw body.
// The producer refuses a report whose compact form is longer.
const MaxEventSignals = 16 << 10

// Event record versions: 1 kept the report's raw body (up to 32 KB, the
// publishable key and any unknown fields included); 2 keeps the compact
// signals (same layout, bounded by MaxEventSignals). Both decode.
const (
	eventVersionRaw = 1
	eventVersion    = 2
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
	// Signals are the signals the verdicts were computed from, as compact
	// JSON (device.Signals after Clamp), for re-assessment and audits.
	Signals []byte
	// RawSignals: a version 1 record, whose Signals are the report's body as
	// it was received.
	RawSignals bool

	// Verdicts (device.Verdict, stored without importing it).
	Flags     uint16 // EventFlag* bits
	Tampering uint16 // tampering score × 10000 (at most MaxTampering)
	Checked   uint8  // device.Checked bits
	VisitorID string
	Findings  []string

	// Uses counts the evaluations that resolved the event; FirstUse is the
	// first of them. The second resolve is a replay (evidence.device_replayed).
	// Only Uses > 0 is ever read: the owner writes an event when its first
	// use comes, and stores later uses only with a later write of the event
	// (a replay costs no write), so a stored Uses can be below the count.
	Uses     uint32
	FirstUse time.Time
}

// MaxTampering is DeviceEvent.Tampering of a score of 1 (SPEC 2.2: 0-1).
const MaxTampering = 10000

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

// MarshalEvent appends the binary form of e: version 2, or version 1 for a
// record decoded from it (RawSignals), so rewriting an old event (its use
// count) keeps what its Signals are.
func MarshalEvent(dst []byte, e *DeviceEvent) []byte {
	if e.RawSignals {
		dst = append(dst, eventVersionRaw)
	} else {
		dst = append(dst, eventVersion)
	}
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
	v := r.byte1()
	if r.err == nil && v != eventVersion && v != eventVersionRaw {
		return nil, fmt.Errorf("event version %d: %w", v, errCorrupt)
	}
	e := &DeviceEvent{RawSignals: v == eventVersionRaw}
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
	e.Flags = uint16(r.uvarintMax(math.MaxUint16))
	e.Tampering = uint16(r.uvarintMax(MaxTampering))
	e.Checked = r.byte1()
	e.VisitorID = r.string()
	e.Findings = r.strings()
	e.Uses = uint32(r.uvarintMax(math.MaxUint32))
	e.FirstUse = r.time()
	if r.err != nil || len(r.b) != 0 {
		return nil, fmt.Errorf("decode event: %w", errCorrupt)
	}
	return e, nil
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

// DeviceWrite is one group of device records to store together.
type DeviceWrite struct {
	Events    []*DeviceEvent
	Sightings []*Sightings
}

// WriteDevice stores events and sightings as one batch, committed without a
// sync: when it returns nil all of it is committed and survives a crash once
// the next group sync ran (as WriteHist); when it fails none was written. A
// device's sightings are written into the period of their LastSeen and
// removed from the previous period, so one device has one record.
func (d *DB) WriteDevice(w DeviceWrite) error {
	if len(w.Events) == 0 && len(w.Sightings) == 0 {
		return nil
	}
	b := d.newBatch()
	var key, val []byte
	for _, e := range w.Events {
		key = eventKey(key[:0], e.ID)
		val = MarshalEvent(val[:0], e)
		_ = b.Set(key, val, nil)
	}
	for _, h := range w.Sightings {
		if len(h.Visitor) > MaxVisitorLen || h.Visitor == "" {
			b.Close()
			return fmt.Errorf("sightings visitor hash of %d bytes", len(h.Visitor))
		}
		p := periodOf(h.LastSeen)
		key = sightingsKey(key[:0], p, h.Visitor)
		val = MarshalSightings(val[:0], h)
		_ = b.Set(key, val, nil)
		if p > 0 {
			_ = b.Delete(sightingsKey(key[:0], p-1, h.Visitor), nil)
		}
	}
	return d.commitBehind(b) // write-behind: synced within Options.SyncInterval
}

// PruneEvents deletes every event minted before the day of before, in one
// range delete.
func (d *DB) PruneEvents(before time.Time) error {
	lo := []byte{prefixEvent}
	hi := binary.BigEndian.AppendUint32([]byte{prefixEvent}, uint32(DayOf(before)))
	return d.deleteRange(lo, hi)
}

// DeviceKeys counts the keys under the device-event and sightings
// prefixes. It reads everything, so it is for tests and diagnostics only.
func (d *DB) DeviceKeys() (events, sightings int, err error) {
	if events, err = d.countKeys(prefixEvent, "device events"); err != nil {
		return 0, 0, err
	}
	sightings, err = d.countKeys(prefixDevice, "device sightings")
	return events, sightings, err
}

func (d *DB) deleteRange(lo, hi []byte) error {
	b := d.newBatch()
	_ = b.DeleteRange(lo, hi, nil)
	return d.commit(b)
}
