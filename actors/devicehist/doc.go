// Package devicehist owns each customer's view of devices and end-user
// accounts: device.customer_history, linked_accounts and multi_account, the
// per-customer half of high_activity, and the `account` object of SPEC 2.2
// (accounts on this device / devices of this account / accounts from this
// address in 24 h, new_device, related accounts in 90 days). The device's
// global sightings (times_seen, first_seen) are actors/events'; this package
// builds on it and never counts a second times_seen.
//
// # One hop
//
// Everything one evaluate touches — the (customer, device) record, the
// (customer, account) record, the (customer, address) record, and the
// customer's other devices and addresses behind the related-accounts count —
// belongs to the customer, so shards are chosen by customer id and one
// Observe is one Send plus a reply on a pooled channel. The trade-off: one
// customer's traffic is served by one shard goroutine (a few µs per
// observation, so well over 100k observations/s for a single customer), and
// nothing here spans customers; "identified across many customers" is left
// to actors/events' global sightings (HighActivity).
//
// # What is kept (all keyed per customer; retention 90 days)
//
//   - (customer, device): visits per UTC day in the window and per hour for
//     24 h, the last 32 event-id hashes (a resubmitted event counts once),
//     last_seen, and the end-user accounts seen with it (≤ 256).
//   - (customer, account): the account id's keyed hash (HMAC-SHA256 under a
//     key derived from the master secret, over customer ‖ 0 ‖ accountId, cut
//     to 16 bytes) and its AES-GCM sealed copy; first and last check; the
//     devices (≤ 64) and addresses (≤ 32) it was checked on. Deleted — sealed
//     copy included — 90 days after its last check (SPEC 2.1).
//   - (customer, address): the accounts seen from it (≤ 256). Shared exits
//     (VPN, proxy, relay, datacenter, Tor, mobile) and unmeasured addresses
//     are never linked or counted: their count is null on the wire and
//     sharing one says nothing about two accounts.
//
// Lists are bounded; beyond a bound the least recently seen entry makes
// room, so counts saturate there. Windows are exact to the second for links
// (24 h, 90 days), to the hour for Visits24h, and to the UTC day for visits
// (a day stays while any part of it is within 90 days).
//
// Test-key observations (Observation.Test) are answered as if recorded —
// computed on scratch copies — and never stored, so test traffic appears in
// no later answer. A repeated event id adds no visit but still links its
// account and address.
//
// # Durability
//
// Recording is part of the Observe message: the shard changes its records in
// memory, notes them dirty and answers; nothing is written per call. Before
// each group sync of the store (storage.DB.OnSync, every
// Options.SyncInterval, 10 ms by default) the client asks every shard with
// changes to encode them as one write (storage.HistWrite), and one group
// committer stores the writes of all shards as one batch before the sync
// runs. A record that changed many times in an interval is written once,
// and one that changes again in the next few seconds goes into the store's
// history journal and is written in its own place once per window
// (storage.WriteHist).
// A crash (kill -9, power loss) loses at most the changes of the last
// interval (plus the time one flush and sync take), the same bound as the
// usage counts, and nothing older. Shards load a record on first touch after
// a restart and evict entries idle for IdleAfter once their changes are
// stored, or sooner, least recently used first, when a shard holds its
// bound (Config.MaxDevices, MaxAccounts, MaxAddresses). An entry whose write failed is the only copy of what it holds and
// stays in memory (it is never evicted as idle) until a later write of it
// is stored.
//
// # Retention
//
// By time-bucketed keys, never by scanning everything: each stored record
// has one expiry-index entry under the UTC day of the oldest timestamp it
// holds (storage.ExpiredHist). Once a day of the service clock, Prune walks
// only the index days that fell out of the window and has each record's
// owning shard trim it (rewriting it under its new index day) or delete it,
// index entries included. A record is gone within a day of its content
// turning 90 days old. A record whose stored value does not decode can be
// neither trimmed nor read (evaluations go on without it, with a warning),
// so the prune that finds it past the window deletes it whole, with one
// error naming its key (storage.DropUndecodableHist); a record the store
// fails to read is left for the next prune.
//
// # Mirror (cluster mode)
//
// A lease holder answers an evaluation's facts without a hop to the
// account's owner (mirror.go): the owner's shard pushes a watcher a
// snapshot of the records it asks for (Watch) and then every record the
// customer's changes touch (observe, merge, expiry; a take pushes Reset),
// in the shard's order; the holder's shard keeps them in memory only
// (MirrorApply) and computes facts over copies as for a test observation
// (MirrorObserve, or ObserveThen with Prepared.SetMirror), answering
// ErrNotMirrored when a record it needs is missing. A node that neither
// watches nor mirrors pays one map-length check per observation.
//
// A record the holder never saw need not miss when the owner holds none
// either (filter.go): on a watcher's first watch of a customer the owner
// builds, off its shard (at most two builds at once), a Bloom filter of
// ~1% false positives over the identities of every record of the customer
// it holds — after a barrier, its store's keys of that customer
// (storage.HistIdentitiesOf), plus what only its memory holds and what it
// pushed meanwhile — and its shard sends it in its order
// (MirrorPush.Filter, at most 3 MiB; none for a customer of more than 4M
// records, or when the scan fails). The holder keeps it with the
// customer's mirror (MirrorDrop, Reset and the sweep drop it), adds every
// present record a later push brings, so it stays a superset of what the
// owner holds, and answers a record it lacks that the filter surely lacks
// as new (empty), as the owner would; a maybe-present one is still
// ErrNotMirrored. It refuses a filter declaring more than 32 Mbit or 32
// hash functions before allocating it.
//
// # Admin
//
// Devices lists a customer's 50 most recently seen devices from the store's
// recency index (after a barrier that flushes the customer's shard and
// waits for its writes), or from memory without a store.
package devicehist
