package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
)

// Adopted shares are cluster mode's answer to a member that leaves for good:
// each node persists only the counts it charged (its share of a G-counter,
// docs/cluster.md), so a leaver hands its shares to the remaining members
// before it goes, and they keep them under the leaver's id. A count is the
// per-origin maximum of every copy, then the sum over origins, so a copy
// held twice, handed over again, or met again when the leaver returns with
// its data dir is never counted twice.
//
// Keys:
//   - prefixAdoptedUsage | uvarint(len account) | account | month (4 bytes
//     big-endian) | origin → MarshalMonthCounts
//   - prefixAdoptedTotals | uvarint(len account) | account | origin →
//     MarshalTotals
//
// One account's month (or totals) keys are contiguous, so reading every
// origin's share of it is one short range.

// OriginShare is one member's share of an account's counts: its counts of
// one month (zero when it held none) and its lifetime totals.
type OriginShare struct {
	Origin  string
	Account string
	// Month is the month Counts belong to; 0 with Counts zero for an
	// account of which only lifetime totals are shared.
	Month  Month
	Counts MonthCounts
	Totals Totals
}

func adoptedUsageKey(dst []byte, account string, m Month, origin string) []byte {
	dst = append(dst, prefixAdoptedUsage)
	dst = appendString(dst, account)
	dst = binary.BigEndian.AppendUint32(dst, uint32(m))
	return append(dst, origin...)
}

func adoptedTotalsKey(dst []byte, account, origin string) []byte {
	dst = append(dst, prefixAdoptedTotals)
	dst = appendString(dst, account)
	return append(dst, origin...)
}

// AdoptShares stores shares other members handed over, keeping per field the
// larger of what is stored and what arrives (a repeated or older hand-over
// changes nothing), and syncs before returning: the member that handed them
// over is about to stop. Shares naming no origin or no account are refused
// whole.
func (d *DB) AdoptShares(shares []OriginShare) error {
	for _, s := range shares {
		if s.Origin == "" || s.Account == "" || (s.Month != 0 && (s.Month%100 < 1 || s.Month%100 > 12)) ||
			s.Counts.Used < 0 || s.Counts.Lookups < 0 || s.Totals.Evaluations < 0 || s.Totals.LimitHits < 0 ||
			s.Totals.HourWarned[0] < 0 || s.Totals.HourWarned[1] < 0 {
			return fmt.Errorf("adopt share of %q from %q month %d: %w", s.Account, s.Origin, s.Month, errInvalidShare)
		}
	}
	if len(shares) == 0 {
		return nil
	}
	// The same key twice in one batch would read the stored value both
	// times; fold duplicates first.
	months := map[string]MonthCounts{}
	totals := map[string]Totals{}
	for _, s := range shares {
		if s.Month != 0 {
			k := string(adoptedUsageKey(nil, s.Account, s.Month, s.Origin))
			months[k] = maxCounts(months[k], s.Counts)
		}
		k := string(adoptedTotalsKey(nil, s.Account, s.Origin))
		totals[k] = maxTotals(totals[k], s.Totals)
	}
	b := d.newBatch()
	var val []byte
	for k, c := range months {
		cur, err := d.monthCounts([]byte(k))
		if err != nil {
			b.Close()
			return fmt.Errorf("adopt shares: %w", err)
		}
		val = MarshalMonthCounts(val[:0], maxCounts(cur, c))
		_ = b.Set([]byte(k), val, nil)
	}
	for k, t := range totals {
		cur, err := d.totals([]byte(k))
		if err != nil {
			b.Close()
			return fmt.Errorf("adopt shares: %w", err)
		}
		val = MarshalTotals(val[:0], maxTotals(cur, t))
		_ = b.Set([]byte(k), val, nil)
	}
	if err := d.commit(b); err != nil {
		return fmt.Errorf("adopt shares: %w", err)
	}
	return nil
}

var errInvalidShare = errors.New("invalid share")

func maxCounts(a, b MonthCounts) MonthCounts {
	return MonthCounts{Used: max(a.Used, b.Used), Lookups: max(a.Lookups, b.Lookups), Warned: a.Warned | b.Warned}
}

func maxTotals(a, b Totals) Totals {
	return Totals{Evaluations: max(a.Evaluations, b.Evaluations), LimitHits: max(a.LimitHits, b.LimitHits),
		HourWarned: maxHourWarned(a.HourWarned, b.HourWarned)}
}

