package storage

import (
	"encoding/binary"
	"fmt"
	"time"
)

// Delivery is one webhook delivery attempt (the webhook actor's log). Keys are
// prefixDelivery + account id + 0x00 + 8-byte big-endian Unix nanoseconds of
// the attempt + event id + attempt number, so one account's records are
// contiguous and time-ordered: a reverse scan of the account lists newest
// first, and both the per-account cap and the 30-day retention are range
// deletes. Account ids never contain a 0x00 byte.
type Delivery struct {
	Account    string
	EventID    string
	Event      string // threat.detected or test
	Attempt    int    // 1-based
	EventAt    time.Time
	At         time.Time // attempt start (service clock)
	Duration   time.Duration
	URL        string
	StatusCode int    // HTTP status; 0 when no response arrived
	Error      string // why the attempt failed; empty on a 2xx
	NextAt     time.Time
}

const deliveryVersion = 1

// MarshalDelivery appends the binary form of d.
func MarshalDelivery(dst []byte, d *Delivery) []byte {
	dst = append(dst, deliveryVersion)
	dst = appendString(dst, d.Account)
	dst = appendString(dst, d.EventID)
	dst = appendString(dst, d.Event)
	dst = appendUvarint(dst, uint64(d.Attempt))
	dst = appendTime(dst, d.EventAt)
	dst = appendTime(dst, d.At)
	dst = appendUvarint(dst, uint64(max(d.Duration, 0)))
	dst = appendString(dst, d.URL)
	dst = appendUvarint(dst, uint64(d.StatusCode))
	dst = appendString(dst, d.Error)
	dst = appendTime(dst, d.NextAt)
	return dst
}

// UnmarshalDelivery decodes MarshalDelivery output.
func UnmarshalDelivery(b []byte) (*Delivery, error) {
	r := &reader{b: b}
	if v := r.byte1(); r.err == nil && v != deliveryVersion {
		return nil, fmt.Errorf("delivery record version %d: %w", v, errCorrupt)
	}
	d := &Delivery{Account: r.string(), EventID: r.string(), Event: r.string(), Attempt: int(r.uvarint()),
		EventAt: r.time(), At: r.time(), Duration: time.Duration(r.uvarint()), URL: r.string(),
		StatusCode: int(r.uvarint()), Error: r.string(), NextAt: r.time()}
	r.end()
	if r.err != nil {
		return nil, fmt.Errorf("decode delivery: %w", r.err)
	}
	if d.Duration < 0 { // past int64: never written by MarshalDelivery
		return nil, fmt.Errorf("decode delivery: duration: %w", errCorrupt)
	}
	return d, nil
}

// deliveryPrefix is the start of one account's records.
func deliveryPrefix(dst []byte, account string) []byte {
	return accountPrefix(dst, prefixDelivery, account)
}

// deliveryAt is the first key of account at or after t.
func deliveryAt(account string, t time.Time) []byte { return accountAt(prefixDelivery, account, t) }

func deliveryKey(d *Delivery) []byte {
	k := deliveryPrefix(make([]byte, 0, len(d.Account)+11+len(d.EventID)), d.Account)
	k = binary.BigEndian.AppendUint64(k, uint64(d.At.UnixNano()))
	k = append(k, d.EventID...)
	return append(k, byte(d.Attempt))
}

// deliveryEnd is the first key after every record of account.
func deliveryEnd(account string) []byte { return accountEnd(prefixDelivery, account) }

// commitNoSync applies a batch without waiting for fsync. Delivery logs are
// a dashboard view, not state users pay for, so nobody waits for the disk;
// but an unsynced commit sits in Pebble's WAL buffer, in this process's
// memory, until a sync writes it, so it must be marked for the group sync
// (commitBehind) or a crash could lose it however long ago it was made.
func (d *DB) commitNoSync(b batch) error { return d.commitBehind(b) }

// PutDelivery records one delivery attempt.
func (d *DB) PutDelivery(rec *Delivery) error {
	b := d.newBatch()
	_ = b.Set(deliveryKey(rec), MarshalDelivery(nil, rec), nil)
	return d.commitNoSync(b)
}

// Deliveries returns up to limit of account's records made at or after
// since, newest first.
func (d *DB) Deliveries(account string, since time.Time, limit int) ([]*Delivery, error) {
	lo := deliveryPrefix(nil, account)
	if !since.IsZero() {
		lo = deliveryAt(account, since)
	}
	it, err := d.newIter(lo, deliveryEnd(account))
	if err != nil {
		return nil, err
	}
	defer it.Close()
	out := []*Delivery{}
	for ok := it.Last(); ok && len(out) < limit; ok = it.Prev() {
		v, err := it.Value()
		if err != nil {
			break
		}
		rec, err := UnmarshalDelivery(v)
		if err != nil {
			return nil, fmt.Errorf("delivery %x: %w", it.Key(), err)
		}
		out = append(out, rec)
	}
	if err := it.Err("iterate deliveries"); err != nil {
		return nil, err
	}
	return out, nil
}

// TrimDeliveries keeps only account's keep newest records, deleting the rest
// in one range delete.
func (d *DB) TrimDeliveries(account string, keep int) error {
	lo := deliveryPrefix(nil, account)
	it, err := d.newIter(lo, deliveryEnd(account))
	if err != nil {
		return err
	}
	var cut []byte
	n := 0
	for ok := it.Last(); ok; ok = it.Prev() {
		if n++; n == keep {
			cut = append([]byte(nil), it.Key()...)
			break
		}
	}
	err = it.Err("iterate deliveries")
	it.Close()
	if err != nil {
		return err
	}
	if cut == nil {
		return nil
	}
	b := d.newBatch()
	_ = b.DeleteRange(lo, cut, nil)
	return d.commitNoSync(b)
}

// PruneDeliveries deletes every account's records made before before: one
// seek and one range delete per account that has records, never a scan of
// the records themselves.
func (d *DB) PruneDeliveries(before time.Time) error {
	return d.pruneAccounts(prefixDelivery, before, d.commitNoSync)
}
