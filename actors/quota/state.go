package quota

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/fraudd/fraudd/storage"
)

// Bucket is the hourly bucket a charge uses: live and test keys have separate
// hourly windows; a previous live key in grace uses Live.
type Bucket uint8

const (
	Live Bucket = iota
	Test
)

// String is the SPEC 2.4 key_type.
func (b Bucket) String() string {
	if b == Test {
		return "test"
	}
	return "live"
}

// Kind is what a charge pays for: the two have separate monthly allowances
// and share the hourly window.
type Kind uint8

const (
	Evaluate Kind = iota // POST /v1/evaluate (and console checks)
	Lookup               // GET /v1/lookup and authenticated MCP lookup_ip
)

// Refusal says why a charge was refused.
type Refusal uint8

const (
	NotRefused Refusal = iota
	RefusedHourly
	RefusedMonthly // answer 429 with code monthly_quota_exceeded
)

// Window is the length of an hourly window, which starts at its first request.
const Window = time.Hour

// Charge is one check-and-charge, done atomically by the account's shard.
// The flags say what the call counts toward; the caller decides (package doc).
type Charge struct {
	Account string
	Bucket  Bucket
	Kind    Kind
	Limits  Limits
	Hourly  bool // uses one request of the hourly window
	Monthly bool // counts toward month_used (Evaluate) or month_lookups_used (Lookup)
	Total   bool // counts toward total_evaluations
	Now     time.Time
	// Lent: the owner of the account lent this cluster node the slice of
	// its allowance this charge uses (lease.go). The charge is not
	// checked and touches no account state: it is only stored, as this
	// node's share of the month's count and the totals.
	Lent bool
}

// ChargeResult is the answer to a Charge.
type ChargeResult struct {
	Allowed bool
	Refusal Refusal
	// Capped: a limit applies, so the X-RateLimit-* headers are sent. False for
	// uncapped (public-interest) accounts, whose answers omit them.
	Capped bool
	// Limit, Remaining and Reset feed X-RateLimit-Limit, -Remaining and -Reset.
	// They describe the hourly window (Reset: Unix seconds at its end, rounded
	// up; a window not yet started would end an hour from now). An account with
	// no hourly cap but a monthly allowance gets the monthly figures instead
	// (Reset: 00:00 UTC on the 1st of next month).
	Limit     int64
	Remaining int64
	Reset     int64
	// RetryAfter is set on a refusal, in whole seconds (≥ 1): until the end of
	// the hourly window, or until 00:00 UTC on the 1st of next month.
	RetryAfter int64
}

// Usage asks for an account's usage (GET /v1/usage). It consumes nothing.
type Usage struct {
	Account string
	Bucket  Bucket // the bucket of the key that asks
	Limits  Limits
	Now     time.Time
}

// UsageView holds every SPEC 2.4 usage field; nil pointers are JSON null.
type UsageView struct {
	KeyType            string // "live" or "test"
	HourlyLimit        *int64
	UsedThisHour       int64
	Remaining          *int64
	Uncapped           bool
	ResetsAt           *time.Time // end of the current window; nil when nothing used in it
	TotalEvaluations   int64
	LimitHits          int64
	Plan               string
	MonthlyLimit       *int64
	MonthUsed          int64
	MonthlyLookupLimit *int64
	MonthLookupsUsed   int64
	MonthResetsAt      time.Time
	GrandfatheredUntil *time.Time
}

// WarnKind names a usage-warning threshold (SPEC §6).
type WarnKind uint8

const (
	WarnHourly80 WarnKind = iota
	WarnHourlyCap
	WarnMonthly80
	WarnMonthlyCap
	WarnLookups80
	WarnLookupsCap
)

// String names the threshold for logs and mail templates.
func (k WarnKind) String() string {
	return [...]string{"hourly_80", "hourly_cap", "monthly_80", "monthly_cap", "lookups_80", "lookups_cap"}[k]
}

// Warning is a usage threshold just reached.
type Warning struct {
	Account string
	Kind    WarnKind
	Bucket  Bucket
	Limit   int64
	Used    int64
	At      time.Time
}

