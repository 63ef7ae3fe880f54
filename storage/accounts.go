package storage

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// ErrExists is returned when creating an account whose email is taken.
var ErrExists = errors.New("already exists")

// KeyRecord is one API key as stored: never the key itself, only its keyed hash
// (HMAC-SHA256 with the server pepper) and what the operator may see of it.
type KeyRecord struct {
	Hash       [32]byte
	Prefix     string    // "sk_live_" or "sk_test_"
	Last4      string    // last four characters, for display
	Generation uint32    // bumps on every rotation; OAuth tokens bind to it
	CreatedAt  time.Time // when the key was issued
	ValidUntil time.Time // end of grace for a previous live key; zero = no end
}

// Account is the stored account record.
type Account struct {
	ID                 string
	Email              string
	Plan               string
	CreatedAt          time.Time
	HourlyLimit        *int64 // custom plans; nil = none
	MonthlyLimit       *int64 // custom plans; nil = none
	Suspended          bool
	Allowlist          []string // IPs/CIDRs in canonical prefix form
	Origins            []string
	DeviceEvidenceBeta bool
	WebhookURL         string
	WebhookSecret      []byte // sealed by the caller; storage never sees it in clear
	PublishableKey     string // public by design (pk_live_…)
	Live               KeyRecord
	PrevLive           *KeyRecord // previous live key while in grace, else nil
	Test               KeyRecord
}

// Rule maps a signal to an action (ADMIN.md); stored as the operator wrote it.
type Rule struct {
	Signal string
	Action string
}

// Pin is an exception pin by IP/CIDR or visitor id.
type Pin struct {
	IP        string // canonical prefix form, or ""
	VisitorID string // or ""
	Action    string
	Label     string
}

const accountVersion = 1

// MarshalAccount appends the binary form of a to dst.
func MarshalAccount(dst []byte, a *Account) []byte {
	dst = append(dst, accountVersion)
	dst = appendString(dst, a.ID)
	dst = appendString(dst, a.Email)
	dst = appendString(dst, a.Plan)
	dst = appendTime(dst, a.CreatedAt)
	dst = appendOptInt(dst, a.HourlyLimit)
	dst = appendOptInt(dst, a.MonthlyLimit)
	dst = appendBool(dst, a.Suspended)
	dst = appendStrings(dst, a.Allowlist)
	dst = appendStrings(dst, a.Origins)
	dst = appendBool(dst, a.DeviceEvidenceBeta)
	dst = appendString(dst, a.WebhookURL)
	dst = appendBytes(dst, a.WebhookSecret)
	dst = appendString(dst, a.PublishableKey)
	dst = appendKey(dst, &a.Live)
	dst = appendBool(dst, a.PrevLive != nil)
	if a.PrevLive != nil {
		dst = appendKey(dst, a.PrevLive)
	}
	dst = appendKey(dst, &a.Test)
	return dst
}

func appendKey(dst []byte, k *KeyRecord) []byte {
	dst = append(dst, k.Hash[:]...)
	dst = appendString(dst, k.Prefix)
	dst = appendString(dst, k.Last4)
	dst = appendUvarint(dst, uint64(k.Generation))
	dst = appendTime(dst, k.CreatedAt)
	dst = appendTime(dst, k.ValidUntil)
	return dst
}

// UnmarshalAccount decodes a record written by MarshalAccount.
func UnmarshalAccount(b []byte) (*Account, error) {
	r := &reader{b: b}
	if v := r.byte1(); r.err == nil && v != accountVersion {
		return nil, fmt.Errorf("account record version %d: %w", v, errCorrupt)
	}
	a := &Account{}
	a.ID = r.string()
	a.Email = r.string()
	a.Plan = r.string()
	a.CreatedAt = r.time()
	a.HourlyLimit = r.optInt()
	a.MonthlyLimit = r.optInt()
	a.Suspended = r.bool()
	a.Allowlist = r.strings()
	a.Origins = r.strings()
	a.DeviceEvidenceBeta = r.bool()
	a.WebhookURL = r.string()
	a.WebhookSecret = r.bytes()
	a.PublishableKey = r.string()
	r.key(&a.Live)
	if r.bool() {
		a.PrevLive = &KeyRecord{}
		r.key(a.PrevLive)
	}
	r.key(&a.Test)
	r.end()
	if r.err != nil {
		return nil, fmt.Errorf("decode account: %w", r.err)
	}
	return a, nil
}

