package fastapi

import (
	"bytes"
	"errors"
	"net/netip"
	"time"

	"github.com/bytedance/sonic"
	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/actors/iplimit"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/intel/ipaddr"
	"github.com/fraudd/fraudd/intel/netlists"
	"github.com/fraudd/fraudd/intel/score"
	"github.com/fraudd/fraudd/wire"
)

const (
	msgInvalidIP  = "Invalid IP format."
	msgPrivateIP  = "Private or reserved IP — nothing to look up."
	msgMissingIP  = "Missing IP address."
	maxBulk       = 20
	sourceASN     = "asn_table"
	hintMappedIP  = "Send the IPv4 address alone, without the ::ffff: prefix."
	hintPrivateIP = "Only public addresses have network intelligence."
)

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
}

// fillLookup builds the SPEC 2.3 answer for a public address from a bare
// classification.
func fillLookup(ls *lookupState, addr netip.Addr, b *netlists.BareResult) *wire.Lookup {
	r := &ls.resp
	*r = wire.Lookup{IP: addr.String(), Known: b.Known, Verdict: b.Verdict, RiskScore: b.RiskScore}
	if b.Known {
		// On a bare address only Tor and published cloud ranges are checked,
		// so vpn and proxied are always false (SPEC 2.3).
		ls.signals = wire.LookupSignals{Tor: b.Tor, DCH: b.Datacenter, Anon: b.Anonymous}
		r.Signals = &ls.signals
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
func applyPins(ls *lookupState, addr netip.Addr, pol *score.Policy) {
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

// handleLookup is GET /v1/lookup/{ip} (SPEC 4.2).
func (s *Server) handleLookup(ctx *fasthttp.RequestCtx, r *request) {
	start := time.Now()
	testKey := r.auth.Kind == accounts.KeyTest
	addr, mapped, perr := ipaddr.ParseStrict(r.param(0))
	ok := perr == nil && !mapped && ipaddr.IsPublic(addr)
	// A 400 still uses one hourly request; only answered lookups count toward
	// the month and (live keys) the totals.
	if _, pass := s.charge(ctx, r, quota.Lookup, ok, ok && !testKey); !pass {
		return
	}
	switch {
	case perr != nil:
		s.writeError(ctx, fasthttp.StatusBadRequest, msgInvalidIP, "", "")
		return
	case mapped:
		s.writeError(ctx, fasthttp.StatusBadRequest, msgPrivateIP, "", hintMappedIP)
		return
	case !ok:
		s.writeError(ctx, fasthttp.StatusBadRequest, msgPrivateIP, "", hintPrivateIP)
		return
	}
	var ls lookupState
	b := s.deps.Feeds.Current().Bare(addr)
	fillLookup(&ls, addr, &b)
	applyPins(&ls, addr, &r.auth.View.Policy)
	if !testKey {
		s.recordLookup(r, &b)
	}
	ls.resp.Test = testKey
	ls.resp.LatencyMs = msSince(start)
	s.writeJSON(ctx, fasthttp.StatusOK, &ls.resp)
}

// freeLookupBody is POST /api/lookup's body.
type freeLookupBody struct {
	IP sonic.NoCopyRawMessage `json:"ip"`
}

// readFreeIP reads the ip field of a free-lookup body: missing, not a string,
// or not a public address are distinct errors.
func readFreeIP(body []byte) (netip.Addr, error) {
	var in freeLookupBody
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' || sonic.ConfigStd.Unmarshal(body, &in) != nil || isAbsent(in.IP) {
		return netip.Addr{}, errMissingIP
	}
	raw, ok := jsonString(in.IP)
	if !ok {
		return netip.Addr{}, errBadIP
	}
	return parsePublic(raw)
}

var (
	errMissingIP = errors.New(msgMissingIP)
	errBadIP     = errors.New(msgInvalidIP)
	errPrivateIP = errors.New(msgPrivateIP)
)

// parsePublic reads a pasted address form (SPEC 4.7) and requires it public.
func parsePublic(raw string) (netip.Addr, error) {
	a, err := ipaddr.ParseLoose(raw)
	if err != nil {
		return netip.Addr{}, errBadIP
	}
	if !ipaddr.IsPublic(a) {
		return netip.Addr{}, errPrivateIP
	}
	return a, nil
}

// handleFreeLookup is POST /api/lookup (SPEC 4.7): no auth, per-address limits;
// invalid input is not counted against the lookup limit but has its own.
func (s *Server) handleFreeLookup(ctx *fasthttp.RequestCtx, r *request) {
	start := time.Now()
	addr, err := readFreeIP(ctx.PostBody())
	if err != nil {
		if !s.takeLimits(ctx, r, iplimit.Of(iplimit.LookupFreeInvalid)) {
			return
		}
		s.writeError(ctx, fasthttp.StatusBadRequest, err.Error(), "", "")
		return
	}
	if !s.takeLimits(ctx, r, iplimit.Of(iplimit.LookupFree)) {
		return
	}
	var ls lookupState
	b := s.deps.Feeds.Current().Bare(addr)
	fillLookup(&ls, addr, &b)
	ls.resp.LatencyMs = msSince(start)
	s.writeJSON(ctx, fasthttp.StatusOK, &ls.resp)
}

// bulkBody is POST /api/lookup-bulk's body; email is deprecated and ignored.
type bulkBody struct {
	IPs []sonic.NoCopyRawMessage `json:"ips"`
}

// bulkList is a decoded bulk request: the distinct public addresses to check
// (at most maxBulk, in request order) and what was skipped.
type bulkList struct {
	addrs      []netip.Addr
	invalid    int // malformed, private, reserved or not a string
	notChecked int // valid public addresses beyond the cap
}

var errBulkList = errors.New("Missing list: send {\"ips\": [\"1.2.3.4\", …]} with up to 20 addresses.")

// decodeBulk reads a bulk body. Duplicates, including two spellings of one
// address, are dropped silently (CLARIFICATIONS.md).
func decodeBulk(body []byte) (bulkList, error) {
	var in bulkBody
	var out bulkList
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' || sonic.ConfigStd.Unmarshal(body, &in) != nil || in.IPs == nil {
		return out, errBulkList
	}
	seen := make(map[netip.Addr]struct{}, min(len(in.IPs), 64))
	for _, raw := range in.IPs {
		str, ok := jsonString(raw)
		if !ok {
			out.invalid++
			continue
		}
		a, err := parsePublic(str)
		if err != nil {
			out.invalid++
			continue
		}
		if _, dup := seen[a]; dup {
			continue
		}
		seen[a] = struct{}{}
		if len(out.addrs) == maxBulk {
			out.notChecked++
			continue
		}
		out.addrs = append(out.addrs, a)
	}
	return out, nil
}

// handleBulkLookup is POST /api/lookup-bulk (SPEC 4.8).
func (s *Server) handleBulkLookup(ctx *fasthttp.RequestCtx, r *request) {
	start := time.Now()
	list, err := decodeBulk(ctx.PostBody())
	if err != nil {
		s.writeError(ctx, fasthttp.StatusBadRequest, err.Error(), "", "")
		return
	}
	addrs := list.addrs
	out := wire.Bulk{Invalid: list.invalid, NotChecked: list.notChecked, Results: make([]wire.Lookup, 0, len(addrs))}
	if len(addrs) == 0 {
		s.writeError(ctx, fasthttp.StatusBadRequest, "No valid public IP address in the list.", "", "")
		return
	}
	// Only a batch with a valid address counts toward the limit.
	if !s.takeLimits(ctx, r, iplimit.Of(iplimit.LookupBulk)) {
		return
	}
	snap := s.deps.Feeds.Current()
	for _, a := range addrs {
		var ls lookupState
		b := snap.Bare(a)
		out.Results = append(out.Results, *fillLookup(&ls, a, &b))
	}
	out.Total = len(out.Results)
	out.Skipped = out.Invalid + out.NotChecked
	lat := msSince(start)
	for i := range out.Results {
		out.Results[i].LatencyMs = lat
	}
	s.writeJSON(ctx, fasthttp.StatusOK, &out)
}
