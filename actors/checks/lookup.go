package checks

import (
	"net/http"
	"net/netip"
	"time"

	"github.com/fraudd/fraudd/actors/iplimit"
	"github.com/fraudd/fraudd/intel/ipaddr"
	"github.com/fraudd/fraudd/intel/netlists"
	"github.com/fraudd/fraudd/intel/score"
	"github.com/fraudd/fraudd/wire"
)

// MaxBulk is the most addresses one bulk lookup checks (SPEC 4.8).
const MaxBulk = 20

// Target is the address a lookup asks about, as the transport read it: one
// public address, or why there is none (answered 400 after the charge).
type Target struct {
	Addr netip.Addr
	bad  *Refusal
}

// OK reports whether t is one public address.
func (t Target) OK() bool { return t.bad == nil }

// Err is why t is not one public address, "" when it is.
func (t Target) Err() string {
	if t.bad == nil {
		return ""
	}
	return t.bad.Msg
}

// The ways a target is not one public address.
var (
	badMissing = &Refusal{Status: http.StatusBadRequest, Msg: MsgMissingIP}
	badFormat  = &Refusal{Status: http.StatusBadRequest, Msg: MsgInvalidIP}
	badPrivate = &Refusal{Status: http.StatusBadRequest, Msg: MsgPrivateIP}
	badMapped  = &Refusal{Status: http.StatusBadRequest, Msg: MsgPrivateIP, Hint: HintMappedIP}
	// badReserved is GET /v1/lookup's answer, which names the cause.
	badReserved = &Refusal{Status: http.StatusBadRequest, Msg: MsgPrivateIP, Hint: HintPrivateIP}
)

// MissingIP is a request that names no address (POST /api/lookup).
func MissingIP() Target { return Target{bad: badMissing} }

// InvalidIP is an address field that is not a string.
func InvalidIP() Target { return Target{bad: badFormat} }

// PathTarget reads GET /v1/lookup/{ip}'s address strictly (SPEC 4.2): one
// IPv4 or IPv6 address, public, not IPv4-mapped.
func PathTarget(s string) Target {
	a, mapped, err := ipaddr.ParseStrict(s)
	switch {
	case err != nil:
		return Target{bad: badFormat}
	case mapped:
		return Target{bad: badMapped}
	case !ipaddr.IsPublic(a):
		return Target{bad: badReserved}
	}
	return Target{Addr: a}
}

// PastedTarget reads a pasted address form (SPEC 4.7: 1.2.3.4:80, [v6]:443,
// a URL, fullwidth digits, ::ffff:1.2.3.4) and requires it public.
func PastedTarget(s string) Target {
	a, err := ipaddr.ParseLoose(s)
	if err != nil {
		return Target{bad: badFormat}
	}
	if !ipaddr.IsPublic(a) {
		return Target{bad: badPrivate}
	}
	return Target{Addr: a}
}

// Lookup is GET /v1/lookup/{ip} (SPEC 4.2) and MCP lookup_ip with a key, for
// an admitted caller. A target that is not one public address still uses one
// hourly request; only answered lookups count toward the month and (live
// keys) the totals.
func (s *Service) Lookup(c *Call, t Target) (*wire.Lookup, *Refusal) {
	start := time.Now()
	out := lookupAnswered
	if !t.OK() {
		out = lookupRejected
	}
	if ref := s.charge(c, out); ref != nil {
		return nil, ref
	}
	if !t.OK() {
		return nil, t.bad
	}
	ls := new(lookupState)
	b := s.feeds.Current().Bare(t.Addr)
	ls.fill(t.Addr, &b)
	ls.applyPins(t.Addr, &c.Auth.View.Policy)
	s.recordLookup(c, &b)
	ls.resp.Test = !c.liveKey()
	ls.resp.LatencyMs = msSince(start)
	return &ls.resp, nil
}

// FreeLookup is POST /api/lookup (SPEC 4.7) and anonymous MCP lookup_ip:
// no account, the free tool's per-address limits. Invalid input is not
// counted against the lookup limit but has its own.
func (s *Service) FreeLookup(c *Call, t Target) (*wire.Lookup, *Refusal) {
	start := time.Now()
	kind := iplimit.LookupFree
	if !t.OK() {
		kind = iplimit.LookupFreeInvalid
	}
	if ref := s.takeLimits(c, iplimit.Of(kind)); ref != nil {
		return nil, ref
	}
	if !t.OK() {
		return nil, t.bad
	}
	ls := new(lookupState)
	b := s.feeds.Current().Bare(t.Addr)
	ls.fill(t.Addr, &b)
	ls.resp.LatencyMs = msSince(start)
	return &ls.resp, nil
}