// AdoptedShares reads every origin's adopted share of account: its counts of
// month m and its lifetime totals, sorted by origin.
func (d *DB) AdoptedShares(account string, m Month) ([]OriginShare, error) {
	byOrigin := map[string]*OriginShare{}
	get := func(origin string) *OriginShare {
		s := byOrigin[origin]
		if s == nil {
			s = &OriginShare{Origin: origin, Account: account, Month: m}
			byOrigin[origin] = s
		}
		return s
	}
	lo := adoptedUsageKey(nil, account, m, "")
	if err := d.scanValues(lo, prefixEnd(lo), func(k, v []byte) error {
		c, err := UnmarshalMonthCounts(v)
		if err != nil {
			return err
		}
		get(string(k[len(lo):])).Counts = c
		return nil
	}); err != nil {
		return nil, fmt.Errorf("adopted shares of %q: %w", account, err)
	}
	lo = adoptedTotalsKey(nil, account, "")
	if err := d.scanValues(lo, prefixEnd(lo), func(k, v []byte) error {
		t, err := UnmarshalTotals(v)
		if err != nil {
			return err
		}
		get(string(k[len(lo):])).Totals = t
		return nil
	}); err != nil {
		return nil, fmt.Errorf("adopted shares of %q: %w", account, err)
	}
	out := make([]OriginShare, 0, len(byOrigin))
	for _, s := range byOrigin {
		if s.Origin != "" {
			out = append(out, *s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Origin < out[j].Origin })
	return out, nil
}

// ExportShares calls fn with every share this node holds for the months
// given: its own (origin self: what it charged, from the usage and totals
// records) and every share it adopted, each with its origin. An account of
// which the node holds lifetime totals but no counts of those months comes
// once with Month 0. A leaving member hands this to the others.
func (d *DB) ExportShares(self string, months []Month, fn func(OriginShare) error) error {
	want := map[Month]bool{}
	for _, m := range months {
		want[m] = true
	}
	// Own counts: prefixUsage | len | account | month.
	seen := map[string]bool{}
	totalsOf := func(account string) (Totals, error) { return d.totals(totalsKey(nil, account)) }
	if err := d.scanValues([]byte{prefixUsage}, []byte{prefixUsage + 1}, func(k, v []byte) error {
		r := &reader{b: k[1:]}
		account := r.string()
		if r.err != nil || len(r.b) != 4 {
			return fmt.Errorf("usage key %x: %w", k, errCorrupt)
		}
		m := Month(binary.BigEndian.Uint32(r.b))
		if !want[m] {
			return nil
		}
		c, err := UnmarshalMonthCounts(v)
		if err != nil {
			return err
		}
		t, err := totalsOf(account)
		if err != nil {
			return err
		}
		seen[account] = true
		return fn(OriginShare{Origin: self, Account: account, Month: m, Counts: c, Totals: t})
	}); err != nil {
		return fmt.Errorf("export shares: %w", err)
	}
	if err := d.scanValues([]byte{prefixTotals}, []byte{prefixTotals + 1}, func(k, v []byte) error {
		account := string(k[1:])
		if seen[account] {
			return nil
		}
		t, err := UnmarshalTotals(v)
		if err != nil {
			return err
		}
		return fn(OriginShare{Origin: self, Account: account, Totals: t})
	}); err != nil {
		return fmt.Errorf("export shares: %w", err)
	}
	// Adopted counts and totals: the origin follows the account (and month).
	type ref struct{ account, origin string }
	sent := map[ref]bool{}
	if err := d.scanValues([]byte{prefixAdoptedUsage}, []byte{prefixAdoptedUsage + 1}, func(k, v []byte) error {
		r := &reader{b: k[1:]}
		account := r.string()
		if r.err != nil || len(r.b) < 4 {
			return fmt.Errorf("adopted usage key %x: %w", k, errCorrupt)
		}
		m, origin := Month(binary.BigEndian.Uint32(r.b)), string(r.b[4:])
		if !want[m] {
			return nil
		}
		c, err := UnmarshalMonthCounts(v)
		if err != nil {
			return err
		}
		t, err := d.totals(adoptedTotalsKey(nil, account, origin))
		if err != nil {
			return err
		}
		sent[ref{account, origin}] = true
		return fn(OriginShare{Origin: origin, Account: account, Month: m, Counts: c, Totals: t})
	}); err != nil {
		return fmt.Errorf("export shares: %w", err)
	}
	if err := d.scanValues([]byte{prefixAdoptedTotals}, []byte{prefixAdoptedTotals + 1}, func(k, v []byte) error {
		r := &reader{b: k[1:]}
		account := r.string()
		if r.err != nil {
			return fmt.Errorf("adopted totals key %x: %w", k, errCorrupt)
		}
		origin := string(r.b)
		if sent[ref{account, origin}] {
			return nil
		}
		t, err := UnmarshalTotals(v)
		if err != nil {
			return err
		}
		return fn(OriginShare{Origin: origin, Account: account, Totals: t})
	}); err != nil {
		return fmt.Errorf("export shares: %w", err)
	}
	return nil
}

// scanValues calls fn with each key and value in [lo, hi); fn must not keep
// them.
func (d *DB) scanValues(lo, hi []byte, fn func(k, v []byte) error) error {
	it, err := d.newIter(lo, hi)
	if err != nil {
		return err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.Value()
		if err != nil {
			return it.Err("iterate")
		}
		if err := fn(it.Key(), v); err != nil {
			return err
		}
	}
	return it.Err("iterate")
}
