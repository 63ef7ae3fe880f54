package quota

import (
	"math"
	"time"
)

// NoLimit marks a limit that does not apply (JSON null in SPEC 2.4).
const NoLimit int64 = -1

// Plans (SPEC 2.4 usage.plan).
const (
	PlanFree           = "free"
	PlanStarter        = "starter"
	PlanGrowth         = "growth"
	PlanScale          = "scale"
	PlanCustom         = "custom"
	PlanPublicInterest = "public_interest"
)

// Grandfathering (SPEC §8, CLARIFICATIONS): accounts created before
// GrandfatherCutoff keep GrandfatherHourly checks an hour and no monthly cap
// up to and including GrandfatheredUntil.
var (
	GrandfatherCutoff  = time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	GrandfatheredUntil = time.Date(2026, 11, 30, 23, 59, 59, 0, time.UTC)
	// Until GrandfatherExtended, grandfathered_until read the end of 31
	// October (SPEC §2.4: "earlier read end of 31 October until
	// 2026-10-19"); the allowance itself ran to GrandfatheredUntil all along.
	GrandfatherExtended      = time.Date(2026, 10, 19, 0, 0, 0, 0, time.UTC)
	GrandfatheredUntilBefore = time.Date(2026, 10, 31, 23, 59, 59, 0, time.UTC)
)

// GrandfatherHourly is the previous hourly allowance kept while grandfathered.
const GrandfatherHourly int64 = 1000

// LookupFactor: the monthly lookup allowance is this many times the plan's
// monthly visitor checks (SPEC §8).
const LookupFactor = 10

// Limits are one account's allowances at one instant. NoLimit means none.
type Limits struct {
	Plan           string
	Hourly         int64 // requests per hourly window, evaluate and lookup together
	Monthly        int64 // counted visitor checks per UTC month
	MonthlyLookups int64 // counted lookups (and MCP lookup_ip) per UTC month
	// Grandfathered is the end of the previous allowance of an account
	// created before GrandfatherCutoff (SPEC 2.4 grandfathered_until),
	// before that end and after it alike: the field names when it ends
	// for those accounts, not whether it is in force (GrandfatheredAt).
	// Zero for every other account.
	Grandfathered time.Time
}

// GrandfatheredAt reports whether the previous allowance is in force at
// now: up to and including the last second Grandfathered names.
func (l Limits) GrandfatheredAt(now time.Time) bool {
	return !l.Grandfathered.IsZero() && now.Before(GrandfatheredUntil.Add(time.Second))
}

// Uncapped reports that neither an hourly nor a monthly limit applies (SPEC 2.4 uncapped).
func (l Limits) Uncapped() bool { return l.Hourly == NoLimit && l.Monthly == NoLimit }

// monthlyFor is the monthly allowance that applies to kind.
func (l Limits) monthlyFor(k Kind) int64 {
	if k == Lookup {
		return l.MonthlyLookups
	}
	return l.Monthly
}

type planRow struct{ monthly, hourly int64 }

var plans = map[string]planRow{
	PlanFree:    {10_000, 1_000},
	PlanStarter: {50_000, 5_000},
	PlanGrowth:  {250_000, 20_000},
	PlanScale:   {1_000_000, 50_000},
}

func lookupsFor(monthly int64) int64 {
	if monthly == NoLimit {
		return NoLimit
	}
	if monthly > math.MaxInt64/LookupFactor {
		// An operator's "as good as unlimited" custom figure: the product
		// would wrap to a negative allowance that refuses every lookup.
		return math.MaxInt64
	}
	return monthly * LookupFactor
}