// Notifier receives usage warnings. Warn is called on the shard's goroutine:
// it must return at once (queue the mail, don't send it). Hourly warnings come
// for the live bucket only, at most once per threshold per 24 hours per
// account (remembered in the store with the lifetime totals:
// storage.Totals.HourWarned, so a restart does not repeat one); monthly ones
// for either bucket, once per threshold per account and month (remembered in
// the store with the month's counters). Both ride the charge's own delta, so
// they are as durable as its count (a crash loses at most the last sync
// interval's).
type Notifier interface {
	Warn(Warning)
}

// hourlyWarnEvery is the minimum spacing of one hourly warning per account.
const hourlyWarnEvery = 24 * time.Hour

type window struct {
	start time.Time
	n     int64
}

func (w *window) end() time.Time { return w.start.Add(Window) }

// HourWindow is an account's hourly window of one bucket as it leaves or
// reaches a node: when it started and how many calls it admitted. N zero is
// no window.
type HourWindow struct {
	Start time.Time
	N     int64
}

// Running reports whether the window still applies at now (as the shard
// judges its own, Stagger included).
func (h HourWindow) Running(now time.Time) bool {
	w := window{start: h.Start, n: h.N}
	return h.N > 0 && !w.over(now)
}

// Handed is what Drop answers of one forgotten account: its hourly windows
// by Bucket.
type Handed struct {
	Account string
	Hour    [2]HourWindow
}

func (a *account) handed() Handed {
	h := Handed{Account: a.id}
	for b, w := range a.hour {
		h.Hour[b] = HourWindow{Start: w.start, N: w.n}
	}
	return h
}

// resume starts a newly loaded account with the windows its previous holder
// handed over, those still running at now.
func (a *account) resume(hour [2]HourWindow, now time.Time) {
	for b, h := range hour {
		if h.Running(now) {
			a.hour[b] = window{start: h.Start, n: h.N}
			if a.loads != nil {
				a.loads.resumed[b] = h.Start
			}
		}
	}
}

// account is one account's quota state, owned by its shard. Everything but
// inflight is touched only by the shard; inflight counts deltas handed to the
// group committer and not yet settled, and the account is not evicted while
// it is above zero. In memory, counts and totals = stored + in flight.
type account struct {
	id     string
	month  storage.Month
	counts storage.MonthCounts
	totals storage.Totals
	hour   [2]window
	// hourWarned are when WarnHourly80 and WarnHourlyCap were last sent,
	// loaded from and stored with the totals (storage.Totals.HourWarned).
	// hourLatest are the latest of those times sent or loaded: what the
	// store holds (it keeps the later time), which a reload would find;
	// they differ only after a clock that went back.
	hourWarned, hourLatest [2]time.Time
	lastSeen               time.Time
	inflight               atomic.Int32
	collect                collectDay // device events stored today (collect.go)
	grants                 []grant    // allowance slices lent to other members (lease.go)
	// loads says which tagged loads the account's figures came from (nil:
	// the store tags none, as on a single node): what a Discount may take
	// a call out of.
	loads *loadInfo
	// reloads counts the month's counts loaded again (a month change). A
	// delta counted before the last of them is not in the counts any more,
	// so its rollback leaves them alone (undo).
	reloads uint32
	// unstored are the month's Warned bits whose warning went out but
	// whose delta did not reach the store (a failed batch): the next
	// delta of the month carries them (persist), so that a reload does
	// not send the warning again.
	unstored uint8
	// hourUnstored: an hourly warning's time did not reach the store (a
	// failed batch); the next delta carries hourWarned (persist).
	hourUnstored bool
}

// loadHourWarned takes the hourly warning times from totals as loaded.
func (a *account) loadHourWarned(t *storage.Totals) {
	for i, ns := range t.HourWarned {
		if ns > 0 {
			a.hourWarned[i] = time.Unix(0, ns).UTC()
			a.hourLatest[i] = a.hourWarned[i]
		}
	}
}