// BulkList is a decoded bulk request: the distinct public addresses to
// check (at most MaxBulk, in request order) and what was skipped.
type BulkList struct {
	Addrs      []netip.Addr
	Invalid    int // malformed, private, reserved or not a string
	NotChecked int // valid public addresses beyond the cap
}

// Bulk is POST /api/lookup-bulk (SPEC 4.8). Only a batch with a valid
// address counts toward the per-address limit.
func (s *Service) Bulk(c *Call, list *BulkList) (*wire.Bulk, *Refusal) {
	start := time.Now()
	if len(list.Addrs) == 0 {
		return nil, Invalid(MsgBulkNoValid)
	}
	if ref := s.takeLimits(c, iplimit.Of(iplimit.LookupBulk)); ref != nil {
		return nil, ref
	}
	out := &wire.Bulk{Invalid: list.Invalid, NotChecked: list.NotChecked, Results: make([]wire.Lookup, 0, len(list.Addrs))}
	snap := s.feeds.Current()
	for _, a := range list.Addrs {
		var ls lookupState
		b := snap.Bare(a)
		out.Results = append(out.Results, *ls.fill(a, &b))
	}
	out.Total = len(out.Results)
	out.Skipped = out.Invalid + out.NotChecked
	lat := msSince(start)
	for i := range out.Results {
		out.Results[i].LatencyMs = lat
	}
	return out, nil
}

// sourceASN is the network block's source (SPEC 2.3: display only).
const sourceASN = "asn_table"

// lookupState is one lookup answer under construction; its fields back the
// wire pointers so a lookup allocates little.
type lookupState struct {
	resp    wire.Lookup
	signals wire.LookupSignals
	network wire.LookupNetwork
	asn     uint32
	org     string
	reg     string
	excs    [score.MaxPinMatches]string
	ev      wire.LookupEvidence
	evs     [2]wire.NetworkEvidence // Tor, cloud
}

// fill builds the SPEC 2.3 answer for a public address from a bare
// classification.
func (ls *lookupState) fill(addr netip.Addr, b *netlists.BareResult) *wire.Lookup {
	r := &ls.resp
	*r = wire.Lookup{IP: addr.String(), Known: b.Known, Verdict: b.Verdict, RiskScore: b.RiskScore}
	if b.Known {
		// On a bare address only Tor and published cloud ranges are checked,
		// so vpn and proxied are always false (SPEC 2.3).
		ls.signals = wire.LookupSignals{Tor: b.Tor, DCH: b.Datacenter, Anon: b.Anonymous}
		r.Signals = &ls.signals
		// Why (additive): the one list that decided.
		ls.ev.Network = ls.evs[:0]
		if b.Tor {
			ls.ev.Network = append(ls.ev.Network, wire.NetworkEvidence{Flag: netlists.FlagTor, Source: netlists.SourceTorExits.Name(), Listed: b.TorListed})
		}
		if b.Datacenter {
			ls.ev.Network = append(ls.ev.Network, wire.NetworkEvidence{Flag: netlists.FlagDatacenter, Source: netlists.SourceCloudRanges.Name(), Detail: b.Cloud, Listed: b.CloudListed})
		}
		r.Evidence = &ls.ev
	}
	ls.network = wire.LookupNetwork{Cloud: b.Cloud, Source: sourceASN}
	if b.ASN != 0 {
		ls.asn = b.ASN
		ls.network.ASN = &ls.asn
	}
	if b.Org != "" {
		ls.org = b.Org
		ls.network.Org = &ls.org
	}
	if b.RegCountry != "" {
		ls.reg = b.RegCountry
		ls.network.RegistrationCountry = &ls.reg
	}
	if b.Known || b.ASN != 0 {
		r.Network = &ls.network
	}
	return r
}

// applyPins lets the account's IP exception pins author the verdict. The
// engine's verdict stays visible whenever a pin matched (SPEC 2.3).
func (ls *lookupState) applyPins(addr netip.Addr, pol *score.Policy) {
	if len(pol.Pins) == 0 {
		return
	}
	var in score.Input
	in.Network.IP = addr
	in.Policy.Pins = pol.Pins
	var res score.Result
	score.Evaluate(&in, &res)
	win, ok := res.ExceptionWinner()
	if !ok || !win.IsIP() {
		return
	}
	r := &ls.resp
	r.EngineVerdict = r.Verdict
	r.Verdict = win.Action.String()
	r.VerdictSource = "exception"
	r.ExceptionMatched = res.AppendExceptions(ls.excs[:0])
}
