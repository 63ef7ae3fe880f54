package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"time"
)

// Per-customer device history of the devicehist actors (each device's
// global sightings, times_seen and first_seen, are actors/events', in
// sightings.go): per
// customer × device visits and linked accounts (device.customer_history,
// linked_accounts), per customer × end-user account links with the account
// id's sealed copy, and per customer × address links (the `account` object
// of SPEC 2.2).
//
// Keys (customers are length-prefixed with one byte, so a customer's keys
// never run into another's):
//
//	record  prefixHist       | kind | identity
//	          kind 1 customer, device  | clen customer | device id
//	          kind 2 customer, account | clen customer | keyed account hash (16 bytes)
//	          kind 3 customer, address | clen customer | address (16 bytes, IPv4 mapped)
//	expiry  prefixHistExpiry | day (uint32 BE) | kind | identity      → empty
//	recent  prefixHistRecent | clen customer | ^last_seen (uint64 BE) | device id → empty
//
// Retention is by time-bucketed keys, never by scanning the records: every
// record has exactly one expiry-index entry under the UTC day of the oldest
// timestamp it holds (IndexDay). Everything a record holds is kept for
// HistRetention after it was last seen, so on a given day only the records
// indexed under days before DayOf(now − HistRetention) hold anything to drop;
// ExpiredHist walks just those days' index entries, and the record's owner
// trims or deletes each one (its content expires entry by entry, so a range
// delete cannot do it). A record, its index entry and its recent entry are
// always written in the same batch (HistWrite), so they never disagree after
// a successful write. The work per day is proportional to what expires that
// day; an unused record is gone within one day of its 90 days.

// HistRetention is how long device history keeps anything after it was last
// seen (SPEC §8: customer device history window 90 days; account links and
// the account id deleted 90 days after the last check).
const HistRetention = 90 * 24 * time.Hour

// Bounds of the identities in device-history keys.
const (
	MaxHistCustomer = 64
	MaxHistDevice   = 64
)

// histVersion is the first byte of every device-history value.
const histVersion = 1

// AccountHash is the keyed hash of an end-user account id (SPEC 2.1). The
// plaintext is never stored; HistAccount.Sealed holds its encrypted copy.
type AccountHash [16]byte

// HistKind names a device-history record kind.
type HistKind byte

// Record kinds; values are part of the key format.
const (
	HistKindCustomerDevice HistKind = 1
	HistKindAccount        HistKind = 2
	HistKindAddress        HistKind = 3
)

// Timestamps in device-history records are Unix seconds; 0 means unset.

// HourCount is the sightings of one UTC hour (Unix seconds / 3600).
type HourCount struct {
	Hour uint32
	N    uint32
}

// DayVisits is the distinct events of one UTC day and the first of them.
type DayVisits struct {
	Day   Day
	N     uint32
	First int64
}

// SeenAccount is an end-user account and when it was last seen.
type SeenAccount struct {
	Hash AccountHash
	Last int64
}

// SeenDevice is a device an account was checked on, and when last.
type SeenDevice struct {
	ID   string
	Last int64
}

// SeenAddr is an address an account was checked from, and when last.
type SeenAddr struct {
	Addr netip.Addr
	Last int64
}

// HistCustomerDevice is one device as one customer saw it.
type HistCustomerDevice struct {
	Customer, Device string // identity
	LastSeen         int64
	Days             []DayVisits   // visits per day in the window, oldest first
	Hours            []HourCount   // visits per hour of the last 24 h, oldest first
	Events           []uint64      // hashes of the most recent event ids, oldest first
	Accounts         []SeenAccount // end-user accounts seen with the device
}

// HistAccount is one end-user account of one customer.
type HistAccount struct {
	Customer   string      // identity
	Hash       AccountHash // identity
	Sealed     []byte      // the account id, AES-GCM sealed
	FirstCheck int64
	LastCheck  int64
	Devices    []SeenDevice
	Addrs      []SeenAddr
}

// HistAddress is one address of one customer's traffic.
type HistAddress struct {
	Customer string     // identity
	Addr     netip.Addr // identity (unmapped, no zone)
	Accounts []SeenAccount
}

