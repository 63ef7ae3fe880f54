package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
)

// Month is a UTC calendar month as YYYYMM (202611 = November 2026).
type Month uint32

// MonthOf is the UTC calendar month containing t.
func MonthOf(t time.Time) Month {
	y, m, _ := t.UTC().Date()
	return Month(y*100 + int(m))
}

// Start is 00:00 UTC on the 1st of the month.
func (m Month) Start() time.Time {
	return time.Date(int(m/100), time.Month(m%100), 1, 0, 0, 0, 0, time.UTC)
}

// End is 00:00 UTC on the 1st of the following month (the month's reset).
func (m Month) End() time.Time { return m.Start().AddDate(0, 1, 0) }

// MonthCounts are one account's counters for one month.
type MonthCounts struct {
	Used    int64 // counted visitor checks (month_used)
	Lookups int64 // counted lookups and MCP lookup_ip calls (month_lookups_used)
	Warned  uint8 // usage-warning thresholds already mailed this month (bit set owned by the quota actors)
}

// Totals are one account's lifetime counters.
type Totals struct {
	Evaluations int64 // total_evaluations
	LimitHits   int64 // refused requests (limit_hits)
	// HourWarned are when the hourly usage warnings (80%, then the cap)
	// were last mailed, in Unix nanoseconds (0: never); owned by the quota
	// actors, which send each at most once per 24 hours. Not counters: a
	// delta's are merged by max (the later warning wins), never added.
	HourWarned [2]int64
}

// maxHourWarned is a's and b's hourly warning times, the later of each.
func maxHourWarned(a, b [2]int64) [2]int64 {
	return [2]int64{max(a[0], b[0]), max(a[1], b[1])}
}

// UsageDelta is one change to an account's counters: Counts and Totals are
// added (Warned is OR-ed, HourWarned merged by max) to what is stored for
// Account and Month.
type UsageDelta struct {
	Account string
	Month   Month
	Counts  MonthCounts
	Totals  Totals
	// Day is the UTC day Counts also add to (the console's daily chart);
	// zero adds to no day.
	Day Day
}

// Totals record versions: 1 holds the two counters; 2 adds the hourly
// warning times. A record whose times are both zero is written as version
// 1, byte for byte what the builds before version 2 wrote and read. Both
// decode; a version 1 record reads as "never warned".
const (
	monthCountsVersion = 1
	totalsVersion1     = 1
	totalsVersion      = 2
)

// usageKey is prefixUsage | uvarint(len id) | id | month (4 bytes big-endian).
// The length prefix keeps one account's months contiguous and apart from any
// other id that merely starts with the same bytes.
func usageKey(dst []byte, account string, m Month) []byte {
	dst = append(dst, prefixUsage)
	dst = appendString(dst, account)
	return binary.BigEndian.AppendUint32(dst, uint32(m))
}

// totalsKey is prefixTotals | id.
func totalsKey(dst []byte, account string) []byte {
	dst = append(dst, prefixTotals)
	return append(dst, account...)
}

// MarshalMonthCounts appends the binary form of c: version, used, lookups, warned.
func MarshalMonthCounts(dst []byte, c MonthCounts) []byte {
	dst = append(dst, monthCountsVersion)
	dst = appendUvarint(dst, uint64(max(c.Used, 0)))
	dst = appendUvarint(dst, uint64(max(c.Lookups, 0)))
	return appendUvarint(dst, uint64(c.Warned))
}

// UnmarshalMonthCounts decodes MarshalMonthCounts output.
func UnmarshalMonthCounts(b []byte) (MonthCounts, error) {
	r := &reader{b: b}
	if v := r.byte1(); r.err == nil && v != monthCountsVersion {
		return MonthCounts{}, fmt.Errorf("month counts version %d: %w", v, errCorrupt)
	}
	c := MonthCounts{Used: int64(r.uvarint()), Lookups: int64(r.uvarint())}
	w := r.uvarint()
	r.end()
	if r.err != nil || w > 0xff || c.Used < 0 || c.Lookups < 0 {
		return MonthCounts{}, fmt.Errorf("decode month counts: %w", errCorrupt)
	}
	c.Warned = uint8(w)
	return c, nil
}

// MarshalTotals appends the binary form of t: version, evaluations, limit
// hits, then (version 2, when either is set) the hourly warning times.
func MarshalTotals(dst []byte, t Totals) []byte {
	w0, w1 := max(t.HourWarned[0], 0), max(t.HourWarned[1], 0)
	v := byte(totalsVersion)
	if w0 == 0 && w1 == 0 {
		v = totalsVersion1
	}
	dst = append(dst, v)
	dst = appendUvarint(dst, uint64(max(t.Evaluations, 0)))
	dst = appendUvarint(dst, uint64(max(t.LimitHits, 0)))
	if v == totalsVersion1 {
		return dst
	}
	dst = appendUvarint(dst, uint64(w0))
	return appendUvarint(dst, uint64(w1))
}

