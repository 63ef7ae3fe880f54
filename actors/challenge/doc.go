// Package challenge owns the experimental device-evidence beta's mutable
// state (SPEC 2.5, 2.6, §3 "Device-evidence challenge", §8 limits): issued
// challenges, each customer's issuance window, the latest GPU feature vector
// per device, and the keyed hashes behind the antidetect_randomization and
// antidetect_profile_burst findings.
//
// State is sharded by customer: one shard actor owns everything of a
// customer, so an evaluation that submits evidence costs exactly one actor
// hop (Submit), and issuing a challenge another (Issue). Time is always the
// caller's (the service clock), never read here, so tests drive expiry by
// passing Now.
//
// Device ids, account ids and computation readings are kept only as keyed
// hashes (HMAC-SHA256 under Config.Key, truncated to 16 bytes); raw browser
// reports are never kept. Feature vectors live in memory; their sealed
// storage format is storage/challenge.go.
//
// Lifecycle of a challenge: issued (bound to customer, event and device) →
// used (one accepted submission) or expired (2 minutes on the service clock).
// Disabling the beta for a customer (Purge) deletes the customer's samples,
// hashes and challenges.
package challenge
