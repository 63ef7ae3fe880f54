package checks

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/actors/iplimit"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/actors/recent"
	"github.com/fraudd/fraudd/internal/accesstoken"
)

// SandboxKey is the public sandbox key (SPEC §5.3).
const SandboxKey = "sk_test_sandbox"

// Call is one request as the pipeline sees it. The transport sets Addr and
// Now; Admit sets who is calling; a charge sets RateLimit. Transports pool it
// with their own per-request state.
type Call struct {
	// Addr is the caller's address: the connection's, or the right-most
	// untrusted X-Forwarded-For hop behind a trusted proxy
	// (CLARIFICATIONS.md: Addresses).
	Addr netip.Addr
	// Now is stamped once per request; nothing below reads the clock.
	Now time.Time
	// Auth is the account and the key that authenticated; zero when the
	// caller is anonymous or holds the sandbox key.
	Auth    accounts.Auth
	Sandbox bool
	// RateLimit is set by a charge of a capped account: the X-RateLimit-*
	// figures the answer carries.
	RateLimit RateLimit
	// RequestID is the answer's request id (X-Request-Id), zero-padded;
	// the transport sets it. The console's recent list shows it.
	RequestID [recent.RequestIDMax]byte

	// limits are the per-address limiters Admit left for the operation's
	// charge to take in the same chained call (Access.Chained).
	limits iplimit.Kinds
}

// liveKey reports whether a live key authenticated (the current one or the
// previous one in its grace): not the personal test key, not the sandbox.
func (c *Call) liveKey() bool { return c.Auth.View != nil && c.Auth.Kind != accounts.KeyTest }

// Credential is the secret a caller presented, as the transport read it
// (fastapi: the Authorization bearer): an API key, an OAuth access token or
// the sandbox key.
//
// Key may be a view of the transport's request buffer (fastapi passes one so
// authenticating allocates nothing): Admit reads it and keeps nothing of it,
// and nothing else may.
type Credential struct {
	Key  string // "" when none was read
	Hint string // why none was read (the 401's hint), when Key is ""
}

// Access is one row of the admission table: what an operation asks of its
// caller before it runs.
type Access struct {
	// Key: a secret key or an OAuth access token is required.
	Key bool
	// Allowlist: the live key's IP allowlist applies (the test key is
	// always exempt).
	Allowlist bool
	// Sandbox: the public sandbox key is accepted.
	Sandbox bool
	// Limits are the per-address limiters the operation takes, in the same
	// iplimit hop as the lockout check.
	Limits iplimit.Kinds
	// Chained: the operation charges every admitted call (its function
	// calls charge first), so an admission that can only pass once the
	// limiters allow it leaves them to be taken in the charge's chained
	// call (chain.go): one round trip for both instead of two. A refusal
	// is the same and comes in the same order; only the hop moves.
	Chained bool
}

// The admission table (SPEC §4, §5, §8). An operation that is not here
// takes no limit and needs no key.
var (
	AccessEvaluate  = Access{Key: true, Allowlist: true, Sandbox: true, Chained: true}
	AccessLookup    = Access{Key: true, Allowlist: true, Chained: true}
	AccessChallenge = Access{Key: true, Allowlist: true}
	// AccessMCP is /mcp with a bearer; without one the caller is anonymous
	// and lookup_ip takes the free tool's limits (FreeLookup).
	AccessMCP = Access{Key: true, Allowlist: true}
	// AccessMCPAnonymous is every other anonymous /mcp call (initialize,
	// tools/list, service_status, a malformed body): SPEC 4.11, anonymous
	// use shares the free tool's per-IP limits, and a call that looks
	// nothing up takes the one the free tool's invalid input takes, so it
	// neither runs without bound nor eats the lookups' allowance.
	AccessMCPAnonymous = Access{Limits: iplimit.Of(iplimit.LookupFreeInvalid)}
	// AccessMCPLookup is AccessMCP for a request the transport knows to be
	// one lookup_ip call that goes on to Lookup (which charges it first).
	AccessMCPLookup = Access{Key: true, Allowlist: true, Chained: true}
	AccessUsage     = Access{Key: true, Limits: iplimit.Of(iplimit.Usage)}
	// The routes under /v1/ that take no secret key still refuse a caller
	// the invalid-credential lockout holds (CLARIFICATIONS, Auth: "on
	// /v1/*"); their own calls never count toward it.
	AccessSample  = Access{Limits: iplimit.Of(iplimit.AuthFail, iplimit.Sample)}
	AccessFeed    = Access{Limits: iplimit.Of(iplimit.Feed)}
	AccessCollect = Access{Limits: iplimit.Of(iplimit.AuthFail, iplimit.Protect, iplimit.Collect)}
)