// HistRecord is one of the four device-history records.
type HistRecord interface {
	// Kind names the record kind.
	Kind() HistKind
	// Marshal appends the value (the identity lives in the key).
	Marshal(dst []byte) []byte
	// Unmarshal decodes a value into the record, keeping its identity.
	Unmarshal(b []byte) error
	// IndexDay is the UTC day of the oldest timestamp the record holds: the
	// day its expiry-index entry lives under.
	IndexDay() Day

	appendIdentity(dst []byte) []byte
	validate() error
}

// HistStored is what the store holds for a record, as its owner last wrote
// or loaded it, so that a rewrite can move the index entries. The zero value
// means nothing is stored.
type HistStored struct {
	OK   bool
	Day  Day   // expiry-index day
	Seen int64 // customer devices: last_seen of the recent-index entry
}

func dayOfUnix(s int64) Day {
	if s < 0 {
		return 0
	}
	return Day(s / 86400)
}

func u64(s int64) uint64 { return uint64(max(s, 0)) }

func appendCustomer(dst []byte, c string) []byte {
	dst = append(dst, byte(len(c)))
	return append(dst, c...)
}

func addr16(a netip.Addr) [16]byte { return a.Unmap().As16() }

func addrFrom16(b []byte) netip.Addr {
	return netip.AddrFrom16([16]byte(b)).Unmap()
}

func validCustomer(c string) error {
	if c == "" || len(c) > MaxHistCustomer {
		return fmt.Errorf("device history: customer id of %d bytes", len(c))
	}
	return nil
}

func validDevice(d string) error {
	if d == "" || len(d) > MaxHistDevice {
		return fmt.Errorf("device history: device id of %d bytes", len(d))
	}
	return nil
}

// --- HistCustomerDevice ---

// Kind implements HistRecord.
func (r *HistCustomerDevice) Kind() HistKind { return HistKindCustomerDevice }

func (r *HistCustomerDevice) appendIdentity(dst []byte) []byte {
	dst = appendCustomer(append(dst, byte(HistKindCustomerDevice)), r.Customer)
	return append(dst, r.Device...)
}

func (r *HistCustomerDevice) validate() error {
	if err := validCustomer(r.Customer); err != nil {
		return err
	}
	return validDevice(r.Device)
}

// IndexDay implements HistRecord: the oldest visit day or account link.
func (r *HistCustomerDevice) IndexDay() Day {
	d := dayOfUnix(r.LastSeen)
	if len(r.Days) > 0 {
		d = min(d, r.Days[0].Day)
	}
	for _, a := range r.Accounts {
		d = min(d, dayOfUnix(a.Last))
	}
	return d
}

// Marshal implements HistRecord (version 1).
func (r *HistCustomerDevice) Marshal(dst []byte) []byte {
	dst = append(dst, histVersion)
	dst = appendUvarint(dst, u64(r.LastSeen))
	dst = appendUvarint(dst, uint64(len(r.Days)))
	for _, d := range r.Days {
		dst = appendUvarint(dst, uint64(d.Day))
		dst = appendUvarint(dst, uint64(d.N))
		dst = appendUvarint(dst, u64(d.First))
	}
	dst = appendUvarint(dst, uint64(len(r.Hours)))
	for _, h := range r.Hours {
		dst = appendUvarint(dst, uint64(h.Hour))
		dst = appendUvarint(dst, uint64(h.N))
	}
	dst = appendUvarint(dst, uint64(len(r.Events)))
	for _, e := range r.Events {
		dst = binary.BigEndian.AppendUint64(dst, e)
	}
	return appendSeenAccounts(dst, r.Accounts)
}