// storedHourWarned is hourWarned as storage.Totals.HourWarned holds it.
func (a *account) storedHourWarned() [2]int64 {
	var out [2]int64
	for i, t := range a.hourWarned {
		if !t.IsZero() {
			out[i] = max(t.UnixNano(), 1)
		}
	}
	return out
}

// loadInfo is what a cluster node's account remembers of its loads.
type loadInfo struct {
	// first is the load the totals and the resumed hourly windows came
	// from, monthly the one the month's counts came from (the same until
	// the month changes).
	first, monthly loadRef
	// resumed are the starts of the hourly windows resumed from the first
	// load, by Bucket (zero: none): a Discount gives an hourly request
	// back only to a window the load brought.
	resumed [2]time.Time
}

// loadRef names one load of an account (Loaded.Tag; 0: none, or a store
// that does not tag) and the members whose shares went into it.
type loadRef struct {
	tag  uint64
	from []string
}

// holds reports whether the load is tag and summed member's share.
func (l *loadRef) holds(tag uint64, member string) bool {
	return tag != 0 && l.tag == tag && slices.Contains(l.from, member)
}

func (a *account) touch(now time.Time) {
	if now.After(a.lastSeen) {
		a.lastSeen = now
	}
}

// Stagger is how far before a window's start a charge may be stamped and
// still count in it. Requests are stamped when they arrive and reach the
// shard in any order, so the charge that opened a window can carry a later
// time than one queued behind it (and, in a cluster, than one stamped on
// another node). Only a clock moved back further than this starts a new
// window; without it the earlier-stamped charge would empty the window and
// concurrent calls at a window's start would admit more than the cap. It
// is well past the longest a charge can take from its stamp to its shard:
// the chain's wait alone is 5 s (checks), begun after the request was
// stamped, read and authenticated, and a charge late by more than Stagger
// emptied a running window (5 s here before the 28th of November).
const Stagger = time.Minute

// over reports whether w no longer applies at now: it ran out, or the clock
// went back more than Stagger before its start.
func (w *window) over(now time.Time) bool {
	return w.n > 0 && (!now.Before(w.end()) || now.Before(w.start.Add(-Stagger)))
}

// win returns b's window as of now, emptied when it is over.
func (a *account) win(b Bucket, now time.Time) *window {
	w := &a.hour[b&1]
	if w.over(now) {
		*w = window{}
	}
	return w
}

// warnBit is the storage.MonthCounts.Warned bit of a monthly threshold.
func warnBit(k WarnKind) uint8 { return 1 << (k - WarnMonthly80) }

// threshold80 is the count at which "about 80%" is reached: ⌈0.8·limit⌉, at least 1.
// threshold80 is 80% of limit, rounded up, at least 1: limit − ⌊limit/5⌋,
// which cannot overflow (limit×8 would, past about 1.15e18).
func threshold80(limit int64) int64 { return max(limit-limit/5, 1) }

// secondsUntil is t−now in whole seconds, rounded up, at least 1.
func secondsUntil(t, now time.Time) int64 {
	d := t.Sub(now)
	return max(int64((d+time.Second-1)/time.Second), 1)
}

// unixCeil is t in Unix seconds, rounded up.
func unixCeil(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}

