package storage

import (
	"bytes"
	"fmt"
	"time"
)

// PendingHook is a webhook event whose delivery has not finished, so that a
// restart resumes it on the same schedule (SPEC §6: up to 3 attempts, about 1
// and 8 minutes apart). The webhook actor writes it when the event is queued
// and after each failed attempt that will be retried, and deletes it when the
// delivery ends (a 2xx, the last failed attempt, or no receiver any more).
// Keys are prefixHookPending + account id + 0x00 + event id: one account's
// records are contiguous. Account ids never contain a 0x00 byte.
type PendingHook struct {
	Account  string
	EventID  string
	Event    string    // threat.detected or test
	Attempts int       // attempts finished so far
	Due      time.Time // service-clock time the next attempt may start; zero: at once
	// The event as the evaluation saw it (the payload is rendered from it at
	// every attempt, with the URL current at that moment).
	EventAt    time.Time
	IP         string
	ThreatType string
	Country    string // "" reads null
	Flags      HookFlags
	Decision   string
	// RuleMatched and ExceptionMatched read null when empty.
	RuleMatched      []string
	ExceptionMatched []string
}

// HookFlags are the boolean details of a webhook payload, one bit each.
type HookFlags uint16

// The bits of HookFlags. Append only: a bit, once used, keeps its meaning.
const (
	HookVPN HookFlags = 1 << iota
	HookProxied
	HookTor
	HookDCH
	HookBot
	HookTampering
	HookAntidetect
	HookVirtualMachine
	HookPrivacyRelay
)

const pendingHookVersion = 1

// MaxPendingHookField bounds every string of a pending webhook record, and
// the lists hold at most this many entries; a record past either is refused
// on write and reported corrupt on read.
const MaxPendingHookField = 4096

// MarshalPendingHook appends the binary form of p.
func MarshalPendingHook(dst []byte, p *PendingHook) []byte {
	dst = append(dst, pendingHookVersion)
	dst = appendString(dst, p.Account)
	dst = appendString(dst, p.EventID)
	dst = appendString(dst, p.Event)
	dst = appendUvarint(dst, uint64(max(p.Attempts, 0)))
	dst = appendTime(dst, p.Due)
	dst = appendTime(dst, p.EventAt)
	dst = appendString(dst, p.IP)
	dst = appendString(dst, p.ThreatType)
	dst = appendString(dst, p.Country)
	dst = appendUvarint(dst, uint64(p.Flags))
	dst = appendString(dst, p.Decision)
	dst = appendStrings(dst, p.RuleMatched)
	dst = appendStrings(dst, p.ExceptionMatched)
	return dst
}

// UnmarshalPendingHook decodes MarshalPendingHook output. It never panics on
// any input: a stored record is outside input too (see FuzzUnmarshalPendingHook).
func UnmarshalPendingHook(b []byte) (*PendingHook, error) {
	r := &reader{b: b}
	if v := r.byte1(); r.err == nil && v != pendingHookVersion {
		return nil, fmt.Errorf("pending webhook record version %d: %w", v, errCorrupt)
	}
	p := &PendingHook{Account: r.string(), EventID: r.string(), Event: r.string()}
	attempts := r.uvarint()
	p.Due, p.EventAt = r.time(), r.time()
	p.IP, p.ThreatType, p.Country = r.string(), r.string(), r.string()
	flags := r.uvarint()
	p.Decision = r.string()
	p.RuleMatched, p.ExceptionMatched = r.strings(), r.strings()
	switch {
	case r.err != nil:
		return nil, fmt.Errorf("decode pending webhook record: %w", r.err)
	case len(r.b) != 0:
		return nil, fmt.Errorf("pending webhook record: %d trailing bytes: %w", len(r.b), errCorrupt)
	case attempts > 1<<16 || flags > 0xffff:
		return nil, fmt.Errorf("pending webhook record: attempts %d flags %#x: %w", attempts, flags, errCorrupt)
	case p.Account == "" || p.EventID == "" || bytes.IndexByte([]byte(p.Account), 0) >= 0:
		return nil, fmt.Errorf("pending webhook record without account or event id: %w", errCorrupt)
	case pendingHookTooBig(p):
		return nil, fmt.Errorf("pending webhook record past its bounds: %w", errCorrupt)
	}
	p.Attempts, p.Flags = int(attempts), HookFlags(flags)
	return p, nil
}

func pendingHookTooBig(p *PendingHook) bool {
	for _, s := range [...]string{p.Account, p.EventID, p.Event, p.IP, p.ThreatType, p.Country, p.Decision} {
		if len(s) > MaxPendingHookField {
			return true
		}
	}
	return len(p.RuleMatched) > MaxPendingHookField || len(p.ExceptionMatched) > MaxPendingHookField
}

func pendingHookKey(account, eventID string) []byte {
	k := make([]byte, 0, 2+len(account)+len(eventID))
	k = append(k, prefixHookPending)
	k = append(k, account...)
	k = append(k, 0)
	return append(k, eventID...)
}

// PutPendingHook stores (or replaces) p. Like the device history it is
// written behind: it is in the WAL, in this process's memory, until the
// next group sync, so a crash (kill -9 included) may lose the records of
// the last Options.SyncInterval, as it may lose counts.
func (d *DB) PutPendingHook(p *PendingHook) error {
	b, err := d.pendingHookBatch(p)
	if err != nil {
		return err
	}
	return d.commitBehind(b)
}

// PutPendingHookSynced stores (or replaces) p and syncs it before it
// returns: for an event whose storing is acknowledged (the operator's test
// event, whose 202 promises that a restart, even after a crash, resumes
// it). Rare, so the fsync is affordable.
func (d *DB) PutPendingHookSynced(p *PendingHook) error {
	b, err := d.pendingHookBatch(p)
	if err != nil {
		return err
	}
	return d.commit(b)
}

// pendingHookBatch is a batch that stores p, once p is checked.
func (d *DB) pendingHookBatch(p *PendingHook) (batch, error) {
	if p.Account == "" || p.EventID == "" || bytes.IndexByte([]byte(p.Account), 0) >= 0 || pendingHookTooBig(p) {
		return batch{}, fmt.Errorf("pending webhook record for %q/%q: invalid", p.Account, p.EventID)
	}
	b := d.newBatch()
	_ = b.Set(pendingHookKey(p.Account, p.EventID), MarshalPendingHook(nil, p), nil)
	return b, nil
}

// DeletePendingHook removes the record of account's event (none is fine).
func (d *DB) DeletePendingHook(account, eventID string) error {
	b := d.newBatch()
	_ = b.Delete(pendingHookKey(account, eventID), nil)
	return d.commitBehind(b)
}

// PendingHooks calls fn with every pending webhook record, ordered by
// account. A record that does not decode stops the walk with an error naming
// its key: the service cannot vouch for the deliveries it would resume.
func (d *DB) PendingHooks(fn func(*PendingHook) error) error {
	it, err := d.newIter([]byte{prefixHookPending}, []byte{prefixHookPending + 1})
	if err != nil {
		return err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.Value()
		if err != nil {
			return err
		}
		p, err := UnmarshalPendingHook(v)
		if err != nil {
			return fmt.Errorf("pending webhook record %x: %w", it.Key(), err)
		}
		if !bytes.Equal(it.Key(), pendingHookKey(p.Account, p.EventID)) {
			return fmt.Errorf("pending webhook record %x holds %s/%s: %w", it.Key(), p.Account, p.EventID, errCorrupt)
		}
		if err := fn(p); err != nil {
			return err
		}
	}
	return it.Err("iterate pending webhooks")
}
