package storage

import "sync"

// usageCache remembers the last value ApplyUsage committed for each usage
// record (month counts, totals, day counts), so that the next group commit
// adds to it without reading the record back from Pebble: three point reads
// per account per commit were a third of the quota committer's CPU.
//
// It is exact because ApplyUsage is the only writer of those records, and
// it is tied to one Pebble instance: after a reopen (whose WAL replay may
// have dropped unsynced commits) or a failed commit, it starts empty and
// the next writes read the store again.
type usageCache struct {
	mu     sync.Mutex
	h      *handle
	months map[string]*MonthCounts
	totals map[string]*Totals
	days   map[string]*DayUsage
	staged []staged
}

// staged is a value written into the batch being committed: it enters the
// cache only once the commit succeeded.
type staged struct {
	key   string // set for a record not cached yet
	month *MonthCounts
	total *Totals
	day   *DayUsage
	// the new values
	mv MonthCounts
	tv Totals
	dv DayUsage
}

// usageCacheMax bounds each map; past it the map starts over (the records
// of idle accounts and past months would otherwise stay forever).
const usageCacheMax = 1 << 14

// on empties the cache if it was filled on another instance than h. The
// caller holds mu.
func (c *usageCache) on(h *handle) {
	if c.h != h || c.months == nil {
		c.h = h
		c.months = map[string]*MonthCounts{}
		c.totals = map[string]*Totals{}
		c.days = map[string]*DayUsage{}
	}
	c.staged = c.staged[:0]
}

// month returns the cached record for key, or nil.
func (c *usageCache) month(key []byte) *MonthCounts { return c.months[string(key)] }
func (c *usageCache) total(key []byte) *Totals      { return c.totals[string(key)] }
func (c *usageCache) day(key []byte) *DayUsage      { return c.days[string(key)] }

func (c *usageCache) stageMonth(key []byte, cur *MonthCounts, v MonthCounts) {
	s := staged{month: cur, mv: v}
	if cur == nil {
		s.key = string(key)
	}
	c.staged = append(c.staged, s)
}

func (c *usageCache) stageTotal(key []byte, cur *Totals, v Totals) {
	s := staged{total: cur, tv: v}
	if cur == nil {
		s.key = string(key)
	}
	c.staged = append(c.staged, s)
}

func (c *usageCache) stageDay(key []byte, cur *DayUsage, v DayUsage) {
	s := staged{day: cur, dv: v}
	if cur == nil {
		s.key = string(key)
	}
	c.staged = append(c.staged, s)
}

// committed moves the staged values into the cache (the batch is in the
// store); failed forgets everything (what the cache holds may not be what
// the store has).
func (c *usageCache) settle(ok bool) {
	if !ok {
		c.h, c.months, c.totals, c.days = nil, nil, nil, nil
		c.staged = c.staged[:0]
		return
	}
	for i := range c.staged {
		s := &c.staged[i]
		switch {
		case s.month != nil:
			*s.month = s.mv
		case s.total != nil:
			*s.total = s.tv
		case s.day != nil:
			*s.day = s.dv
		case s.key != "" && s.key[0] == prefixUsage:
			c.months[s.key] = bounded(c.months, s.mv)
		case s.key != "" && s.key[0] == prefixTotals:
			c.totals[s.key] = bounded(c.totals, s.tv)
		case s.key != "":
			c.days[s.key] = bounded(c.days, s.dv)
		}
	}
	clear(c.staged) // drop key strings
	c.staged = c.staged[:0]
}

// bounded empties m when it is full and returns a pointer to a copy of v.
func bounded[T any](m map[string]*T, v T) *T {
	if len(m) >= usageCacheMax {
		clear(m)
	}
	return &v
}
