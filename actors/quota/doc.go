// Package quota owns every account's allowances: the hourly windows (live and
// test apart), the monthly visitor-check and lookup allowances, lifetime
// totals and limit hits (SPEC 2.4, §3, §8). Accounts are spread over shard
// actors by account id; one Charge message checks and charges atomically in
// the owning shard, so under any concurrency exactly the limit is admitted.
//
// # What the caller passes
//
// The caller decides what a call counts toward; the actor only enforces it.
// The rules are one table in code: the charge table of actors/checks
// (admit.go), which every transport's evaluate and lookup go through. Stamp
// now once per request; use the bucket of the key that authenticated (a
// previous live key in grace uses Live); compute Limits with LimitsFor from
// the account record at that now. Charge before doing the work (before
// device history, events, webhooks), so a refused call costs nothing else.
// Map the answer:
//   - Allowed: send X-RateLimit-Limit/-Remaining/-Reset from Limit, Remaining
//     and Reset when Capped (omit them when not: public-interest accounts).
//   - Refusal RefusedHourly: 429, Retry-After = RetryAfter.
//   - Refusal RefusedMonthly: 429, code monthly_quota_exceeded, Retry-After =
//     RetryAfter (until 00:00 UTC on the 1st).
//   - any error: 503 storage_unavailable; nothing was charged.
//
// A refusal increments limit_hits (refused requests, hourly or monthly) and
// charges nothing else. Monthly checks refuse a counted call once the month's
// count has reached the allowance; the hourly check refuses once the window's
// count has reached the hourly limit. When both are exhausted, the monthly
// refusal wins (its Retry-After is the one that helps).
//
// # Durability
//
// Monthly counters and totals live in the store (storage.DB.ApplyUsage).
// Shards hand the deltas of their charges to one group committer, which
// writes everything queued meanwhile as one batch. What a charge's answer
// waits for is the store's Durability:
//   - Interval (the default): nothing. The shard counts the charge, queues
//     its delta and answers. The delta lingers in the committer's queue
//     (GroupConfig.Linger) until the store's group sync, every
//     Options.SyncInterval (10 ms), asks for it: before each sync the quota
//     has its committer store what is queued, as one batch without a sync
//     (AheadStore's OnSync), so the sync covers every charge acknowledged
//     before its hook ran: a crash (kill -9, power loss) loses at most the
//     charges acknowledged in the last interval (plus the hook's and the
//     sync's own time), nothing older. Waiting for the commit itself would
//     buy nothing against a crash — a commit without a sync leaves the
//     delta in Pebble's WAL buffer, in this process's memory — and it cost
//     every counted call a round trip through the committer's goroutine;
//     committing each scheduler pass's group as it formed cost a Pebble
//     commit per five charges, where about one per sync does (more when
//     over lingerItems deltas arrive in an interval). A charge that waits
//     for its commit (below), a barrier (Daily, a shard's restart) or
//     lingerItems deltas queued end the linger. Each charge answered ahead
//     starts the store's lag clock (AheadStore.AnsweredAhead), so while
//     the store falls behind (a late sync, a hanging commit:
//     storage.DB.AnswerAhead) or after a failed batch, charges wait for
//     their commit (a failing store is noticed when a batch fails, at the
//     latest at the next sync). A cluster node's quota answers ahead too,
//     charges made from another node's slice (Charge.Lent) included. A
//     queued increment is not in the store yet, so a shard waits for its
//     committer before it loads an account whose increments may be queued
//     (a month's reload with some in flight; on a cluster node, any first
//     touch while anything is queued, since Forget drops accounts with
//     theirs), and the reads a node answers the other members wait for
//     Flush (cluster/rpc).
//   - Strict: the batch is synced before anyone is answered, so many
//     charges share one fsync and a crash loses nothing acknowledged.
//
// Either way the hourly and monthly checks are exact while the process runs:
// a shard counts in memory at once (the next charge sees it) and undoes the
// increment if the batch fails, so memory is "stored + in flight" — except
// for charges answered ahead of a batch that failed: they were served, so
// they stay counted, lost to the store as a crash would lose them (a
// refund of one gives it back in memory only: the store never had it; an
// account loaded from the store again while the committer still remembers
// them, lostKeep, counts them in again, so that refund leaves memory where
// the store is, not one below).
// Refusals and CountTotal ride the next batch without anyone waiting.
// Hourly windows are memory only and reset on restart (SPEC §8: advisory);
// when each hourly warning was last sent is not: it rides the charge's
// delta into the totals record (storage.Totals.HourWarned).
// An account is loaded from the store on its first touch and on a month
// change, then served from memory; idle accounts with nothing in flight are
// evicted by the periodic sweep. Lookups and MCP lookup_ip are charged by
// the same Charge, so they get the same durability.
//
// Usage warnings (SPEC §6) go to the Notifier; see its doc for the rules.
package quota