// charge checks c against the account and, when allowed, charges it. The
// month must already be MonthOf(c.Now). It returns the answer and the durable
// part of the change (zero when nothing needs storing); warn receives the
// thresholds crossed.
func (a *account) charge(c *Charge, warn func(Warning)) (ChargeResult, storage.UsageDelta) {
	// The limits of the charge's own instant, whatever clock computed them.
	c.Limits = c.Limits.At(c.Now)
	l := &c.Limits
	w := a.win(c.Bucket, c.Now)
	monthly := l.monthlyFor(c.Kind)
	used := &a.counts.Used
	if c.Kind == Lookup {
		used = &a.counts.Lookups
	}
	// Slices lent to other members count as used until they report.
	oh, om := a.lent(c.Bucket, c.Kind, c.Now)
	var r ChargeResult
	switch {
	case c.Monthly && monthly != NoLimit && *used+om >= monthly:
		r.Refusal = RefusedMonthly
		r.RetryAfter = secondsUntil(a.month.End(), c.Now)
	case c.Hourly && l.Hourly != NoLimit && w.n+oh >= l.Hourly:
		r.Refusal = RefusedHourly
		end := c.Now.Add(Window) // no window running (a limit of 0): as X-RateLimit-Reset says
		if w.n > 0 {
			end = w.end()
		}
		r.RetryAfter = secondsUntil(end, c.Now)
	}
	d := storage.UsageDelta{Account: a.id, Month: a.month}
	if r.Refusal != NotRefused {
		a.totals.LimitHits++
		d.Totals.LimitHits = 1
		if r.Refusal == RefusedMonthly {
			// A plan lowered below what the month used refuses the next
			// call outright: its cap is reached, and mailed, here.
			a.warnMonthly(c.Kind, c.Bucket, monthly, *used, c.Now, &d, warn)
		}
		a.headers(&r, c, w, monthly, *used)
		return r, d
	}
	r.Allowed = true
	d = countedDelta(c)
	if c.Hourly {
		if w.n == 0 {
			w.start = c.Now
		}
		w.n++
		if c.Bucket == Live && l.Hourly != NoLimit && warn != nil {
			a.warnHourly(w.n, l.Hourly, c.Now, &d, warn)
		}
	}
	if c.Monthly {
		*used++
		a.warnMonthly(c.Kind, c.Bucket, monthly, *used, c.Now, &d, warn)
	}
	if c.Total {
		a.totals.Evaluations++
	}
	a.headers(&r, c, w, monthly, *used)
	return r, d
}

// warnMonthly sends the monthly warnings of kind that used reached and
// not sent yet this month, marking them in the counts and in d.
func (a *account) warnMonthly(k Kind, b Bucket, monthly, used int64, now time.Time, d *storage.UsageDelta, warn func(Warning)) {
	if monthly == NoLimit {
		return
	}
	k80 := WarnMonthly80
	if k == Lookup {
		k80 = WarnLookups80
	}
	for _, t := range [2]struct {
		k   WarnKind
		lim int64
	}{{k80, threshold80(monthly)}, {k80 + 1, monthly}} {
		bit := warnBit(t.k)
		if used < t.lim {
			// Not reached under the allowance in force: a mail sent for a
			// lower one (before an upgrade, or a downgrade undone) is
			// re-armed for this one. The stored bit stays (bits are OR-ed
			// in); each load re-arms it the same way.
			a.counts.Warned &^= bit
			continue
		}
		if a.counts.Warned&bit != 0 {
			continue
		}
		a.counts.Warned |= bit
		d.Counts.Warned |= bit
		// Past the cap at once (a plan lowered below what the month used):
		// the cap's mail says it; an 80% one beside it would not.
		if warn != nil && (t.lim == monthly || used < monthly) {
			warn(Warning{Account: a.id, Kind: t.k, Bucket: b, Limit: monthly, Used: used, At: now})
		}
	}
}

// warnHourly sends the hourly warnings n reached and not sent in the last
// 24 hours, noting when in memory and in d (stored with the totals).
func (a *account) warnHourly(n, limit int64, now time.Time, d *storage.UsageDelta, warn func(Warning)) {
	for i, t := range [2]int64{threshold80(limit), limit} {
		if n < t {
			continue
		}
		if last := a.hourWarned[i]; !last.IsZero() && now.Sub(last) < hourlyWarnEvery && !now.Before(last) {
			continue
		}
		a.hourWarned[i] = now
		if now.After(a.hourLatest[i]) {
			a.hourLatest[i] = now
		}
		d.Totals.HourWarned[i] = max(now.UnixNano(), 1)
		warn(Warning{Account: a.id, Kind: WarnHourly80 + WarnKind(i), Bucket: Live, Limit: limit, Used: n, At: now})
	}
}