// Admit lets a caller into an operation with access a. With a key it
// resolves the credential into c.Auth (or c.Sandbox), then takes in one
// iplimit hop the lockout check, the per-address protection limit (which
// approved public-interest keys pass) and a's own limiters; an invalid
// credential counts toward the lockout. Without a key it takes a's limiters.
func (s *Service) Admit(c *Call, cred Credential, a Access) *Refusal {
	if !a.Key {
		if a.Limits == 0 {
			return nil
		}
		return s.takeLimits(c, a.Limits)
	}
	if !s.store.Available() {
		return RefuseStorage
	}
	key := cred.Key
	var auth accounts.Auth
	valid, expired := false, false
	switch {
	case key == "":
	case key == SandboxKey:
		c.Sandbox, valid = true, true
	case accesstoken.LooksLikeJWT(key):
		// An OAuth access token authenticates as the account's current key
		// of its type while the key it was minted from still works.
		t, err := s.tokens.Verify(key, c.Now)
		if err == nil {
			auth, valid = s.accounts.ResolveToken(t.Account, t.Test, t.Generation, c.Now)
		}
		expired = errors.Is(err, accesstoken.ErrExpired)
	default:
		auth, valid = s.accounts.Authenticate(key, c.Now)
	}
	kinds := iplimit.Of(iplimit.AuthFail)
	if valid {
		kinds |= a.Limits
		if c.Sandbox || auth.View.Plan != quota.PlanPublicInterest {
			kinds |= iplimit.Of(iplimit.Protect)
		}
	}
	if a.Chained && valid && !c.Sandbox && !auth.View.Suspended &&
		(!a.Allowlist || auth.Kind == accounts.KeyTest || auth.View.Allowed(c.Addr)) {
		// Admitted once the limiters allow it: the charge takes them.
		c.Auth, c.limits = auth, kinds
		return nil
	}
	if ref := s.takeLimits(c, kinds); ref != nil {
		return ref
	}
	switch {
	case key == "":
		return &Refusal{Status: http.StatusUnauthorized, Msg: MsgMissingKey, Hint: cred.Hint}
	case c.Sandbox && !a.Sandbox:
		return &Refusal{Status: http.StatusUnauthorized, Msg: MsgInvalidKey, Hint: HintSandboxOnly}
	case !valid && !expired && s.incomplete != nil && s.incomplete.Incomplete():
		// The key may belong to an account whose configuration this node
		// could not read (a record of a newer build): answering "invalid
		// key" would tell its owner it does not exist, and counting it
		// toward the lockout would lock them out.
		return RefuseStorage
	case !valid:
		// An expired token of ours is the 401 SPEC §5.4 tells the caller
		// to answer by minting a new one: not an invalid credential
		// (CLARIFICATIONS "Auth" lists bad keys, invalid_client, revoked
		// or tampered tokens).
		if !expired {
			s.limits.Fail(iplimit.AuthFail, c.Addr, c.Now)
		}
		return &Refusal{Status: http.StatusUnauthorized, Msg: MsgInvalidKey, Hint: invalidKeyHint(key)}
	case c.Sandbox:
		return nil
	case auth.View.Suspended:
		return refuseSuspended
	case a.Allowlist && auth.Kind != accounts.KeyTest && !auth.View.Allowed(c.Addr):
		return &Refusal{Status: http.StatusForbidden, Msg: MsgNotAllowlisted, Hint: fmt.Sprintf(HintNotAllowlisted, c.Addr)}
	}
	c.Auth = auth
	return nil
}

// Settle takes the limiters Admit left for a charge (Access.Chained) that
// the operation did not make: an answer that never reached the charge still
// counts toward the caller's per-address limits. Transports call it once the
// operation returned; it costs nothing when the charge took them.
func (s *Service) Settle(c *Call) {
	if c.limits == 0 {
		return
	}
	kinds := c.limits
	c.limits = 0
	_ = s.takeLimits(c, kinds) // the answer is out; only the count matters
}

// AdmitOperator lets a caller into the operator API; the transport checked
// the operator token (valid) in constant time. Wrong tokens are throttled
// like bad API keys, on a lockout of their own (iplimit.AdminFail): each
// presented one counts toward it, and a locked-out caller gets 429 with
// Retry-After: 900 whatever it sends, so the token cannot be guessed at line
// rate. Bad API keys from the same address do not count toward it.
func (s *Service) AdmitOperator(c *Call, presented, valid bool) *Refusal {
	if ref := s.takeLimits(c, iplimit.Of(iplimit.AdminFail)); ref != nil {
		return ref
	}
	if !valid {
		if presented {
			s.limits.Fail(iplimit.AdminFail, c.Addr, c.Now)
		}
		return &Refusal{Status: http.StatusUnauthorized, Msg: MsgAdminAuth}
	}
	return nil
}

// invalidKeyHint names the likely cause of a key that did not authenticate.
func invalidKeyHint(key string) string {
	switch {
	case accesstoken.LooksLikeJWT(key):
		return HintExpiredToken
	case key == "undefined" || key == "null" || key == "None" || key == "nil":
		return fmt.Sprintf(HintUnsetKey, key)
	case strings.HasPrefix(key, accounts.PrefixPublishable):
		return HintPublishable
	case len(key) > 7 && strings.EqualFold(key[:7], "bearer "):
		// Before the whitespace case: "Bearer Bearer sk_…" reaches here
		// as "Bearer sk_…", which has a space too.
		return HintBearerTwice
	case strings.ContainsAny(key, " \t\r\n"):
		return HintWhitespace
	case !strings.HasPrefix(key, accounts.PrefixLive) && !strings.HasPrefix(key, accounts.PrefixTest):
		return HintKeyPrefix
	default:
		return HintUnknownKey
	}
}

