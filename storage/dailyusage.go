package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Daily usage: each account's counted visitor checks and lookups per UTC
// day, for the console's 30-day chart. They ride the quota actors' usage
// batches (ApplyUsage), so they are exactly as durable as month_used. Keys
// are prefixUsageDay | uvarint(len id) | id | day (4 bytes big-endian): one
// account's days are contiguous, and the first write of a day also range
// deletes the account's days older than DailyUsageDays, so retention never
// scans.

// DailyUsageDays is how many days of daily counts are kept.
const DailyUsageDays = 62

// DayUsage is one account's counts for one UTC day.
type DayUsage struct {
	Day     Day
	Used    int64 // counted visitor checks
	Lookups int64 // counted lookups and MCP lookup_ip calls
}

// Start is 00:00 UTC of the day.
func (d Day) Start() time.Time { return time.Unix(int64(d)*86400, 0).UTC() }

const dayUsageVersion = 1

func dayUsageKey(dst []byte, account string, d Day) []byte {
	dst = append(dst, prefixUsageDay)
	dst = appendString(dst, account)
	return binary.BigEndian.AppendUint32(dst, uint32(d))
}

// MarshalDayUsage appends the binary form of u's counts: version, used, lookups.
func MarshalDayUsage(dst []byte, u DayUsage) []byte {
	dst = append(dst, dayUsageVersion)
	dst = appendUvarint(dst, uint64(max(u.Used, 0)))
	return appendUvarint(dst, uint64(max(u.Lookups, 0)))
}

// UnmarshalDayUsage decodes MarshalDayUsage output (Day is left zero: it is
// in the key).
func UnmarshalDayUsage(b []byte) (DayUsage, error) {
	r := &reader{b: b}
	if v := r.byte1(); r.err == nil && v != dayUsageVersion {
		return DayUsage{}, fmt.Errorf("day usage version %d: %w", v, errCorrupt)
	}
	u := DayUsage{Used: int64(r.uvarint()), Lookups: int64(r.uvarint())}
	if r.err != nil || len(r.b) != 0 || u.Used < 0 || u.Lookups < 0 {
		return DayUsage{}, fmt.Errorf("decode day usage: %w", errCorrupt)
	}
	return u, nil
}

type dayRef struct {
	account string
	day     Day
}

// addDays adds the deltas' daily counts to batch b (ApplyUsage's batch).
func (d *DB) addDays(b batch, uc *usageCache, deltas []UsageDelta) error {
	days := map[dayRef]DayUsage{}
	for i := range deltas {
		u := &deltas[i]
		if u.Day == 0 || (u.Counts.Used == 0 && u.Counts.Lookups == 0) {
			continue
		}
		k := dayRef{u.Account, u.Day}
		c := days[k]
		c.Used += u.Counts.Used
		c.Lookups += u.Counts.Lookups
		days[k] = c
	}
	var key, val []byte
	for ref, add := range days {
		key = dayUsageKey(key[:0], ref.account, ref.day)
		cached := uc.day(key)
		var cur DayUsage
		found := cached != nil
		if found {
			cur = *cached
		} else {
			var err error
			if cur, found, err = d.dayUsage(key); err != nil {
				return fmt.Errorf("apply daily usage %q day %d: %w", ref.account, ref.day, err)
			}
		}
		cur.Used = max(cur.Used+add.Used, 0)
		cur.Lookups = max(cur.Lookups+add.Lookups, 0)
		val = MarshalDayUsage(val[:0], cur)
		_ = b.Set(key, val, nil)
		uc.stageDay(key, cached, cur)
		if !found && ref.day > DailyUsageDays {
			// A new day: drop the account's days past retention.
			_ = b.DeleteRange(dayUsageKey(nil, ref.account, 0), dayUsageKey(nil, ref.account, ref.day-DailyUsageDays+1), nil)
		}
	}
	return nil
}

func (d *DB) dayUsage(key []byte) (DayUsage, bool, error) {
	v, err := d.get(key)
	if errors.Is(err, ErrNotFound) {
		return DayUsage{}, false, nil
	}
	if err != nil {
		return DayUsage{}, false, err
	}
	u, err := UnmarshalDayUsage(v)
	return u, true, err
}

// DailyUsage returns account's counts for each day from first to last
// (inclusive), oldest first, with zeros for days without a record.
func (d *DB) DailyUsage(account string, first, last Day) ([]DayUsage, error) {
	if last < first {
		return []DayUsage{}, nil
	}
	out := make([]DayUsage, 0, last-first+1)
	for day := first; day <= last; day++ {
		out = append(out, DayUsage{Day: day})
	}
	it, err := d.newIter(dayUsageKey(nil, account, first), dayUsageKey(nil, account, last+1))
	if err != nil {
		return nil, err
	}
	defer it.Close()
	base := len(dayUsageKey(nil, account, 0)) - 4
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) != base+4 {
			continue
		}
		day := Day(binary.BigEndian.Uint32(k[base:]))
		v, err := it.Value()
		if err != nil {
			return nil, it.Err("iterate daily usage")
		}
		u, err := UnmarshalDayUsage(v)
		if err != nil {
			return nil, fmt.Errorf("daily usage %x: %w", k, err)
		}
		u.Day = day
		out[day-first] = u
	}
	if err := it.Err("iterate daily usage"); err != nil {
		return nil, err
	}
	return out, nil
}
