package storage

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// Mail is one outbox record: every email the service sent or tried to send.
// Keys are prefixMail + 8-byte big-endian Unix nanoseconds + id, so a reverse
// scan lists newest first and retention is one range delete.
type Mail struct {
	ID      string
	At      time.Time
	Account string
	To      string
	Kind    string // e.g. usage_hourly_80, webhook_failures
	Subject string
	Body    string
	Status  string // recorded (no SMTP), sent, failed
	Error   string // why sending failed
}

const mailVersion = 1

// MarshalMail appends the binary form of m.
func MarshalMail(dst []byte, m *Mail) []byte {
	dst = append(dst, mailVersion)
	dst = appendString(dst, m.ID)
	dst = appendTime(dst, m.At)
	dst = appendString(dst, m.Account)
	dst = appendString(dst, m.To)
	dst = appendString(dst, m.Kind)
	dst = appendString(dst, m.Subject)
	dst = appendString(dst, m.Body)
	dst = appendString(dst, m.Status)
	dst = appendString(dst, m.Error)
	return dst
}

// UnmarshalMail decodes MarshalMail output.
func UnmarshalMail(b []byte) (*Mail, error) {
	r := &reader{b: b}
	if v := r.byte1(); r.err == nil && v != mailVersion {
		return nil, fmt.Errorf("mail record version %d: %w", v, errCorrupt)
	}
	m := &Mail{ID: r.string(), At: r.time(), Account: r.string(), To: r.string(), Kind: r.string(),
		Subject: r.string(), Body: r.string(), Status: r.string(), Error: r.string()}
	r.end()
	if r.err != nil {
		return nil, fmt.Errorf("decode mail: %w", r.err)
	}
	return m, nil
}

func mailKey(at time.Time, id string) []byte {
	k := make([]byte, 0, 9+len(id))
	k = append(k, prefixMail)
	k = binary.BigEndian.AppendUint64(k, uint64(at.UnixNano()))
	return append(k, id...)
}

// PutMail stores (or updates, same At and ID) an outbox record durably.
func (d *DB) PutMail(m *Mail) error {
	b := d.newBatch()
	_ = b.Set(mailKey(m.At, m.ID), MarshalMail(nil, m), nil)
	return d.commit(b)
}

// RecentMail returns up to limit outbox records, newest first.
func (d *DB) RecentMail(limit int) ([]*Mail, error) { return d.recentMail("", limit) }

// RecentMailOf returns up to limit outbox records of one account, newest
// first, however many of other accounts' are newer (it reads past them: the
// outbox keeps 90 days).
func (d *DB) RecentMailOf(account string, limit int) ([]*Mail, error) {
	if account == "" {
		return nil, nil
	}
	return d.recentMail(account, limit)
}

// recentMail lists the newest records, of account only unless it is "".
func (d *DB) recentMail(account string, limit int) ([]*Mail, error) {
	return d.mailFrom([]byte{prefixMail}, account, limit)
}

// mailFrom lists the records from key lower on, newest first, at most limit,
// of account only unless it is "".
func (d *DB) mailFrom(lower []byte, account string, limit int) ([]*Mail, error) {
	it, err := d.newIter(lower, []byte{prefixMail + 1})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []*Mail
	for ok := it.Last(); ok && len(out) < limit; ok = it.Prev() {
		v, err := it.Value()
		if err != nil {
			break
		}
		m, err := UnmarshalMail(v)
		if err != nil {
			return nil, fmt.Errorf("mail %x: %w", it.Key(), err)
		}
		if account == "" || m.Account == account {
			out = append(out, m)
		}
	}
	if err := it.Err("iterate mail"); err != nil {
		return nil, err
	}
	return out, nil
}

// PruneMail deletes outbox records older than before, in one range delete.
func (d *DB) PruneMail(before time.Time) error {
	b := d.newBatch()
	_ = b.DeleteRange([]byte{prefixMail}, mailKey(before, ""), nil)
	return d.commit(b)
}

// MailOfSince returns account's outbox records written at or after since,
// newest first. It reads only the records since then (keys are ordered by
// time), so a look back over a day or a month does not scan the 90 days.
func (d *DB) MailOfSince(account string, since time.Time) ([]*Mail, error) {
	return d.mailFrom(mailKey(since, ""), account, math.MaxInt)
}