// takeLimits takes the given per-address limiters for the caller.
func (s *Service) takeLimits(c *Call, kinds iplimit.Kinds) *Refusal {
	v, err := s.limits.Take(kinds, c.Addr, c.Now)
	if err != nil {
		return ServerError(fmt.Errorf("per-address limits: %w", err))
	}
	if v.Allowed {
		return nil
	}
	return limitRefusal(v)
}

// limitRefusal is the answer to a take the limiters refused.
func limitRefusal(v iplimit.Verdict) *Refusal {
	ref := &Refusal{Status: http.StatusTooManyRequests, Msg: MsgTooMany, RetryAfter: v.RetryAfter}
	switch v.Kind {
	case iplimit.AuthFail, iplimit.AdminFail:
		ref.Msg, ref.RetryAfter = MsgLockedOut, RetryAfterLockout
	case iplimit.Usage:
		ref.RetryAfter = RetryAfterUsage
	}
	return ref
}

// What a charged call counts toward, by what it turned out to be: the
// charge table (SPEC §8 and 2.8.6, CLARIFICATIONS.md "Quotas"). Every row
// takes one request from the hourly bucket of the key that authenticated
// (live and test apart; a previous live key in grace uses the live one):
// every attempt counts there, 400s included. Test tokens and the sandbox
// never count toward the month; test-key calls do. total_evaluations leaves
// out test-key calls, test tokens, 400s and the bare degraded allow; a
// degraded answer is read as a visitor check for month_used (the SPEC names
// only its total as left out). The sandbox key, anonymous calls, usage and
// the challenge are never charged. (A console check, when there is one, is
// Live, monthly, neither hourly nor total.)
type outcome uint8

const (
	evalToken      outcome = iota // evaluate with a verified network token
	evalDegraded                  // evaluate without a token: the degraded answer
	evalTestToken                 // evaluate with a fixed test_* token
	evalRejected                  // evaluate answered 400
	lookupAnswered                // a lookup of one public address (HTTP or MCP)
	lookupRejected                // a lookup answered 400 (not one public address)
)

// total says when a charged call counts toward total_evaluations.
type total uint8

const (
	totalNever   total = iota
	totalLiveKey       // unless the personal test key
	// totalAfterScoring: live key, unless the answer is the bare degraded
	// allow; known only after scoring, so recorded then (record.go).
	totalAfterScoring
)

var charges = [...]struct {
	kind    quota.Kind
	monthly bool
	total   total
}{
	evalToken:      {quota.Evaluate, true, totalLiveKey},
	evalDegraded:   {quota.Evaluate, true, totalAfterScoring},
	evalTestToken:  {quota.Evaluate, false, totalNever},
	evalRejected:   {quota.Evaluate, false, totalNever},
	lookupAnswered: {quota.Lookup, true, totalLiveKey},
	lookupRejected: {quota.Lookup, false, totalNever},
}

// charge checks and charges one call of the authenticated account in one
// quota hop, by its row of the charge table, and sets c.RateLimit; the
// limiters Admit left (Access.Chained) are taken first, in the same chained
// call. Charge before any other work, so a refused call costs nothing else.
func (s *Service) charge(c *Call, o outcome) *Refusal {
	ch := s.newChain(c, o)
	ref, _ := s.run(c, ch)
	ch.release()
	return ref
}

// chargeRefusal reads a charge's answer: c.RateLimit for a capped account,
// and the refusal, if any.
func chargeRefusal(c *Call, res quota.ChargeResult, err error) *Refusal {
	if err != nil {
		return storageUnavailable(fmt.Errorf("quota charge for %s: %w", c.Auth.View.ID, err))
	}
	setRateLimit(c, &res)
	switch res.Refusal {
	case quota.RefusedMonthly:
		return &Refusal{Status: http.StatusTooManyRequests, Msg: MsgMonthly, Code: CodeMonthly, RetryAfter: res.RetryAfter, RateLimit: c.RateLimit}
	case quota.RefusedHourly:
		return &Refusal{Status: http.StatusTooManyRequests, Msg: MsgHourly, Hint: HintHourly, RetryAfter: res.RetryAfter, RateLimit: c.RateLimit}
	}
	return nil
}

func setRateLimit(c *Call, res *quota.ChargeResult) {
	if res.Capped {
		c.RateLimit = RateLimit{Capped: true, Limit: res.Limit, Remaining: res.Remaining, Reset: res.Reset}
	}
}

// limitsOf computes an account's allowances at now.
func limitsOf(v *accounts.View, now time.Time) quota.Limits {
	return quota.LimitsFor(v.Plan, v.HourlyLimit, v.MonthlyLimit, v.CreatedAt, now)
}

// bucketOf is the hourly bucket of the key that authenticated: the test key
// has its own; a previous live key in grace uses the live one.
func bucketOf(k accounts.KeyKind) quota.Bucket {
	if k == accounts.KeyTest {
		return quota.Test
	}
	return quota.Live
}