func (r *reader) key(k *KeyRecord) {
	if r.err != nil {
		return
	}
	if len(r.b) < 32 {
		r.err = errCorrupt
		return
	}
	copy(k.Hash[:], r.b[:32])
	r.b = r.b[32:]
	k.Prefix = r.string()
	k.Last4 = r.string()
	k.Generation = uint32(r.uvarintMax(math.MaxUint32))
	k.CreatedAt = r.time()
	k.ValidUntil = r.time()
}

func accountKey(id string) []byte { return append([]byte{prefixAccount}, id...) }

func emailKey(email string) []byte {
	return append([]byte{prefixEmail}, strings.ToLower(email)...)
}

// CreateAccount stores a new account and claims its email, durably. It fails
// with ErrExists when the email (case-insensitive) is taken.
func (d *DB) CreateAccount(a *Account) error {
	_, err := d.get(emailKey(a.Email))
	switch {
	case err == nil:
		return ErrExists
	case !errors.Is(err, ErrNotFound):
		return err
	}
	b := d.newBatch()
	_ = b.Set(accountKey(a.ID), MarshalAccount(nil, a), nil)
	_ = b.Set(emailKey(a.Email), []byte(a.ID), nil)
	return d.commit(b)
}

// PutAccount overwrites an existing account record durably.
func (d *DB) PutAccount(a *Account) error {
	b := d.newBatch()
	_ = b.Set(accountKey(a.ID), MarshalAccount(nil, a), nil)
	return d.commit(b)
}

// GetAccount reads one account.
func (d *DB) GetAccount(id string) (*Account, error) {
	v, err := d.get(accountKey(id))
	if err != nil {
		return nil, err
	}
	return UnmarshalAccount(v)
}

// Accounts calls fn for every stored account, in id order. Start-up code uses
// it to build the in-memory key directory once.
func (d *DB) Accounts(fn func(*Account) error) error {
	it, err := d.newIter([]byte{prefixAccount}, []byte{prefixAccount + 1})
	if err != nil {
		return err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.Value()
		if err != nil {
			break
		}
		a, err := UnmarshalAccount(v)
		if err != nil {
			return fmt.Errorf("account %q: %w", it.Key()[1:], err)
		}
		if err := fn(a); err != nil {
			return err
		}
	}
	return it.Err("iterate accounts")
}

const policyVersion = 1

// MarshalRules appends the binary form of a rule set.
func MarshalRules(dst []byte, rules []Rule) []byte {
	dst = append(dst, policyVersion)
	dst = appendUvarint(dst, uint64(len(rules)))
	for _, r := range rules {
		dst = appendString(dst, r.Signal)
		dst = appendString(dst, r.Action)
	}
	return dst
}

// UnmarshalRules decodes MarshalRules output.
func UnmarshalRules(b []byte) ([]Rule, error) {
	r := &reader{b: b}
	if v := r.byte1(); r.err == nil && v != policyVersion {
		return nil, fmt.Errorf("rules version %d: %w", v, errCorrupt)
	}
	n := r.uvarint()
	if n > uint64(len(b)) {
		return nil, fmt.Errorf("decode rules: %w", errCorrupt)
	}
	out := make([]Rule, 0, n)
	for i := uint64(0); i < n && r.err == nil; i++ {
		out = append(out, Rule{Signal: r.string(), Action: r.string()})
	}
	r.end()
	if r.err != nil {
		return nil, fmt.Errorf("decode rules: %w", r.err)
	}
	return out, nil
}