// UnmarshalTotals decodes MarshalTotals output, of either version.
func UnmarshalTotals(b []byte) (Totals, error) {
	r := &reader{b: b}
	v := r.byte1()
	if r.err == nil && v != totalsVersion && v != totalsVersion1 {
		return Totals{}, fmt.Errorf("totals version %d: %w", v, errCorrupt)
	}
	t := Totals{Evaluations: int64(r.uvarint()), LimitHits: int64(r.uvarint())}
	if v == totalsVersion {
		t.HourWarned[0] = int64(r.uvarintMax(math.MaxInt64))
		t.HourWarned[1] = int64(r.uvarintMax(math.MaxInt64))
	}
	r.end()
	if r.err != nil || t.Evaluations < 0 || t.LimitHits < 0 {
		return Totals{}, fmt.Errorf("decode totals: %w", errCorrupt)
	}
	return t, nil
}

// LoadUsage reads an account's counters for month m and its lifetime totals.
// Missing records read as zero.
func (d *DB) LoadUsage(account string, m Month) (MonthCounts, Totals, error) {
	c, err := d.monthCounts(usageKey(nil, account, m))
	if err != nil {
		return MonthCounts{}, Totals{}, err
	}
	t, err := d.totals(totalsKey(nil, account))
	if err != nil {
		return MonthCounts{}, Totals{}, err
	}
	return c, t, nil
}

func (d *DB) monthCounts(k []byte) (MonthCounts, error) {
	v, err := d.get(k)
	if errors.Is(err, ErrNotFound) {
		return MonthCounts{}, nil
	}
	if err != nil {
		return MonthCounts{}, err
	}
	return UnmarshalMonthCounts(v)
}

func (d *DB) totals(k []byte) (Totals, error) {
	v, err := d.get(k)
	if errors.Is(err, ErrNotFound) {
		return Totals{}, nil
	}
	if err != nil {
		return Totals{}, err
	}
	return UnmarshalTotals(v)
}

type monthRef struct {
	account string
	month   Month
}

// ApplyUsage adds every delta to the stored counters and commits the result as
// one batch. When it returns nil, all of it is committed (every later read
// sees it) and survives a crash (kill -9, power loss as far as fsync holds):
// at once in Strict mode, which syncs before returning, or once the next
// group sync has run in Interval mode (within Options.SyncInterval). When it
// returns an error, none of it was written. (When the group sync runs late,
// Interval mode syncs before returning too; see catchUp.) Deltas for the
// same account and month are summed first, so each record is read and
// written once per call.
//
// It reads, adds and writes, so calls touching the same accounts must not run
// concurrently: the quota actors' single group committer is the only writer of
// these records.
func (d *DB) ApplyUsage(deltas []UsageDelta) error {
	if len(deltas) == 0 {
		return nil
	}
	months := make(map[monthRef]MonthCounts, len(deltas))
	totals := make(map[string]Totals, len(deltas))
	for i := range deltas {
		u := &deltas[i]
		if u.Counts != (MonthCounts{}) {
			k := monthRef{u.Account, u.Month}
			c := months[k]
			c.Used += u.Counts.Used
			c.Lookups += u.Counts.Lookups
			c.Warned |= u.Counts.Warned
			months[k] = c
		}
		if u.Totals != (Totals{}) {
			t := totals[u.Account]
			t.Evaluations += u.Totals.Evaluations
			t.LimitHits += u.Totals.LimitHits
			t.HourWarned = maxHourWarned(t.HourWarned, u.Totals.HourWarned)
			totals[u.Account] = t
		}
	}
	if len(months) == 0 && len(totals) == 0 {
		return nil
	}
	// Only quota's one committer calls ApplyUsage, never two at once, so
	// a plain Store (no compare-and-swap) marks this call's start for
	// AnswerAhead.
	d.usageSince.Store(d.clock())
	defer d.usageSince.Store(0)
	b := d.newBatch()
	uc := &d.usage
	uc.mu.Lock()
	defer uc.mu.Unlock()
	uc.on(b.h)
	var key, val []byte
	for ref, add := range months {
		key = usageKey(key[:0], ref.account, ref.month)
		cur := uc.month(key)
		var c MonthCounts
		if cur != nil {
			c = *cur
		} else {
			var err error
			if c, err = d.monthCounts(key); err != nil {
				b.Close()
				return fmt.Errorf("apply usage %q %d: %w", ref.account, ref.month, err)
			}
		}
		c.Used = max(c.Used+add.Used, 0)
		c.Lookups = max(c.Lookups+add.Lookups, 0)
		c.Warned |= add.Warned
		val = MarshalMonthCounts(val[:0], c)
		_ = b.Set(key, val, nil) // Set copies key and value into the batch
		uc.stageMonth(key, cur, c)
	}
	for account, add := range totals {
		key = totalsKey(key[:0], account)
		cur := uc.total(key)
		var t Totals
		if cur != nil {
			t = *cur
		} else {
			var err error
			if t, err = d.totals(key); err != nil {
				b.Close()
				return fmt.Errorf("apply usage totals %q: %w", account, err)
			}
		}
		t.Evaluations = max(t.Evaluations+add.Evaluations, 0)
		t.LimitHits = max(t.LimitHits+add.LimitHits, 0)
		t.HourWarned = maxHourWarned(t.HourWarned, add.HourWarned)
		val = MarshalTotals(val[:0], t)
		_ = b.Set(key, val, nil)
		uc.stageTotal(key, cur, t)
	}
	if err := d.addDays(b, uc, deltas); err != nil {
		b.Close()
		return err
	}
	var err error
	if d.durability == Strict {
		err = d.commit(b)
	} else if err = d.commitBehind(b); err == nil {
		d.catchUp()
	}
	uc.settle(err == nil)
	return err
}
