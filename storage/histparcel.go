package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// Device-history records travel between cluster nodes one at a time, as
// parcels (the record key without its prefix, then the stored value):
//
//	parcel  uvarint(len(identity)) | identity | value
//	          identity  kind | clen customer | device id / account hash / address (as in the record key)
//	          value     the record's Marshal (histVersion first)
//
// A parcel comes from another node, so ParseHistParcel checks every length
// and identity and rejects anything else; HistOf names the stored records a
// node hands over.

// maxHistIdentity bounds the identity of a valid record: kind, customer
// length, customer and the longest identity rest (a device id).
const maxHistIdentity = 2 + MaxHistCustomer + MaxHistDevice

// AppendHistParcel appends r as a parcel to dst. It fails, appending nothing,
// when r's identity is not a valid one.
func AppendHistParcel(dst []byte, r HistRecord) ([]byte, error) {
	if r == nil {
		return dst, errors.New("device history parcel: no record")
	}
	if err := r.validate(); err != nil {
		return dst, fmt.Errorf("device history parcel of kind %d: %w", r.Kind(), err)
	}
	id := r.appendIdentity(make([]byte, 0, maxHistIdentity))
	dst = appendBytes(dst, id)
	return r.Marshal(dst), nil
}

// ParseHistParcel decodes a parcel AppendHistParcel wrote into a new record
// (*HistCustomerDevice, *HistAccount or *HistAddress). Any other input —
// truncated, an unknown kind, an invalid customer or device id, a bad
// identity length, a value that does not decode or has trailing bytes — is
// an error (wrapping errCorrupt); it never panics. The record holds no
// reference to b.
func ParseHistParcel(b []byte) (HistRecord, error) {
	n, w := binary.Uvarint(b)
	if w <= 0 {
		return nil, fmt.Errorf("device history parcel: identity length: %w", errCorrupt)
	}
	b = b[w:]
	if n == 0 || n > uint64(len(b)) || n > maxHistIdentity {
		return nil, fmt.Errorf("device history parcel: identity of %d bytes in %d: %w", n, len(b), errCorrupt)
	}
	id, val := b[:n], b[n:]
	kind := HistKind(id[0])
	ref, ok := parseHistIdentity(kind, id[1:])
	if !ok {
		return nil, fmt.Errorf("device history parcel: bad identity of kind %d: %w", kind, errCorrupt)
	}
	if validCustomer(ref.Customer) != nil {
		return nil, fmt.Errorf("device history parcel: customer id of %d bytes: %w", len(ref.Customer), errCorrupt)
	}
	r := ref.Record()
	if err := r.Unmarshal(val); err != nil {
		return nil, fmt.Errorf("device history parcel: %s of customer %q: %w", histKindName(kind), ref.Customer, err)
	}
	return r, nil
}

// HistCustomerOf is the customer whose history r is ("" for a nil record).
func HistCustomerOf(r HistRecord) string {
	switch r := r.(type) {
	case *HistCustomerDevice:
		return r.Customer
	case *HistAccount:
		return r.Customer
	case *HistAddress:
		return r.Customer
	}
	return ""
}

// histKindName names a record kind in errors.
func histKindName(k HistKind) string {
	switch k {
	case HistKindCustomerDevice:
		return "customer device"
	case HistKindAccount:
		return "account"
	case HistKindAddress:
		return "address"
	}
	return fmt.Sprintf("kind %d", k)
}

// HistOf calls fn with the identity of every stored device-history record
// (all three kinds, kind by kind, in key order) of the customers match
// accepts, until fn returns false. A nil match accepts every customer. Only
// keys are read: the records' owner loads the values it takes.
//
// match is asked once per kind and customer (in key order), and the keys of
// a customer it refuses are not walked: one seek steps past them. A key
// that is not a valid record key is skipped. fn runs while the iteration is
// open; writes made meanwhile may or may not be seen.
func (d *DB) HistOf(match func(customer string) bool, fn func(HistRef) bool) error {
	if err := d.settleHist(); err != nil {
		return err
	}
	lo := []byte{prefixHist, byte(HistKindCustomerDevice)}
	hi := []byte{prefixHist, byte(HistKindAddress) + 1}
	it, err := d.newIter(lo, hi)
	if err != nil {
		return err
	}
	defer it.Close()
	var (
		cur   []byte // prefixHist | kind | clen customer of the customer last asked about
		curOK bool   // match's answer for cur
	)
	for ok := it.First(); ok; {
		k := it.Key()
		if len(k) < 3 || int(k[2]) > len(k)-3 {
			ok = it.Next() // not a record key: too short for its customer
			continue
		}
		p := k[:3+int(k[2])]
		if !bytes.Equal(p, cur) {
			cur = append(cur[:0], p...)
			c := string(p[3:])
			curOK = validCustomer(c) == nil && (match == nil || match(c))
		}
		if !curOK {
			ok = it.SeekGE(prefixEnd(cur)) // past every key of this kind and customer
			continue
		}
		if ref, valid := parseHistIdentity(HistKind(k[1]), k[2:]); valid && !fn(ref) {
			break
		}
		ok = it.Next()
	}
	return it.Err("iterate device history")
}

// HistIdentitiesOf calls fn with the kind and identity of every stored
// device-history record of customer (all three kinds, kind by kind, in key
// order), until fn returns false. id is the identity after the customer,
// as the record key holds it: the device id, the account hash (16 bytes)
// or the address (16 bytes, IPv4 mapped); it is valid only during the
// call. A key whose identity does not parse is skipped.
//
// It seeks to the customer's keys of each kind (one prefix scan per kind),
// so it reads only that customer's keys, never another's and never a
// value: the cost follows the customer's record count, not the store's.
// fn runs while the iteration is open; writes made meanwhile may or may
// not be seen.
func (d *DB) HistIdentitiesOf(customer string, fn func(kind HistKind, id []byte) bool) error {
	if err := validCustomer(customer); err != nil {
		return err
	}
	if err := d.settleHist(); err != nil {
		return err
	}
	for _, kind := range []HistKind{HistKindCustomerDevice, HistKindAccount, HistKindAddress} {
		lo := appendCustomer([]byte{prefixHist, byte(kind)}, customer)
		more, err := d.histIdentities(kind, lo, fn)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// histIdentities is HistIdentitiesOf for one kind's prefix lo; more is
// false once fn stopped.
func (d *DB) histIdentities(kind HistKind, lo []byte, fn func(HistKind, []byte) bool) (more bool, err error) {
	it, err := d.newIter(lo, prefixEnd(lo))
	if err != nil {
		return false, err
	}
	defer it.Close()
	more = true
	for ok := it.First(); ok && more; ok = it.Next() {
		id := it.Key()[len(lo):]
		switch kind {
		case HistKindCustomerDevice:
			if validDevice(string(id)) != nil { // no allocation: the conversion does not escape
				continue
			}
		default:
			if len(id) != 16 {
				continue
			}
		}
		more = fn(kind, id)
	}
	return more, it.Err("iterate device history of a customer")
}
