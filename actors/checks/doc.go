// Package checks owns the flow of every public operation of the service,
// free of any transport: evaluate (a visitor check, a test token, the
// sandbox, a sample), the bare lookup (with a key and anonymous), the
// collector's network and device calls, usage, and the device-evidence
// challenge. fastapi decodes an HTTP or MCP request, calls one function here
// and encodes what it returns; a cluster node calls the same functions,
// with local or remote actors behind the same interfaces (checks.go). No
// flow is written twice.
//
// Each operation is one function that reads top to bottom in four stages,
// the way an evaluation flows:
//
//	transport (fastapi: HTTP, MCP): decode → Call{Addr, Now} + request
//	  │
//	  ▼
//	1. admit    Admit: credential → account; lockout, protection and the
//	            operation's per-address limits in one iplimit hop. Then one
//	            quota hop charges the call by the rule table in admit.go.
//	            A refusal ends the call here: nothing else is charged,
//	            resolved or recorded.                        ──▶ *Refusal
//	  │
//	  ▼
//	2. resolve  the facts the answer needs from the actors, every call named
//	            in facts.go: the device event (events), this customer's
//	            history (devicehist), the device evidence (challenge). Each
//	            fails open: the answer goes on without what it could not read.
//	  │
//	  ▼
//	3. score    intel/score over the request, the feed snapshot and the
//	            facts: pure, no I/O.
//	  │
//	  ▼
//	4. record   totals, threat-feed traffic, webhooks (record.go):
//	            fire-and-forget, never waited on.
//	  │
//	  ▼
//	answer (wire shapes, built in build.go) ──▶ transport encodes it
//
// One round trip. For a counted call (evaluate, lookup, MCP lookup_ip) the
// iplimit hop, the quota hop and the event and history calls are not four
// waits but one chained call (chain.go): a single message goes limiter →
// quota (→ its commit) → events → devicehist, each actor handing it to the
// next, and the caller waits once for the answer. A refusal stops it where
// it happens, so the order of the stages above is kept exactly. In cluster
// mode, when the account's owner is another node, the quota client sends
// the charge, the event and the history together to the owner
// (OwnerStep, owner.go), which runs them in the same order
// (OwnerParts.Run): still one round trip.
//
// A refusal is a value (Refusal: status, code, message, hint, Retry-After,
// rate-limit figures), rendered in one place per transport: an error body
// for HTTP, a JSON-RPC error for MCP. Every public message text is in
// messages.go.
package checks