// Unmarshal implements HistRecord.
func (r *HistCustomerDevice) Unmarshal(b []byte) error {
	rd := &reader{b: b}
	if err := histHeader(rd); err != nil {
		return err
	}
	r.LastSeen = rd.sec()
	r.Days = r.Days[:0]
	for n := rd.histCount(3); n > 0; n-- {
		r.Days = append(r.Days, DayVisits{Day: Day(rd.uvarintMax(math.MaxUint32)), N: uint32(rd.uvarintMax(math.MaxUint32)), First: rd.sec()})
	}
	r.Hours = r.Hours[:0]
	for n := rd.histCount(2); n > 0; n-- {
		r.Hours = append(r.Hours, HourCount{Hour: uint32(rd.uvarintMax(math.MaxUint32)), N: uint32(rd.uvarintMax(math.MaxUint32))})
	}
	r.Events = r.Events[:0]
	for n := rd.histCount(8); n > 0; n-- {
		r.Events = append(r.Events, binary.BigEndian.Uint64(rd.histFixed(8)))
	}
	r.Accounts = readSeenAccounts(rd, r.Accounts[:0])
	return rd.histEnd("customer device")
}

// --- HistAccount ---

// Kind implements HistRecord.
func (r *HistAccount) Kind() HistKind { return HistKindAccount }

func (r *HistAccount) appendIdentity(dst []byte) []byte {
	dst = appendCustomer(append(dst, byte(HistKindAccount)), r.Customer)
	return append(dst, r.Hash[:]...)
}

func (r *HistAccount) validate() error { return validCustomer(r.Customer) }

// IndexDay implements HistRecord: the oldest link, or the last check.
func (r *HistAccount) IndexDay() Day {
	d := dayOfUnix(r.LastCheck)
	for _, x := range r.Devices {
		d = min(d, dayOfUnix(x.Last))
	}
	for _, x := range r.Addrs {
		d = min(d, dayOfUnix(x.Last))
	}
	return d
}

// Marshal implements HistRecord (version 1).
func (r *HistAccount) Marshal(dst []byte) []byte {
	dst = append(dst, histVersion)
	dst = appendBytes(dst, r.Sealed)
	dst = appendUvarint(dst, u64(r.FirstCheck))
	dst = appendUvarint(dst, u64(r.LastCheck))
	dst = appendUvarint(dst, uint64(len(r.Devices)))
	for _, x := range r.Devices {
		dst = appendString(dst, x.ID)
		dst = appendUvarint(dst, u64(x.Last))
	}
	dst = appendUvarint(dst, uint64(len(r.Addrs)))
	for _, x := range r.Addrs {
		a := addr16(x.Addr)
		dst = append(dst, a[:]...)
		dst = appendUvarint(dst, u64(x.Last))
	}
	return dst
}

// Unmarshal implements HistRecord.
func (r *HistAccount) Unmarshal(b []byte) error {
	rd := &reader{b: b}
	if err := histHeader(rd); err != nil {
		return err
	}
	r.Sealed = rd.bytes()
	r.FirstCheck, r.LastCheck = rd.sec(), rd.sec()
	r.Devices = r.Devices[:0]
	for n := rd.histCount(2); n > 0; n-- {
		id := rd.string()
		r.Devices = append(r.Devices, SeenDevice{ID: id, Last: rd.sec()})
	}
	r.Addrs = r.Addrs[:0]
	for n := rd.histCount(17); n > 0; n-- {
		a := rd.histFixed(16)
		if rd.err != nil {
			break
		}
		r.Addrs = append(r.Addrs, SeenAddr{Addr: addrFrom16(a), Last: rd.sec()})
	}
	return rd.histEnd("account")
}

// --- HistAddress ---

// Kind implements HistRecord.
func (r *HistAddress) Kind() HistKind { return HistKindAddress }

func (r *HistAddress) appendIdentity(dst []byte) []byte {
	dst = appendCustomer(append(dst, byte(HistKindAddress)), r.Customer)
	a := addr16(r.Addr)
	return append(dst, a[:]...)
}

func (r *HistAddress) validate() error {
	if !r.Addr.IsValid() {
		return errors.New("device history: invalid address")
	}
	return validCustomer(r.Customer)
}

// IndexDay implements HistRecord: the oldest link.
func (r *HistAddress) IndexDay() Day {
	d := Day(0)
	for i, a := range r.Accounts {
		if x := dayOfUnix(a.Last); i == 0 || x < d {
			d = x
		}
	}
	return d
}

// Marshal implements HistRecord (version 1).
func (r *HistAddress) Marshal(dst []byte) []byte {
	return appendSeenAccounts(append(dst, histVersion), r.Accounts)
}