// LimitsFor computes an account's limits at now.
//
//   - free, starter, growth, scale: the SPEC §8 table; lookups 10× the monthly checks.
//   - custom (and "enterprise", stored as custom): the account's own figures;
//     a nil hourly limit means no hourly cap, a nil monthly limit no monthly
//     allowance (and so no lookup allowance); uncapped only when both are nil.
//   - public_interest: uncapped.
//   - an unknown plan name is treated as free (never fail open).
//
// Grandfathering applies to the four standard plans: an account created before
// 2026-10-01 has, until 2026-11-30T23:59:59Z inclusive, no monthly or lookup
// cap and an hourly cap of 1,000 — or its plan's own hourly cap when that is
// higher, so an upgrade never lowers it — and reads that end as
// grandfathered_until then and after. Custom and public-interest accounts
// have their agreed limits and no grandfathered_until.
func LimitsFor(plan string, customHourly, customMonthly *int64, createdAt, now time.Time) Limits {
	switch plan {
	case PlanPublicInterest:
		return Limits{Plan: plan, Hourly: NoLimit, Monthly: NoLimit, MonthlyLookups: NoLimit}
	case PlanCustom, "enterprise":
		l := Limits{Plan: PlanCustom, Hourly: NoLimit, Monthly: NoLimit}
		if customHourly != nil {
			l.Hourly = max(*customHourly, 0)
		}
		if customMonthly != nil {
			l.Monthly = max(*customMonthly, 0)
		}
		l.MonthlyLookups = lookupsFor(l.Monthly)
		return l
	}
	row, ok := plans[plan]
	if !ok {
		plan, row = PlanFree, plans[PlanFree]
	}
	if !createdAt.Before(GrandfatherCutoff) {
		return Limits{Plan: plan, Hourly: row.hourly, Monthly: row.monthly, MonthlyLookups: lookupsFor(row.monthly)}
	}
	return grandfatheredAt(plan, row, now)
}

// At is l as it applies at now. A cluster node computes an account's
// limits at its own clock, and the account's owner charges and reads it
// at the owner's (docs/cluster.md); at the end of grandfathering, which
// is also a month's start, the two can fall on either side of it, and a
// grandfathered account's November check was refused against December's
// cap (and the owner mailed "used up") by a node whose clock was ahead.
// Grandfathering is the only part that changes with time, and only the
// accounts it concerns carry Grandfathered, so those are derived again
// from their plan at now when l was computed on the other side of the end
// (in force: no monthly cap, which no standard plan has otherwise) or of
// 2026-10-19 (the end it names, grandfatheredShown); any
// other l — nearly every charge, grandfathered accounts' included once the
// end is past — is returned as it is, with no map read.
func (l Limits) At(now time.Time) Limits {
	if l.Grandfathered.IsZero() || (l.Monthly == NoLimit) == l.GrandfatheredAt(now) && l.Grandfathered.Equal(grandfatheredShown(now)) {
		return l
	}
	row, ok := plans[l.Plan]
	if !ok {
		return l
	}
	return grandfatheredAt(l.Plan, row, now)
}

// grandfatheredShown is the end of the previous allowance as it read at
// now: end of 31 October until 2026-10-19, end of 30 November since (SPEC
// 2.4).
func grandfatheredShown(now time.Time) time.Time {
	if now.Before(GrandfatherExtended) {
		return GrandfatheredUntilBefore
	}
	return GrandfatheredUntil
}

// grandfatheredAt is the limits at now of an account created before
// GrandfatherCutoff on a standard plan.
func grandfatheredAt(plan string, row planRow, now time.Time) Limits {
	l := Limits{Plan: plan, Hourly: row.hourly, Monthly: row.monthly, MonthlyLookups: lookupsFor(row.monthly)}
	// Past its end the plan's limits apply, and grandfathered_until still
	// names that end: SPEC 2.4 defines it as the "end of the previous
	// allowance for accounts created before 2026-10-01", null for the
	// others, so it does not turn null (a client that shows when the old
	// allowance ended, or compares it with the time, would lose it).
	l.Grandfathered = grandfatheredShown(now)
	// "Until the end of 30 November": the whole last second of the day,
	// which GrandfatheredUntil names, is still in it.
	if l.GrandfatheredAt(now) {
		l.Hourly, l.Monthly, l.MonthlyLookups = max(GrandfatherHourly, row.hourly), NoLimit, NoLimit
	}
	return l
}