// MarshalPins appends the binary form of a pin set.
func MarshalPins(dst []byte, pins []Pin) []byte {
	dst = append(dst, policyVersion)
	dst = appendUvarint(dst, uint64(len(pins)))
	for _, p := range pins {
		dst = appendString(dst, p.IP)
		dst = appendString(dst, p.VisitorID)
		dst = appendString(dst, p.Action)
		dst = appendString(dst, p.Label)
	}
	return dst
}

// UnmarshalPins decodes MarshalPins output.
func UnmarshalPins(b []byte) ([]Pin, error) {
	r := &reader{b: b}
	if v := r.byte1(); r.err == nil && v != policyVersion {
		return nil, fmt.Errorf("pins version %d: %w", v, errCorrupt)
	}
	n := r.uvarint()
	if n > uint64(len(b)) {
		return nil, fmt.Errorf("decode pins: %w", errCorrupt)
	}
	out := make([]Pin, 0, n)
	for i := uint64(0); i < n && r.err == nil; i++ {
		out = append(out, Pin{IP: r.string(), VisitorID: r.string(), Action: r.string(), Label: r.string()})
	}
	r.end()
	if r.err != nil {
		return nil, fmt.Errorf("decode pins: %w", r.err)
	}
	return out, nil
}

// PutRules replaces an account's rule set durably.
func (d *DB) PutRules(id string, rules []Rule) error {
	b := d.newBatch()
	_ = b.Set(append([]byte{prefixRules}, id...), MarshalRules(nil, rules), nil)
	return d.commit(b)
}

// GetRules reads an account's rule set (empty when none was set).
func (d *DB) GetRules(id string) ([]Rule, error) {
	v, err := d.get(append([]byte{prefixRules}, id...))
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return UnmarshalRules(v)
}

// PutPins replaces an account's exception pins durably.
func (d *DB) PutPins(id string, pins []Pin) error {
	b := d.newBatch()
	_ = b.Set(append([]byte{prefixPins}, id...), MarshalPins(nil, pins), nil)
	return d.commit(b)
}

// GetPins reads an account's exception pins (empty when none were set).
func (d *DB) GetPins(id string) ([]Pin, error) {
	v, err := d.get(append([]byte{prefixPins}, id...))
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return UnmarshalPins(v)
}

// ReplaceAccount writes an account with its rules and pins as one durable
// batch, moving its email claim when the email changed from oldEmail (""
// for an account new to this store). Cluster mode installs the records the
// shared configuration holds this way: the store then holds exactly them.
func (d *DB) ReplaceAccount(a *Account, rules []Rule, pins []Pin, oldEmail string) error {
	b := d.newBatch()
	if oldEmail != "" && !strings.EqualFold(oldEmail, a.Email) {
		_ = b.Delete(emailKey(oldEmail), nil)
	}
	_ = b.Set(accountKey(a.ID), MarshalAccount(nil, a), nil)
	_ = b.Set(emailKey(a.Email), []byte(a.ID), nil)
	_ = b.Set(append([]byte{prefixRules}, a.ID...), MarshalRules(nil, rules), nil)
	_ = b.Set(append([]byte{prefixPins}, a.ID...), MarshalPins(nil, pins), nil)
	return d.commit(b)
}

// DeleteAccount removes an account, its email claim, rules and pins as one
// durable batch (cluster mode: the shared configuration no longer holds it).
func (d *DB) DeleteAccount(id, email string) error {
	b := d.newBatch()
	_ = b.Delete(accountKey(id), nil)
	if email != "" {
		_ = b.Delete(emailKey(email), nil)
	}
	_ = b.Delete(append([]byte{prefixRules}, id...), nil)
	_ = b.Delete(append([]byte{prefixPins}, id...), nil)
	return d.commit(b)
}