// Unmarshal implements HistRecord.
func (r *HistAddress) Unmarshal(b []byte) error {
	rd := &reader{b: b}
	if err := histHeader(rd); err != nil {
		return err
	}
	r.Accounts = readSeenAccounts(rd, r.Accounts[:0])
	return rd.histEnd("address")
}

func appendSeenAccounts(dst []byte, as []SeenAccount) []byte {
	dst = appendUvarint(dst, uint64(len(as)))
	for _, a := range as {
		dst = append(dst, a.Hash[:]...)
		dst = appendUvarint(dst, u64(a.Last))
	}
	return dst
}

func readSeenAccounts(rd *reader, out []SeenAccount) []SeenAccount {
	for n := rd.histCount(17); n > 0; n-- {
		var a SeenAccount
		copy(a.Hash[:], rd.histFixed(16))
		a.Last = rd.sec()
		out = append(out, a)
	}
	return out
}

// --- decoding helpers ---

func histHeader(rd *reader) error {
	if v := rd.byte1(); rd.err != nil || v != histVersion {
		return fmt.Errorf("device history version %d: %w", v, errCorrupt)
	}
	return nil
}

func (r *reader) sec() int64 {
	v := r.uvarint()
	if v > 1<<62 {
		r.err = errCorrupt
		return 0
	}
	return int64(v)
}

// histCount reads a list length whose entries take at least each bytes.
func (r *reader) histCount(each int) int {
	n := r.uvarint()
	if r.err != nil {
		return 0
	}
	if n > uint64(len(r.b)/each) {
		r.err = errCorrupt
		return 0
	}
	return int(n)
}

// histFixed reads n bytes without copying; zeros after a failure.
func (r *reader) histFixed(n int) []byte {
	if r.err != nil || len(r.b) < n {
		r.err = errCorrupt
		return make([]byte, n)
	}
	b := r.b[:n]
	r.b = r.b[n:]
	return b
}

func (r *reader) histEnd(what string) error {
	if r.err != nil || len(r.b) != 0 {
		return fmt.Errorf("decode %s history: %w", what, errCorrupt)
	}
	return nil
}

// --- writes ---

// HistWrite is a set of device-history changes encoded for one batch: each
// record with its expiry-index and recent-index moves. The owner builds it
// (encoding happens on the owner's goroutine, so the owner may go on changing
// its records), and WriteHist stores many of them in one batch.
// Reset makes it reusable; the zero value is ready.
type HistWrite struct {
	buf []byte
	ops []histOp
}

type histOp struct {
	del            bool
	k0, k1, v0, v1 int
}

// Reset empties w, keeping its buffers.
func (w *HistWrite) Reset() { w.buf, w.ops = w.buf[:0], w.ops[:0] }

// Len is the number of key operations in w.
func (w *HistWrite) Len() int { return len(w.ops) }

// setFrom records the key appended since k0 as a set with the value
// appended after it (from v0); delFrom records it as a delete.
func (w *HistWrite) setFrom(k0, v0 int) {
	w.ops = append(w.ops, histOp{k0: k0, k1: v0, v0: v0, v1: len(w.buf)})
}

func (w *HistWrite) delFrom(k0 int) {
	w.ops = append(w.ops, histOp{del: true, k0: k0, k1: len(w.buf)})
}

func appendRecordKey(dst []byte, r HistRecord) []byte {
	return r.appendIdentity(append(dst, prefixHist))
}

func appendExpiryKey(dst []byte, day Day, r HistRecord) []byte {
	dst = binary.BigEndian.AppendUint32(append(dst, prefixHistExpiry), uint32(day))
	return r.appendIdentity(dst)
}

func appendRecentKey(dst []byte, customer string, seen int64, device string) []byte {
	dst = appendCustomer(append(dst, prefixHistRecent), customer)
	dst = binary.BigEndian.AppendUint64(dst, ^u64(seen))
	return append(dst, device...)
}

