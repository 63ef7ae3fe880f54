package iplimit

import "time"

// Kind names one limiter.
type Kind uint8

// Limiters, in the order Take checks them: the first refusing one answers.
const (
	AuthFail          Kind = iota // invalid-credential lockout: Take refuses while locked; Fail counts
	Protect                       // authenticated endpoints, per source address
	LookupFree                    // POST /api/lookup and anonymous MCP lookup_ip, valid input
	LookupFreeInvalid             // the same with invalid input (its own limit), and anonymous MCP calls other than lookup_ip
	LookupBulk                    // POST /api/lookup-bulk batches
	Sample                        // GET /v1/evaluate/sample
	Usage                         // GET /v1/usage reads
	OAuth                         // POST /oauth/token exchanges
	Feed                          // GET /api/threat-feed (no SPEC figure: a generous guard)
	Collect                       // POST /v1/collect/* from visitors' browsers (no SPEC figure: a guard against token farming)
	AdminFail                     // wrong operator tokens: a lockout of its own, like AuthFail
	NumKinds
)

// Window is one fixed window of a limiter.
type Window struct {
	Len     time.Duration
	PerAddr int64 // requests per address in the window
	Per64   int64 // requests per IPv6 /64 in the window, shared by its addresses; 0: no /64 limit
}

// Rule is one limiter: every window must have room for a request to pass.
// A rule with LockFor > 0 is a lockout: Fail counts into its window, reaching
// the window's figure locks the address (or /64) for LockFor, and Take only
// checks the lock.
type Rule struct {
	Name    string
	Windows []Window
	LockFor time.Duration
	// Local: each cluster member counts it alone; it is never reported to
	// the address's owner, nor taken from one.
	Local bool
}

// Rules is the table of SPEC §8 / §5 figures.
var Rules = [NumKinds]Rule{
	// The lockout also counts per IPv6 /64: one subscriber's /64 holds more
	// addresses than anyone can exhaust, so a per-address count alone lets
	// a guesser rotate through them. Its figure is larger, six times the
	// address's as the free lookup's is (CLARIFICATIONS "Addresses": the
	// /64 shares larger figures), so that one host's bad keys lock out that
	// host, not every host of a LAN that shares the /64.
	AuthFail:          {Name: "auth_fail", Windows: []Window{{Len: 15 * time.Minute, PerAddr: 20, Per64: 120}}, LockFor: 15 * time.Minute},
	Protect:           {Name: "protect", Windows: []Window{{Len: time.Hour, PerAddr: 200_000}}},
	LookupFree:        {Name: "lookup_free", Windows: []Window{{Len: time.Minute, PerAddr: 12, Per64: 72}, {Len: 24 * time.Hour, PerAddr: 80, Per64: 480}}},
	LookupFreeInvalid: {Name: "lookup_free_invalid", Windows: []Window{{Len: time.Minute, PerAddr: 60}}},
	LookupBulk:        {Name: "lookup_bulk", Windows: []Window{{Len: time.Hour, PerAddr: 3, Per64: 12}}},
	Sample:            {Name: "sample", Windows: []Window{{Len: time.Minute, PerAddr: 30}}},
	Usage:             {Name: "usage", Windows: []Window{{Len: time.Minute, PerAddr: 120}}},
	OAuth:             {Name: "oauth", Windows: []Window{{Len: time.Minute, PerAddr: 60}}},
	Feed:              {Name: "threat_feed", Windows: []Window{{Len: time.Minute, PerAddr: 120}}},
	Collect:           {Name: "collect", Windows: []Window{{Len: time.Minute, PerAddr: 300, Per64: 1200}}},
	// The operator API's own lockout, with AuthFail's figures: customers'
	// bad keys from an address (a shared NAT) do not lock the operator out
	// (ADMIN.md: a wrong admin token is 401), nor do wrong admin tokens lock
	// the address out of /v1/* (CLARIFICATIONS: that lockout is /v1/* and
	// /oauth/token). Not shared among cluster members: each counts its own.
	AdminFail: {Name: "admin_fail", Windows: []Window{{Len: 15 * time.Minute, PerAddr: 20, Per64: 20}}, LockFor: 15 * time.Minute, Local: true},
}

// String is the limiter's name.
func (k Kind) String() string {
	if k < NumKinds {
		return Rules[k].Name
	}
	return "unknown"
}

// Kinds is a set of limiters taken together.
type Kinds uint16

// Of is the set of the given limiters.
func Of(kinds ...Kind) Kinds {
	var s Kinds
	for _, k := range kinds {
		s |= 1 << k
	}
	return s
}

// Has reports whether k is in the set.
func (s Kinds) Has(k Kind) bool { return s&(1<<k) != 0 }
