// Package iplimit owns the per-address limiters of SPEC §8 and the
// invalid-credential lockout of §5: fixed windows that start at the first
// request of the window, kept per caller address and, for IPv6 where the
// table gives a /64 figure, per /64 as a second limit shared by the prefix
// (CLARIFICATIONS "Addresses"). The limiters are one table (Rules), not
// special cases. Addresses are spread over shard actors so that an address
// and its /64 live in the same shard; one Take checks several limiters for one
// request in one hop, all or nothing.
//
// How handlers use it (one hop per request; now stamped once per request):
//
//	/v1/* (authenticated)  resolve the key in memory first; then
//	                       Take(Of(AuthFail, Protect)) — drop Protect for approved
//	                       public-interest keys; on an invalid credential Fail(addr)
//	/v1/usage              Take(Of(AuthFail, Usage))
//	/oauth/token           Take(Of(AuthFail, OAuth)); invalid_client → Fail(addr)
//	/v1/evaluate/sample    Take(Of(Sample))
//	/api/lookup, MCP anon  parse first: Take(Of(LookupFree)) for a valid address,
//	                       Take(Of(LookupFreeInvalid)) for invalid input (not counted
//	                       toward LookupFree); any other anonymous MCP call
//	                       Take(Of(LookupFreeInvalid))
//	/api/lookup-bulk       parse first: a batch with no valid public address does
//	                       not call Take at all; otherwise Take(Of(LookupBulk))
//
// A refused Take names the refusing limiter (Verdict.Kind) and Retry-After
// seconds: 429 with "Too many requests." and the SPEC's code for that surface;
// an AuthFail refusal is the lockout (Retry-After 900 at the moment of locking).
// A refused Take consumes nothing. An error means the limiter did not answer
// in time; per-address limits may fail open.
//
// Entries whose window has ended are equivalent to absent ones: the periodic
// sweep deletes them and shrinks the shard maps, so memory follows the number
// of addresses active in the longest window, not the number ever seen.
package iplimit