// Put stores r, replacing what prev says is stored, and returns what will be
// stored once the write lands.
func (w *HistWrite) Put(r HistRecord, prev HistStored) (HistStored, error) {
	if err := r.validate(); err != nil {
		return prev, err
	}
	k0 := len(w.buf)
	w.buf = appendRecordKey(w.buf, r)
	v0 := len(w.buf)
	w.buf = r.Marshal(w.buf)
	w.setFrom(k0, v0)
	now := HistStored{OK: true, Day: r.IndexDay()}
	if !prev.OK || prev.Day != now.Day {
		if prev.OK {
			k0 = len(w.buf)
			w.buf = appendExpiryKey(w.buf, prev.Day, r)
			w.delFrom(k0)
		}
		k0 = len(w.buf)
		w.buf = appendExpiryKey(w.buf, now.Day, r)
		w.setFrom(k0, len(w.buf))
	}
	if cd, ok := r.(*HistCustomerDevice); ok {
		now.Seen = cd.LastSeen
		if !prev.OK || prev.Seen != now.Seen {
			if prev.OK {
				k0 = len(w.buf)
				w.buf = appendRecentKey(w.buf, cd.Customer, prev.Seen, cd.Device)
				w.delFrom(k0)
			}
			k0 = len(w.buf)
			w.buf = appendRecentKey(w.buf, cd.Customer, now.Seen, cd.Device)
			w.setFrom(k0, len(w.buf))
		}
	}
	return now, nil
}

// Delete removes r (by its identity) and the index entries prev names.
func (w *HistWrite) Delete(r HistRecord, prev HistStored) {
	if r.validate() != nil {
		return
	}
	k0 := len(w.buf)
	w.buf = appendRecordKey(w.buf, r)
	w.delFrom(k0)
	if !prev.OK {
		return
	}
	k0 = len(w.buf)
	w.buf = appendExpiryKey(w.buf, prev.Day, r)
	w.delFrom(k0)
	if cd, ok := r.(*HistCustomerDevice); ok {
		k0 = len(w.buf)
		w.buf = appendRecentKey(w.buf, cd.Customer, prev.Seen, cd.Device)
		w.delFrom(k0)
	}
}

// DropIndex removes the expiry-index entry ref came from (one left behind by
// a write that did not land).
func (w *HistWrite) DropIndex(ref *HistRef) {
	r := ref.Record()
	if r.validate() != nil {
		return
	}
	k0 := len(w.buf)
	w.buf = appendExpiryKey(w.buf, ref.Day, r)
	w.delFrom(k0)
}

// WriteHist stores every change of ws, committed without a sync: when it
// returns nil all of it is committed and survives a crash once the next
// group sync ran (Options.SyncInterval; an OnSync hook that writes here is
// covered by the sync that follows it); when it fails none of it was
// written. The changes go into the journal as one entry and reach the
// records' own keys at the next fold (histjournal.go).
func (d *DB) WriteHist(ws []*HistWrite) error {
	n := 0
	for _, w := range ws {
		n += len(w.ops)
	}
	if n == 0 {
		return nil
	}
	return d.journalHist(ws)
}

// --- reads ---

// ErrHistUndecodable is LoadHist's error for a stored value that does not
// decode as its record (damaged, or of a format this binary does not read).
// Only the value is at fault, never the store's reading of it: a read that
// failed is another error.
var ErrHistUndecodable = errors.New("device history record does not decode")

// histName names a record by its identity (kind, customer and device id,
// account hash or address) for logs and errors: its key, never its contents.
func histName(r HistRecord) string {
	switch r := r.(type) {
	case *HistCustomerDevice:
		return fmt.Sprintf("customer device %q/%q", r.Customer, r.Device)
	case *HistAccount:
		return fmt.Sprintf("account %q/%x", r.Customer, r.Hash[:])
	case *HistAddress:
		return fmt.Sprintf("address %q/%s", r.Customer, r.Addr)
	}
	return fmt.Sprintf("record kind %d", r.Kind())
}

// String names the record ref names (its key, never its contents).
func (ref *HistRef) String() string { return histName(ref.Record()) }

