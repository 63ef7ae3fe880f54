package quota

import (
	"fmt"
	"time"

	"github.com/fraudd/fraudd/storage"
)

// DayStore reads the counted calls per UTC day that ride the usage batches
// (storage.UsageDelta.Day); *storage.DB implements it.
type DayStore interface {
	DailyUsage(account string, first, last storage.Day) ([]storage.DayUsage, error)
}

// DayCount is one UTC day of an account's counted calls.
type DayCount struct {
	Day     time.Time // 00:00 UTC
	Used    int64     // visitor checks
	Lookups int64     // lookups and MCP lookup_ip calls
}

// Daily returns the account's counts for the n UTC days ending with now's,
// oldest first. Every charge acknowledged before the call is in them: it
// first waits for the committer to store what was queued (a charge may be
// answered ahead of its commit, AheadStore). Without a store that keeps
// days, every day reads zero.
func (c *Client) Daily(account string, now time.Time, n int) ([]DayCount, error) {
	if c.commit != nil {
		if err := c.stored(restartWait); err != nil {
			return nil, fmt.Errorf("%w: daily usage of %s: increments not stored: %w", ErrUnavailable, account, err)
		}
	}
	last := storage.DayOf(now)
	first := storage.Day(0)
	if n > 0 && int64(last) >= int64(n-1) {
		first = last - storage.Day(n-1)
	}
	var days []storage.DayUsage
	if ds, ok := c.store.(DayStore); ok {
		var err error
		if days, err = ds.DailyUsage(account, first, last); err != nil {
			return nil, fmt.Errorf("%w: daily usage of %s: %w", ErrUnavailable, account, err)
		}
	}
	out := make([]DayCount, 0, last-first+1)
	for d := first; d <= last; d++ {
		dc := DayCount{Day: d.Start()}
		if i := int(d - first); i < len(days) {
			dc.Used, dc.Lookups = days[i].Used, days[i].Lookups
		}
		out = append(out, dc)
	}
	return out, nil
}