func (a *account) headers(r *ChargeResult, c *Charge, w *window, monthly, used int64) {
	switch {
	case c.Limits.Hourly != NoLimit:
		r.Capped = true
		r.Limit = c.Limits.Hourly
		r.Remaining = max(c.Limits.Hourly-w.n, 0)
		end := c.Now.Add(Window)
		if w.n > 0 {
			end = w.end()
		}
		r.Reset = unixCeil(end)
	case monthly != NoLimit:
		r.Capped = true
		r.Limit = monthly
		r.Remaining = max(monthly-used, 0)
		r.Reset = a.month.End().Unix()
	}
}

// usage reports the SPEC 2.4 fields. The month must be MonthOf(now).
func (a *account) usage(b Bucket, l Limits, now time.Time) UsageView {
	l = l.At(now) // as charge: the limits of the month read
	w := a.win(b, now)
	v := UsageView{
		KeyType:          b.String(),
		UsedThisHour:     w.n,
		Uncapped:         l.Uncapped(),
		TotalEvaluations: a.totals.Evaluations,
		LimitHits:        a.totals.LimitHits,
		Plan:             l.Plan,
		MonthUsed:        a.counts.Used,
		MonthLookupsUsed: a.counts.Lookups,
		MonthResetsAt:    a.month.End(),
	}
	if l.Hourly != NoLimit {
		h, rem := l.Hourly, max(l.Hourly-w.n, 0)
		v.HourlyLimit, v.Remaining = &h, &rem
	}
	if w.n > 0 {
		// Whole seconds, rounded up as X-RateLimit-Reset is: rounded down,
		// it named an instant at which a call is still refused.
		t := time.Unix(unixCeil(w.end()), 0).UTC()
		v.ResetsAt = &t
	}
	if l.Monthly != NoLimit {
		m := l.Monthly
		v.MonthlyLimit = &m
	}
	if l.MonthlyLookups != NoLimit {
		m := l.MonthlyLookups
		v.MonthlyLookupLimit = &m
	}
	if !l.Grandfathered.IsZero() {
		g := l.Grandfathered
		v.GrandfatheredUntil = &g
	}
	return v
}

// rollback undoes a charge whose delta could not be made durable.
func (a *account) rollback(d *storage.UsageDelta, b Bucket, hourly bool, wstart time.Time) {
	if d.Month == a.month {
		a.counts.Used = max(a.counts.Used-d.Counts.Used, 0)
		a.counts.Lookups = max(a.counts.Lookups-d.Counts.Lookups, 0)
		// Warned bits stay: the warning went out.
	}
	a.totals.Evaluations = max(a.totals.Evaluations-d.Totals.Evaluations, 0)
	a.totals.LimitHits = max(a.totals.LimitHits-d.Totals.LimitHits, 0)
	if w := &a.hour[b&1]; hourly && w.n > 0 && w.start.Equal(wstart) {
		w.n--
	}
}

// idle reports whether the account can be evicted at now: untouched for
// idleAfter, no hourly window running, no hourly warning within 24 hours
// (kept in memory too: the reload would find the latest, not the last, one
// after a clock that went back), and nothing in flight to the store.
func (a *account) idle(now time.Time, idleAfter time.Duration) bool {
	// A slice whose holder never reported (it stopped, or its call
	// failed) is let go once kept past its time, here too: only a lend or
	// a charge would, and the account has neither.
	a.dropLapsed(now)
	if a.unstored != 0 && storage.MonthOf(now) == a.month {
		return false // a reload would warn again: kept until a delta stores them
	}
	if a.inflight.Load() != 0 || now.Sub(a.lastSeen) < idleAfter || a.collecting(now) || len(a.grants) > 0 {
		return false
	}
	for i := range a.hour {
		if w := &a.hour[i]; w.n > 0 && !w.over(now) {
			return false
		}
	}
	// hourLatest, not hourWarned: evicted, the account would reload the
	// latest times, which a clock that went back may have left later than
	// the last ones sent (hourWarned is never the later), so it is kept
	// until neither can hold a warning back and eviction changes nothing
	// of what is sent.
	for _, t := range a.hourLatest {
		if !t.IsZero() && now.Sub(t) < hourlyWarnEvery {
			return false
		}
	}
	return true
}