// LoadHist reads the record with r's identity into r. ok is false (and r
// untouched) when none is stored; a stored value that does not decode is
// ErrHistUndecodable, naming the record.
func (d *DB) LoadHist(r HistRecord) (HistStored, bool, error) {
	if err := r.validate(); err != nil {
		return HistStored{}, false, err
	}
	key := appendRecordKey(nil, r)
	v, deleted, journalled := d.histLoad(key)
	if deleted {
		return HistStored{}, false, nil
	}
	if !journalled {
		var err error
		v, err = d.get(key)
		if errors.Is(err, ErrNotFound) {
			return HistStored{}, false, nil
		}
		if err != nil {
			return HistStored{}, false, err
		}
	}
	if err := r.Unmarshal(v); err != nil {
		return HistStored{}, false, fmt.Errorf("%w: %s: %w", ErrHistUndecodable, histName(r), err)
	}
	st := HistStored{OK: true, Day: r.IndexDay()}
	if cd, ok := r.(*HistCustomerDevice); ok {
		st.Seen = cd.LastSeen
	}
	return st, true, nil
}

// HistRef names a record from its expiry-index entry.
type HistRef struct {
	Day      Day // the index day the entry lives under
	Kind     HistKind
	Customer string
	Device   string      // HistKindCustomerDevice
	Hash     AccountHash // HistKindAccount
	Addr     netip.Addr  // HistKindAddress
}

// Record returns an empty record with ref's identity, ready for LoadHist.
func (ref *HistRef) Record() HistRecord {
	switch ref.Kind {
	case HistKindCustomerDevice:
		return &HistCustomerDevice{Customer: ref.Customer, Device: ref.Device}
	case HistKindAccount:
		return &HistAccount{Customer: ref.Customer, Hash: ref.Hash}
	default:
		return &HistAddress{Customer: ref.Customer, Addr: ref.Addr}
	}
}

func parseExpiryKey(k []byte) (HistRef, bool) {
	if len(k) < 6 || k[0] != prefixHistExpiry {
		return HistRef{}, false
	}
	ref, ok := parseHistIdentity(HistKind(k[5]), k[6:])
	ref.Day = Day(binary.BigEndian.Uint32(k[1:5]))
	return ref, ok
}

// parseHistIdentity parses the identity of a kind record after its kind
// byte (clen customer | device id, account hash or address), as
// appendIdentity wrote it. It checks the lengths and the device id; the
// customer may be empty or too long (callers that need it check it with
// validCustomer). Day is left zero.
func parseHistIdentity(kind HistKind, rest []byte) (HistRef, bool) {
	ref := HistRef{Kind: kind}
	if len(rest) < 1 || int(rest[0]) > len(rest)-1 {
		return ref, false
	}
	n := int(rest[0]) // widened: 1+rest[0] wraps to 0 for a 255-byte customer
	ref.Customer, rest = string(rest[1:1+n]), rest[1+n:]
	switch ref.Kind {
	case HistKindCustomerDevice:
		ref.Device = string(rest)
		return ref, validDevice(ref.Device) == nil
	case HistKindAccount:
		if len(rest) != len(ref.Hash) {
			return ref, false
		}
		copy(ref.Hash[:], rest)
	case HistKindAddress:
		if len(rest) != 16 {
			return ref, false
		}
		ref.Addr = addrFrom16(rest)
	default:
		return ref, false
	}
	return ref, true
}

// ExpiredHist calls fn with every expiry-index entry under a day before
// before, in key order, until fn returns false. Only those days' entries are
// read, never the records themselves. fn runs while the iteration is open;
// writes made meanwhile may or may not be seen.
func (d *DB) ExpiredHist(before Day, fn func(HistRef) bool) error {
	if err := d.settleHist(); err != nil {
		return err
	}
	hi := binary.BigEndian.AppendUint32([]byte{prefixHistExpiry}, uint32(before))
	it, err := d.newIter([]byte{prefixHistExpiry}, hi)
	if err != nil {
		return err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		ref, valid := parseExpiryKey(it.Key())
		if !valid {
			continue
		}
		if !fn(ref) {
			break
		}
	}
	return it.Err("iterate device history expiry")
}

