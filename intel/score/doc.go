// Package score is the decision engine of SPEC §2.8: it turns what the network,
// device, email, time-zone and account layers measured into a decision
// (allow, review, block), a 0–100 risk score, SPEC §2.7 reason codes and the
// legacy isSuspicious flag, then applies the account's custom rules and
// exception pins (ADMIN.md).
//
// The package is pure and allocation-free on the request path: Evaluate reads
// an Input and writes a Result whose sets are bitsets and fixed arrays, so the
// handler can keep both on its stack or in a pooled context. It imports nothing
// of this module; the network layer's answer arrives as the small Network
// struct defined here, so the feed packages can change without touching the
// engine.
//
// Fixed orders, relied on by golden files and callers:
//   - reasons: the alphabetical listing of SPEC §2.7 (see Reason);
//   - rule signals (Result.Fired, Result.RuleMatched): the listing of ADMIN.md
//     (see Signal);
//   - matched exception pins: the order of Policy.Pins.
//
// The risk score formula is documented on Evaluate.
package score
