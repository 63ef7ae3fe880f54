package quota

import (
	"time"

	"github.com/fraudd/fraudd/storage"
)

// Device collection budgets. POST /v1/collect/device is called with the
// publishable key, which sits in public pages: anyone can send reports that
// the account's device events then keep for 30 days. Each account may store a
// budget of events and bytes per UTC day; past it the collector gets 429 until
// 00:00 UTC. Counts are memory only, like the hourly windows (a restart
// forgets the day's counts; an account stays resident while it has them).
//
// Defaults, from the account's Limits:
//   - events a day: CollectPerCheck times the plan's average day of visitor
//     checks (monthly ÷ 30), and at least its hourly cap. The collector runs on
//     page views, an evaluation only where a form is submitted, so ten reports
//     per check leaves room; a whole hour at the cap is always covered.
//   - no monthly allowance (grandfathered, custom without one): the hourly
//     cap × 24, the most evaluations a day can hold.
//   - neither (public interest, custom uncapped): CollectCeilingEvents
//     (Scale's hourly cap × 24).
//   - bytes a day: events × CollectBytesPerEvent. A real report stores about
//     1 KiB; the largest a report can store is storage.MaxEventSignals, so a
//     flood of padded reports runs into the byte budget long before the event
//     budget.
//
// So Free may store 3,333 events and 6.5 MiB a day (under 200 MiB over the
// retention), Starter 16,666, Growth 83,333, Scale 333,333 events.
const (
	CollectPerCheck      = 10
	CollectBytesPerEvent = 2 << 10
	CollectCeilingEvents = 1_200_000
)

// CollectBudget is what one account may store per UTC day.
type CollectBudget struct {
	Events int64
	Bytes  int64
}

// CollectBudgetFor is the default budget for an account's limits.
func CollectBudgetFor(l Limits) CollectBudget {
	var events int64
	switch {
	case l.Monthly != NoLimit:
		events = max(l.Monthly*CollectPerCheck/30, l.Hourly)
	case l.Hourly != NoLimit:
		events = l.Hourly * 24
	default:
		events = CollectCeilingEvents
	}
	events = max(events, 1)
	return CollectBudget{Events: events, Bytes: events * CollectBytesPerEvent}
}

// Collect asks to store one device event of Bytes bytes.
type Collect struct {
	Account string
	Budget  CollectBudget
	Bytes   int64
	Now     time.Time
}

// CollectResult is the answer to a Collect. On a refusal RetryAfter counts
// the seconds to 00:00 UTC (≥ 1).
type CollectResult struct {
	Allowed    bool
	RetryAfter int64
}

// collectDay is an account's use of its collection budget on one UTC day.
type collectDay struct {
	day    storage.Day
	events int64
	bytes  int64
}

// takeCollect admits the event when both budgets have room for it.
func (a *account) takeCollect(m *Collect) CollectResult {
	if d := storage.DayOf(m.Now); a.collect.day != d {
		a.collect = collectDay{day: d}
	}
	if a.collect.events >= m.Budget.Events || a.collect.bytes+m.Bytes > m.Budget.Bytes {
		next := m.Now.UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
		return CollectResult{RetryAfter: max(int64((next.Sub(m.Now)+time.Second-1)/time.Second), 1)}
	}
	a.collect.events++
	a.collect.bytes += m.Bytes
	return CollectResult{Allowed: true}
}

// collecting: the account has counts for the day of now (it must not be
// evicted, or the day's budget would start again).
func (a *account) collecting(now time.Time) bool {
	return a.collect.events > 0 && a.collect.day == storage.DayOf(now)
}