// DropUndecodableHist adds to w the deletes of the record ref names if its
// stored value does not decode (ErrHistUndecodable) and reports whether it
// did: the record, ref's expiry-index entry, and for a customer device its
// recent-index entries, found in the customer's recent index as the record
// cannot say when the device was last seen. Retention cannot trim such a
// record, and it cannot be read either, so the owner deletes it once it is
// past the window, the sealed account id it may hold with it. A record that
// decodes, or none stored, is left alone (false); a failed read is an error
// and adds nothing. The recent-index scan reads one customer's entries, so
// it is for the rare record that does not decode.
func (d *DB) DropUndecodableHist(w *HistWrite, ref *HistRef) (bool, error) {
	r := ref.Record()
	if err := r.validate(); err != nil {
		return false, err
	}
	_, _, err := d.LoadHist(r)
	if !errors.Is(err, ErrHistUndecodable) {
		return false, err // nil: it decodes, or nothing is stored
	}
	var seen []int64
	if cd, ok := r.(*HistCustomerDevice); ok {
		if seen, err = d.recentSeenOf(cd.Customer, cd.Device); err != nil {
			return false, err
		}
	}
	k0 := len(w.buf)
	w.buf = appendRecordKey(w.buf, r)
	w.delFrom(k0)
	k0 = len(w.buf)
	w.buf = appendExpiryKey(w.buf, ref.Day, r)
	w.delFrom(k0)
	for _, s := range seen {
		k0 = len(w.buf)
		w.buf = appendRecentKey(w.buf, ref.Customer, s, ref.Device)
		w.delFrom(k0)
	}
	return true, nil
}

// recentSeenOf returns the last_seen of every recent-index entry of one
// customer's device (one, unless a write that did not land left another).
func (d *DB) recentSeenOf(customer, device string) ([]int64, error) {
	if err := d.settleHist(); err != nil {
		return nil, err
	}
	lo := appendCustomer([]byte{prefixHistRecent}, customer)
	it, err := d.newIter(lo, prefixEnd(lo))
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []int64
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()[len(lo):]
		if len(k) >= 9 && string(k[8:]) == device {
			out = append(out, int64(^binary.BigEndian.Uint64(k[:8])))
		}
	}
	return out, it.Err("iterate recent devices")
}

// RecentHistDevices returns up to limit of customer's device records, most
// recently seen first. An index entry whose record says otherwise (left by a
// write that did not land) is skipped.
func (d *DB) RecentHistDevices(customer string, limit int) ([]*HistCustomerDevice, error) {
	if err := validCustomer(customer); err != nil {
		return nil, err
	}
	if err := d.settleHist(); err != nil {
		return nil, err
	}
	lo := appendCustomer([]byte{prefixHistRecent}, customer)
	hi := prefixEnd(lo)
	it, err := d.newIter(lo, hi)
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []*HistCustomerDevice
	for ok := it.First(); ok && len(out) < limit; ok = it.Next() {
		k := it.Key()[len(lo):]
		if len(k) < 9 {
			continue
		}
		seen := int64(^binary.BigEndian.Uint64(k[:8]))
		r := &HistCustomerDevice{Customer: customer, Device: string(k[8:])}
		if _, found, err := d.LoadHist(r); err != nil {
			return nil, err
		} else if !found || r.LastSeen != seen {
			continue
		}
		out = append(out, r)
	}
	if err := it.Err("iterate recent devices"); err != nil {
		return nil, err
	}
	return out, nil
}

// prefixEnd is the smallest key after every key that starts with p.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil // p is all 0xff: no upper bound
}

// HistKeys counts the keys under the device-history prefixes: records,
// expiry-index entries and recent-index entries. It reads everything, so it
// is for tests and diagnostics only.
func (d *DB) HistKeys() (records, expiry, recent int, err error) {
	if err := d.settleHist(); err != nil {
		return 0, 0, 0, err
	}
	if records, err = d.countKeys(prefixHist, "device history"); err != nil {
		return 0, 0, 0, err
	}
	if expiry, err = d.countKeys(prefixHistExpiry, "device history"); err != nil {
		return 0, 0, 0, err
	}
	recent, err = d.countKeys(prefixHistRecent, "device history")
	return records, expiry, recent, err
}

// countKeys counts the keys under prefix p (what names them in an error).
// It reads every key: tests and diagnostics only.
func (d *DB) countKeys(p byte, what string) (int, error) {
	it, err := d.newIter([]byte{p}, []byte{p + 1})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	return n, it.Err("iterate " + what)
}
