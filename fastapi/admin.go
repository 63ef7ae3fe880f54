package fastapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/actors/checks"
	"github.com/fraudd/fraudd/actors/mailer"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/actors/webhook"
	"github.com/fraudd/fraudd/intel/score"
	"github.com/fraudd/fraudd/internal/clock"
	"github.com/fraudd/fraudd/internal/weborigin"
	"github.com/fraudd/fraudd/wire"
)

// decodeStrict reads a JSON body into v, rejecting unknown fields so an
// operator's typo is an error rather than a silent no-op, and invalid UTF-8,
// which encoding/json would quietly turn into U+FFFD.
func decodeStrict(body []byte, v any) error {
	if !utf8.Valid(body) {
		return errors.New("the body is not valid UTF-8")
	}
	// encoding/json reads a bare null into a struct or slice as nothing at
	// all: a PATCH of null answered 200 having changed nothing, and a clock
	// call of null answered the time as if {} had been sent. Every admin
	// body is an object or an array.
	if string(bytes.TrimSpace(body)) == "null" {
		return errors.New("the body is null, not a JSON object or array")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if k, dup := duplicateKey(body); dup {
		return fmt.Errorf("the key %q appears twice in one object (keys are matched whatever their case)", k)
	}
	// More() is false before a stray ] or }: only the end of the input is
	// the end of the value.
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// duplicateKey finds a key given twice in one object of a valid JSON
// document, compared as encoding/json matches keys to fields (whatever
// their case): the decoder keeps the last, so {"url":"https://…","URL":null}
// read as a removal and a rule on vpn could be stored as one on tor.
func duplicateKey(body []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	type frame struct {
		object bool
		keys   map[string]struct{}
		key    bool // the next string token is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false // the end, or what Decode already refused
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if k, isStr := tok.(string); isStr && top != nil && top.object && top.key {
			fold := strings.ToLower(k)
			if _, seen := top.keys[fold]; seen {
				return k, true
			}
			top.keys[fold] = struct{}{}
			top.key = false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, keys: map[string]struct{}{}, key: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		// A value ended (a scalar, or a closed object or array): in an
		// object the next token is a key.
		if len(stack) > 0 && stack[len(stack)-1].object {
			stack[len(stack)-1].key = true
		}
	}
}

// nullField returns the first of names (matched as encoding/json matches
// keys to fields, whatever their case) that a JSON object body gives as null.
func nullField(body []byte, names ...string) string {
	var raw map[string]json.RawMessage
	if json.Unmarshal(body, &raw) != nil {
		return ""
	}
	for k, v := range raw {
		if string(v) != "null" {
			continue
		}
		for _, n := range names {
			if strings.EqualFold(k, n) {
				return n
			}
		}
	}
	return ""
}

// orNotArray names what was wrong with a body that decoded without error
// but to nothing (null).
func orNotArray(err error) error {
	if err != nil {
		return err
	}
	return errors.New("null is not an array")
}

// maxWebhookURL bounds a webhook receiver's URL.
const maxWebhookURL = 2048

func (s *Server) badRequest(ctx *fasthttp.RequestCtx, format string, args ...any) {
	s.writeError(ctx, fasthttp.StatusBadRequest, fmt.Sprintf(format, args...), "", "")
}

// adminFailure maps an accounts error to its status.
func (s *Server) adminFailure(ctx *fasthttp.RequestCtx, where string, err error) {
	switch {
	case errors.Is(err, accounts.ErrNotFound):
		s.refuse(ctx, refuseNoAccount)
	case errors.Is(err, accounts.ErrExists):
		s.writeError(ctx, fasthttp.StatusConflict, checks.MsgAccountExists, "", "")
	case errors.Is(err, accounts.ErrConflict):
		s.writeError(ctx, fasthttp.StatusConflict, checks.MsgAccountConflict, "", checks.HintAccountConflict)
	case errors.Is(err, accounts.ErrUnavailable):
		s.storageUnavailable(ctx)
	default:
		s.serverError(ctx, where, err)
	}
}

func fmtTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// accountView renders an account without secrets.
func accountView(v *accounts.View, now time.Time) *wire.Account {
	out := &wire.Account{
		ID: v.ID, Email: v.Email, Plan: v.Plan, CreatedAt: fmtTime(v.CreatedAt),
		HourlyLimit: v.HourlyLimit, MonthlyLimit: v.MonthlyLimit, Suspended: v.Suspended,
		Allowlist: nonNil(v.Allowlist), Origins: nonNil(v.Origins), DeviceEvidenceBeta: v.DeviceEvidenceBeta,
		PublishableKey: v.PublishableKey,
		LiveKey:        wire.KeyInfo{Prefix: v.Live.Prefix, Last4: v.Live.Last4, CreatedAt: fmtTime(v.Live.CreatedAt)},
		TestKey:        wire.KeyInfo{Prefix: v.Test.Prefix, Last4: v.Test.Last4, CreatedAt: fmtTime(v.Test.CreatedAt)},
	}
	l := quota.LimitsFor(v.Plan, v.HourlyLimit, v.MonthlyLimit, v.CreatedAt, now)
	out.Limits = wire.AccountLimits{Hourly: limitOrNull(l.Hourly), Monthly: limitOrNull(l.Monthly), MonthlyLookups: limitOrNull(l.MonthlyLookups)}
	// The limits in force: grandfathered_until only while the previous
	// allowance is (/v1/usage names its end after it too, SPEC 2.4).
	if l.GrandfatheredAt(now) {
		g := fmtTime(l.Grandfathered)
		out.Limits.GrandfatheredUntil = &g
	}
	if v.WebhookURL != "" {
		u := v.WebhookURL
		out.WebhookURL = &u
	}
	// The previous live key while it works: once its grace has ended it is
	// refused (accounts.Authenticate) and no longer shown.
	if p := v.PrevLive; p != nil && now.Before(p.ValidUntil) {
		until := fmtTime(p.ValidUntil)
		out.PreviousLiveKey = &wire.KeyInfo{Prefix: p.Prefix, Last4: p.Last4, CreatedAt: fmtTime(p.CreatedAt), ValidUntil: &until}
	}
	return out
}

// limitOrNull is a limit on the wire: null for none (quota.NoLimit).
func limitOrNull(n int64) *int64 {
	if n == quota.NoLimit {
		return nil
	}
	return &n
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// optLimit decodes a limit that may be an integer or null.
func optLimit(raw json.RawMessage, name string) (*int64, error) {
	if string(raw) == "null" {
		return nil, nil
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || n < 0 {
		return nil, fmt.Errorf("%s must be a non-negative integer or null", name)
	}
	return &n, nil
}

func (s *Server) adminCreateAccount(ctx *fasthttp.RequestCtx, r *request) {
	var in struct {
		Email        string          `json:"email"`
		Plan         string          `json:"plan"`
		CreatedAt    string          `json:"created_at"`
		HourlyLimit  json.RawMessage `json:"hourly_limit"`
		MonthlyLimit json.RawMessage `json:"monthly_limit"`
	}
	if err := decodeStrict(ctx.PostBody(), &in); err != nil {
		s.badRequest(ctx, "Invalid JSON body: %v.", err)
		return
	}
	if err := validEmail(in.Email); err != nil {
		s.badRequest(ctx, "%v", err)
		return
	}
	if in.Plan == "" {
		in.Plan = "free"
	}
	if !accounts.ValidPlan(in.Plan) {
		s.badRequest(ctx, "plan must be one of %s.", strings.Join(accounts.Plans, ", "))
		return
	}
	na := accounts.NewAccount{Email: in.Email, Plan: in.Plan}
	if in.CreatedAt != "" {
		t, err := time.Parse(time.RFC3339, in.CreatedAt)
		// The store keeps Unix nanoseconds: a date outside the clock's
		// range would read back as another (and flip grandfathering).
		if err != nil || t.Before(clock.Earliest) || !t.Before(clock.Latest) {
			s.badRequest(ctx, "created_at must be an RFC 3339 date-time from %s to before %s.",
				clock.Earliest.Format(time.RFC3339), clock.Latest.Format(time.RFC3339))
			return
		}
		// An import's date has passed: a future one (2062 for 2026) would
		// list the account first for decades and show a creation that has
		// not happened.
		if t.After(r.Now) {
			s.badRequest(ctx, "created_at must not be in the future (now is %s).", fmtTime(r.Now))
			return
		}
		na.CreatedAt = t
	}
	for _, l := range []struct {
		raw  json.RawMessage
		name string
		dst  **int64
	}{{in.HourlyLimit, "hourly_limit", &na.HourlyLimit}, {in.MonthlyLimit, "monthly_limit", &na.MonthlyLimit}} {
		if l.raw == nil {
			continue
		}
		if in.Plan != "custom" {
			s.writeError(ctx, fasthttp.StatusBadRequest, l.name+" is only for the custom plan.", "", planLimitHint(in.Plan, l.name))
			return
		}
		v, err := optLimit(l.raw, l.name)
		if err != nil {
			s.badRequest(ctx, "%v.", err)
			return
		}
		*l.dst = v
	}
	c, err := s.deps.Accounts.Create(na)
	if err != nil {
		s.adminFailure(ctx, "create account", err)
		return
	}
	v := c.View
	s.writeJSON(ctx, fasthttp.StatusCreated, &wire.CreatedAccount{
		ID: v.ID, Email: v.Email, Plan: v.Plan, CreatedAt: fmtTime(v.CreatedAt),
		HourlyLimit: v.HourlyLimit, MonthlyLimit: v.MonthlyLimit,
		LiveKey: c.LiveKey, TestKey: c.TestKey, PublishableKey: c.PublishableKey, WebhookSecret: c.WebhookSecret,
	})
}

// planLimitHint says why a limit was refused and how to set one.
func planLimitHint(plan, field string) string {
	return fmt.Sprintf(`The %s plan has fixed allowances and would ignore %s; send "plan": "custom" with it to set your own limits.`, plan, field)
}

// validEmail: at most 254 bytes (RFC 5321's limit is in octets, and mail is
// what the address is for; the message and the OpenAPI document say bytes)
// of valid UTF-8 with a local part and a domain,
// and no space or control character (a NUL or a newline in an address ends
// up in mail headers and logs). A comma, semicolon or angle bracket, or a
// second @ outside a quoted local part, would make the warnings' To header
// read as more than one address ("owner@x.com,someone@y.com").
func validEmail(e string) error {
	at := strings.LastIndexByte(e, '@')
	bad := e == "" || !utf8.ValidString(e) || len(e) > 254 || at <= 0 || at == len(e)-1 ||
		strings.IndexFunc(e, func(r rune) bool { return r == ' ' || unicode.IsControl(r) }) >= 0
	if quoted := len(e) > 1 && e[0] == '"' && at > 1 && e[at-1] == '"'; !bad && !quoted {
		bad = strings.ContainsAny(e, ",;<>") || strings.Count(e, "@") != 1
	}
	if !bad && strings.ContainsAny(e[at+1:], ",;<>\"") {
		bad = true // the domain is never quoted
	}
	// A domain is dot-separated labels, none empty (RFC 5321 4.1.2), or an
	// address literal: "x@example..com", "x@.example.com" or
	// "x@example.com." names no mailbox, and the warnings sent there would
	// all bounce.
	if d := e[at+1:]; !bad && !strings.HasPrefix(d, "[") && slices.Contains(strings.Split(d, "."), "") {
		bad = true
	}
	if bad {
		return errors.New("email must be a valid address of at most 254 bytes (UTF-8).")
	}
	return nil
}

// refuseNoAccount is the admin API's 404 for an unknown {id}.
var refuseNoAccount = &checks.Refusal{Status: fasthttp.StatusNotFound, Msg: checks.MsgAccountNotFound}

// account fetches the {id} account.
func (s *Server) account(r *request) (*accounts.View, *checks.Refusal) {
	if v := s.deps.Accounts.Get(r.param(0)); v != nil {
		return v, nil
	}
	return nil, refuseNoAccount
}

func (s *Server) adminGetAccount(ctx *fasthttp.RequestCtx, r *request) {
	if v, ref := s.account(r); ref != nil {
		s.refuse(ctx, ref)
	} else {
		s.writeJSON(ctx, fasthttp.StatusOK, accountView(v, r.Now))
	}
}

func (s *Server) adminPatchAccount(ctx *fasthttp.RequestCtx, r *request) {
	var in struct {
		Plan               *string         `json:"plan"`
		HourlyLimit        json.RawMessage `json:"hourly_limit"`
		MonthlyLimit       json.RawMessage `json:"monthly_limit"`
		Suspended          *bool           `json:"suspended"`
		Allowlist          *[]string       `json:"allowlist"`
		Origins            *[]string       `json:"origins"`
		DeviceEvidenceBeta *bool           `json:"device_evidence_beta"`
	}
	if err := decodeStrict(ctx.PostBody(), &in); err != nil {
		s.badRequest(ctx, "Invalid JSON body: %v.", err)
		return
	}
	if field := nullField(ctx.PostBody(), "plan", "suspended", "allowlist", "origins", "device_evidence_beta"); field != "" {
		// A null reads as the field left out: {"allowlist": null} kept the
		// allowlist it looks like it removes, and {"suspended": null} the
		// suspension, each answered 200.
		hint := ""
		if field == "allowlist" || field == "origins" {
			hint = fmt.Sprintf(`Send "%s": [] to clear it.`, field)
		}
		s.writeError(ctx, fasthttp.StatusBadRequest, field+" cannot be null.", "", hint)
		return
	}
	cur, ref := s.account(r)
	if ref != nil {
		s.refuse(ctx, ref)
		return
	}
	var p accounts.Patch
	if in.Plan != nil {
		if !accounts.ValidPlan(*in.Plan) {
			s.badRequest(ctx, "plan must be one of %s.", strings.Join(accounts.Plans, ", "))
			return
		}
		p.Plan = in.Plan
	}
	plan := cur.Plan
	if p.Plan != nil {
		plan = *p.Plan
	}
	for _, l := range []struct {
		raw  json.RawMessage
		name string
		dst  ***int64
	}{{in.HourlyLimit, "hourly_limit", &p.HourlyLimit}, {in.MonthlyLimit, "monthly_limit", &p.MonthlyLimit}} {
		if l.raw == nil {
			// Limits are the custom plan's own: leaving it drops them, so
			// no figure is kept that nothing enforces.
			if plan != "custom" && cur.Plan == "custom" {
				var none *int64
				*l.dst = &none
			}
			continue
		}
		// A limit the plan would ignore is refused, not stored and ignored.
		if plan != "custom" {
			s.writeError(ctx, fasthttp.StatusBadRequest, l.name+" is only for the custom plan.", "", planLimitHint(plan, l.name))
			return
		}
		v, err := optLimit(l.raw, l.name)
		if err != nil {
			s.badRequest(ctx, "%v.", err)
			return
		}
		*l.dst = &v
	}
	p.Suspended = in.Suspended
	p.DeviceEvidenceBeta = in.DeviceEvidenceBeta
	if in.Allowlist != nil {
		list, err := canonicalPrefixes(*in.Allowlist)
		if err != nil {
			s.badRequest(ctx, "allowlist: %v.", err)
			return
		}
		p.Allowlist = &list
	}
	if in.Origins != nil {
		list, err := canonicalOrigins(*in.Origins)
		if err != nil {
			s.badRequest(ctx, "origins: %v.", err)
			return
		}
		p.Origins = &list
	}
	v, err := s.deps.Accounts.Update(cur.ID, p)
	if err != nil {
		s.adminFailure(ctx, "patch account", err)
		return
	}
	// SPEC §8: disabling the beta deletes its samples and challenges. The
	// flag is stored first, so a patch that turns the beta off purges even
	// when it was already off: the retry of a patch whose purge failed must
	// not answer 200 with the samples still kept (a repeated purge is free).
	turnedOff := cur.DeviceEvidenceBeta || (in.DeviceEvidenceBeta != nil && !*in.DeviceEvidenceBeta)
	if turnedOff && !v.DeviceEvidenceBeta && s.deps.Challenges != nil {
		if err := s.deps.Challenges.Purge(v.ID); err != nil {
			s.adminFailure(ctx, "purge device evidence", err)
			return
		}
	}
	s.writeJSON(ctx, fasthttp.StatusOK, accountView(v, r.Now))
}

// canonicalPrefixes turns IPs and CIDRs into masked prefixes ("203.0.113.7/32").
func canonicalPrefixes(in []string) ([]string, error) {
	out := make([]string, 0, len(in))
	for _, s := range in {
		s = strings.TrimSpace(s)
		var p netip.Prefix
		if strings.Contains(s, "/") {
			pp, err := netip.ParsePrefix(s)
			if err != nil {
				return nil, fmt.Errorf("%q is not an IP or CIDR", s)
			}
			// A mapped IPv4 CIDR is kept in IPv4 form, as a mapped address
			// is: callers' addresses are unmapped, so the IPv6 form would
			// match none of them.
			if a := pp.Addr(); a.Is4In6() && pp.Bits() >= 96 {
				pp = netip.PrefixFrom(a.Unmap(), pp.Bits()-96)
			}
			p = pp.Masked()
		} else {
			a, err := netip.ParseAddr(s)
			if err != nil || a.Zone() != "" {
				return nil, fmt.Errorf("%q is not an IP or CIDR", s)
			}
			a = a.Unmap()
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, p.String())
	}
	return out, nil
}

// canonicalOrigins keeps scheme://host[:port] of each origin, as a browser's
// Origin header names it (weborigin.Canonical: lower case, punycode, no
// default port).
func canonicalOrigins(in []string) ([]string, error) {
	out := make([]string, 0, len(in))
	for _, s := range in {
		c, ok := weborigin.Canonical(strings.TrimSpace(s))
		if !ok || !browserOrigin(c) {
			return nil, fmt.Errorf("%q is not an origin like https://shop.example", s)
		}
		out = append(out, c)
	}
	return out, nil
}

// browserOrigin reports whether a canonical origin is one a browser's Origin
// header can carry. weborigin.Canonical reads what requests send and lets an
// ASCII host through as it is, so "https://*.shop.example" (a wildcard the
// collector never expands), "https://shop..example" or a port past 65535
// would be stored as an origin no page ever has, and every page of the
// site then refused, with nothing said when it was set.
func browserOrigin(c string) bool {
	u, err := url.Parse(c)
	if err != nil {
		return false
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return false
		}
	}
	host := u.Hostname()
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	// Letters, digits, hyphens and (as some hosts have them) underscores,
	// in non-empty labels; a final dot is a fully qualified name.
	for _, label := range strings.Split(strings.TrimSuffix(host, "."), ".") {
		if label == "" || strings.IndexFunc(label, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_')
		}) >= 0 {
			return false
		}
	}
	return true
}

func (s *Server) adminRotateLive(ctx *fasthttp.RequestCtx, r *request) {
	rot, err := s.deps.Accounts.RotateLive(r.param(0))
	if err != nil {
		s.adminFailure(ctx, "rotate live key", err)
		return
	}
	s.writeJSON(ctx, fasthttp.StatusOK, &wire.RotatedLive{LiveKey: rot.Key, PreviousValidUntil: fmtTime(rot.PreviousValidUntil)})
}

func (s *Server) adminRevokePrevious(ctx *fasthttp.RequestCtx, r *request) {
	if err := s.deps.Accounts.RevokePrevious(r.param(0)); err != nil {
		s.adminFailure(ctx, "revoke previous key", err)
		return
	}
	ctx.SetStatusCode(fasthttp.StatusNoContent)
}

func (s *Server) adminRotateTest(ctx *fasthttp.RequestCtx, r *request) {
	k, err := s.deps.Accounts.RotateTest(r.param(0))
	if err != nil {
		s.adminFailure(ctx, "rotate test key", err)
		return
	}
	s.writeJSON(ctx, fasthttp.StatusOK, &wire.RotatedTest{TestKey: k})
}

func (s *Server) adminGetRules(ctx *fasthttp.RequestCtx, r *request) {
	if v, ref := s.account(r); ref != nil {
		s.refuse(ctx, ref)
	} else {
		s.writeJSON(ctx, fasthttp.StatusOK, rulesWire(v.Rules))
	}
}

func rulesWire(rules []accounts.Rule) []wire.Rule {
	out := make([]wire.Rule, 0, len(rules))
	for _, x := range rules {
		out = append(out, wire.Rule{Signal: x.Signal, Action: x.Action})
	}
	return out
}

func pinsWire(pins []accounts.Pin) []wire.Pin {
	out := make([]wire.Pin, 0, len(pins))
	for _, p := range pins {
		out = append(out, wire.Pin{IP: p.IP, VisitorID: p.VisitorID, Action: p.Action, Label: p.Label})
	}
	return out
}

func (s *Server) adminPutRules(ctx *fasthttp.RequestCtx, r *request) {
	var in []wire.Rule
	if err := decodeStrict(ctx.PostBody(), &in); err != nil || in == nil {
		// null decodes to a nil slice: not the empty set it would store.
		s.badRequest(ctx, "Body must be a JSON array of {\"signal\", \"action\"} (send [] to clear): %v.", orNotArray(err))
		return
	}
	parsed := make([]score.Rule, 0, len(in))
	rules := make([]accounts.Rule, 0, len(in))
	for i, x := range in {
		sr, err := score.ParseRule(x.Signal, x.Action)
		if err != nil {
			s.badRequest(ctx, "rules[%d]: %v.", i, err)
			return
		}
		parsed = append(parsed, sr)
		rules = append(rules, accounts.Rule{Signal: x.Signal, Action: x.Action})
	}
	if err := score.ValidateRules(parsed); err != nil {
		s.badRequest(ctx, "%v.", err)
		return
	}
	if _, ref := s.account(r); ref != nil {
		s.refuse(ctx, ref)
		return
	}
	v, err := s.deps.Accounts.SetRules(r.param(0), rules)
	if err != nil {
		s.adminFailure(ctx, "set rules", err)
		return
	}
	s.writeJSON(ctx, fasthttp.StatusOK, rulesWire(v.Rules))
}

func (s *Server) adminGetPins(ctx *fasthttp.RequestCtx, r *request) {
	if v, ref := s.account(r); ref != nil {
		s.refuse(ctx, ref)
	} else {
		s.writeJSON(ctx, fasthttp.StatusOK, pinsWire(v.Pins))
	}
}

func (s *Server) adminPutPins(ctx *fasthttp.RequestCtx, r *request) {
	var in []wire.Pin
	if err := decodeStrict(ctx.PostBody(), &in); err != nil || in == nil {
		s.badRequest(ctx, "Body must be a JSON array of exception pins (send [] to clear): %v.", orNotArray(err))
		return
	}
	parsed := make([]score.Pin, 0, len(in))
	pins := make([]accounts.Pin, 0, len(in))
	for i, p := range in {
		sp, err := score.ParsePin(p.IP, p.VisitorID, p.Action, p.Label)
		if err != nil {
			s.badRequest(ctx, "exceptions[%d]: %v.", i, err)
			return
		}
		parsed = append(parsed, sp)
		// The address or CIDR is kept as it was sent, so GET returns it so
		// (203.0.113.7, not 203.0.113.7/32); CompilePolicy parses either form,
		// and pins stored before in canonical prefix form still read.
		stored := accounts.Pin{IP: strings.TrimSpace(p.IP), VisitorID: p.VisitorID, Action: p.Action, Label: p.Label}
		pins = append(pins, stored)
	}
	if err := score.ValidatePins(parsed); err != nil {
		s.badRequest(ctx, "%v.", err)
		return
	}
	if _, ref := s.account(r); ref != nil {
		s.refuse(ctx, ref)
		return
	}
	v, err := s.deps.Accounts.SetPins(r.param(0), pins)
	if err != nil {
		s.adminFailure(ctx, "set exceptions", err)
		return
	}
	s.writeJSON(ctx, fasthttp.StatusOK, pinsWire(v.Pins))
}

func (s *Server) adminPutWebhook(ctx *fasthttp.RequestCtx, r *request) {
	var in struct {
		URL *string `json:"url"`
	}
	var raw map[string]json.RawMessage
	if err := decodeStrict(ctx.PostBody(), &in); err != nil {
		s.badRequest(ctx, "Invalid JSON body: %v.", err)
		return
	}
	// Only an explicit "url": null clears the receiver; {} or a bare null
	// is a mistake, not a removal.
	if err := json.Unmarshal(ctx.PostBody(), &raw); err != nil || raw["url"] == nil {
		s.badRequest(ctx, `Body must be {"url": "https://…"}, or {"url": null} to remove the receiver.`)
		return
	}
	u := ""
	if in.URL != nil && len(*in.URL) > maxWebhookURL {
		s.badRequest(ctx, "url is at most %d characters.", maxWebhookURL)
		return
	}
	if in.URL != nil {
		// HTTPS on a public address; --allow-private-webhooks also allows
		// http:// and loopback or private receivers (CLARIFICATIONS.md).
		cu, err := webhook.CheckURL(*in.URL, s.allowPrivateWebhooks())
		if err != nil {
			s.badRequest(ctx, "%v.", err)
			return
		}
		u = cu
	}
	v, err := s.deps.Accounts.SetWebhookURL(r.param(0), u)
	if err != nil {
		s.adminFailure(ctx, "set webhook", err)
		return
	}
	out := &wire.Webhook{}
	if v.WebhookURL != "" {
		out.URL = &v.WebhookURL
	}
	s.writeJSON(ctx, fasthttp.StatusOK, out)
}

func (s *Server) adminRotateWebhookSecret(ctx *fasthttp.RequestCtx, r *request) {
	sec, err := s.deps.Accounts.RotateWebhookSecret(r.param(0))
	if err != nil {
		s.adminFailure(ctx, "rotate webhook secret", err)
		return
	}
	s.writeJSON(ctx, fasthttp.StatusOK, &wire.WebhookSecret{WebhookSecret: sec})
}

// mailMax is the most mails GET /admin/v1/mail answers, and its default.
const mailMax = 200

// adminMail lists the outbox, newest first (ADMIN.md views): the 200 most
// recent, or ?limit= of them; ?account= lists that account's alone (its
// own 200 most recent, however many of other accounts' are newer).
func (s *Server) adminMail(ctx *fasthttp.RequestCtx, r *request) {
	limit, ok := s.queryLimit(ctx, mailMax, mailMax)
	if !ok {
		return
	}
	var account string
	if args := ctx.QueryArgs(); args.Has("account") {
		v := s.deps.Accounts.Get(string(args.Peek("account")))
		if v == nil {
			s.refuse(ctx, refuseNoAccount)
			return
		}
		account = v.ID
	}
	out := []wire.Mail{}
	if lister := s.mailLister(); lister != nil {
		var recs []*mailer.Mail
		var err error
		if account != "" {
			recs, err = lister.RecentOf(account, limit)
		} else {
			recs, err = lister.Recent(limit)
		}
		if err != nil {
			s.adminFailure(ctx, "list mail", err)
			return
		}
		for _, m := range recs {
			out = append(out, wire.Mail{ID: m.ID, At: fmtTime(m.At), Account: m.Account, To: m.To, Kind: m.Kind,
				Subject: m.Subject, Body: m.Body, Status: m.Status, Error: m.Error})
		}
	}
	s.writeJSON(ctx, fasthttp.StatusOK, out)
}

func (s *Server) adminClock(ctx *fasthttp.RequestCtx, r *request) {
	if s.deps.TestClock == nil {
		s.writeError(ctx, fasthttp.StatusNotFound, checks.MsgNotFound, "", "This server runs without --test-clock, so its clock cannot be moved.")
		return
	}
	var in struct {
		Advance json.RawMessage `json:"advance"`
		Set     *string         `json:"set"`
	}
	if err := decodeStrict(ctx.PostBody(), &in); err != nil {
		s.badRequest(ctx, "Invalid JSON body: %v.", err)
		return
	}
	// A null set read as no set: {"set": null} answered the time unmoved
	// (as if it meant "back to the real clock", which nothing does) and
	// {"set": null, "advance": "1h"} moved it, where set and advance
	// together are refused.
	if field := nullField(ctx.PostBody(), "set", "advance"); field != "" {
		s.badRequest(ctx, "%s cannot be null.", field)
		return
	}
	var now time.Time
	switch {
	case in.Set != nil && in.Advance != nil:
		s.badRequest(ctx, "Send either advance or set, not both.")
		return
	case in.Set != nil:
		t, err := time.Parse(time.RFC3339Nano, *in.Set)
		if err != nil {
			s.badRequest(ctx, "set must be an RFC 3339 date-time.")
			return
		}
		if now, err = s.deps.TestClock.Set(t); err != nil {
			s.badRequest(ctx, "set must lie from %s up to %s.", clock.Earliest.Format(time.RFC3339), clock.Latest.Format(time.RFC3339))
			return
		}
	case in.Advance != nil:
		d, err := parseAdvance(in.Advance)
		if err != nil {
			s.badRequest(ctx, "%v.", err)
			return
		}
		if now, err = s.deps.TestClock.Advance(d); err != nil {
			s.badRequest(ctx, "advance would move the clock outside %s to %s.", clock.Earliest.Format(time.RFC3339), clock.Latest.Format(time.RFC3339))
			return
		}
	default:
		now = s.deps.TestClock.Now()
	}
	s.writeJSON(ctx, fasthttp.StatusOK, &wire.ClockNow{Now: now.UTC().Format(time.RFC3339Nano)})
}

// parseAdvance reads a Go duration string ("25h") or whole seconds (90 or "90").
func parseAdvance(raw json.RawMessage) (time.Duration, error) {
	var sv string
	if err := json.Unmarshal(raw, &sv); err != nil {
		var n int64
		if err := json.Unmarshal(raw, &n); err != nil {
			return 0, errors.New("advance must be a Go duration like \"25h\" or whole seconds")
		}
		return seconds(n)
	}
	if n, err := strconv.ParseInt(sv, 10, 64); err == nil {
		return seconds(n)
	}
	d, err := time.ParseDuration(sv)
	if err != nil {
		return 0, errors.New("advance must be a Go duration like \"25h\" or whole seconds")
	}
	return d, nil
}

// seconds converts whole seconds to a Duration, refusing what would wrap
// around (past about 292 years).
func seconds(n int64) (time.Duration, error) {
	const most = math.MaxInt64 / int64(time.Second)
	if n > most || n < -most {
		return 0, errors.New("advance is out of range")
	}
	return time.Duration(n) * time.Second, nil
}
