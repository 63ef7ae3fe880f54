package checks

import (
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/fraudd/fraudd/intel/device"
	"github.com/fraudd/fraudd/intel/netlists"
	"github.com/fraudd/fraudd/intel/nettoken"
	"github.com/fraudd/fraudd/intel/score"
)

// Field bounds of SPEC 2.1 and §8, counted in characters.
const (
	MaxAccountID = 256
	MaxEmail     = 254
	MaxTZ        = 64
	MaxEventID   = 200 // longer ids are cut to this (Normalize)
)

// EvalRequest is an evaluate body as the transport decoded it, aliases
// resolved. Every string is its own copy, never a view of a request buffer:
// it may outlive the request (sent to actors, kept in events).
type EvalRequest struct {
	// Err is why the body could not be decoded; the call is still charged
	// (every attempt uses the hourly allowance) and then answered 400.
	Err                error
	Token              string
	TokenSent          bool // a non-empty token was sent
	FingerprintEventID string
	AccountID          string
	Email              string
	EmailSent          bool
	TZ                 string
	TZSent             bool
	GPUEvidence        []byte // raw JSON object, nil when absent
	BrowserEvidence    []byte // raw JSON object, nil when absent
}

// Normalize sets the derived flags and checks the field bounds; decoders
// call it last.
func (r *EvalRequest) Normalize() error {
	r.TokenSent = r.Token != ""
	switch {
	case utf8.RuneCountInString(r.AccountID) > MaxAccountID:
		return fmt.Errorf(MsgFieldTooLong, "accountId", MaxAccountID)
	case utf8.RuneCountInString(r.Email) > MaxEmail:
		return fmt.Errorf(MsgFieldTooLong, "email", MaxEmail)
	case utf8.RuneCountInString(r.TZ) > MaxTZ:
		return fmt.Errorf(MsgFieldTooLong, "tz", MaxTZ)
	}
	if utf8.RuneCountInString(r.FingerprintEventID) > MaxEventID {
		// Not an error on evaluate: SPEC §8 bounds the challenge's id only.
		// No event id is this long, so it resolves to nothing (device_status
		// unavailable); kept to its first MaxEventID characters, it stays
		// bounded where it travels (the history's dedupe, cluster messages).
		r.FingerprintEventID = firstRunes(r.FingerprintEventID, MaxEventID)
	}
	// A form body carries any bytes (%FF); a string field is text, and its
	// bound is in characters. (Cluster mode sends these fields in protobuf
	// strings, which must be UTF-8 too.)
	for _, f := range [...]struct{ name, v string }{{"accountId", r.AccountID}, {"email", r.Email}, {"tz", r.TZ}, {"fingerprintEventId", r.FingerprintEventID}} {
		if !utf8.ValidString(f.v) {
			return fmt.Errorf(MsgFieldNotUTF8, f.name)
		}
	}
	r.EmailSent = r.EmailSent && r.Email != ""
	return nil
}

// Evaluate is POST /v1/evaluate (SPEC 4.1) for an admitted caller. The
// answer is pooled: encode it, then Release it.
func (s *Service) Evaluate(c *Call, req *EvalRequest) (*Evaluation, *Refusal) {
	start := time.Now() // evaluated_in_ms measures processing, not the (test) clock
	if c.Sandbox {
		return s.evaluateSandbox(req, start)
	}

	// What the token is, without a hop: a test_* name, or a collector token
	// verified with an HMAC (tampered, malformed and other accounts' tokens
	// are the SPEC's provider-rejected token).
	out := evalDegraded
	var prof score.Profile
	var nf nettoken.Facts
	switch {
	case req.Err != nil:
		out = evalRejected
	case !req.TokenSent:
	default:
		var ok bool
		if prof, ok = score.TestToken(req.Token); ok {
			out = evalTestToken
		} else if nf, ok = s.netTokens.Verify(c.Auth.View.ID, req.Token); ok {
			out = evalToken
		} else {
			out = evalRejected
		}
	}

	// 1. Admit: the caller was authenticated; charge by the table.
	if req.Err != nil || out == evalRejected {
		if ref := s.charge(c, out); ref != nil {
			return nil, ref
		}
		if req.Err != nil {
			return nil, Invalid(req.Err.Error())
		}
		return nil, Invalid(MsgInvalidToken)
	}

	ev := getEvaluation()
	ev.in.Policy = c.Auth.View.Policy
	ev.in.At = c.Now
	o := &ev.opts
	o.test, o.liveKey = !c.liveKey(), c.accountObject()
	snap := s.feeds.Current()
	switch out {
	case evalTestToken:
		ev.in.Network = prof.Network
		o.kind, o.test = kindTestToken, true
	case evalDegraded:
		ev.in.Network = score.Network{Degraded: true}
	case evalToken:
		// An old token still evaluates: its expiry is advice.
		ev.in.Network = nettoken.Network(&nf, snap)
		o.netEv = networkEvidence(ev.netEv[:0], &ev.in.Network, &nf, snap)
		o.networkAgeS, o.hasNetAge = nettoken.Age(&nf, c.Now), true
	}

	// The charge and, for a visitor check, the facts it needs (facts.go)
	// travel as one chained call: one round trip.
	ch := s.newChain(c, out)
	if o.kind == kindVisitor {
		s.planFacts(c, ch, ev, req)
	}
	ref, timedOut := s.run(c, ch)
	if ref != nil {
		ch.release()
		ev.Release()
		return nil, ref
	}
	ev.extras(req, snap)

	// 2. Resolve: read what the chain brought back.
	if o.kind == kindVisitor {
		s.resolveFacts(c, ch, ev, req, timedOut)
	}
	ch.release()

	// 3. Score.
	score.Evaluate(&ev.in, &ev.res)

	// 4. Record and notify, fire-and-forget (record.go).
	s.recordEvaluation(c, ev, out)

	o.evaluatedMs = msSince(start)
	ev.build()
	return ev, nil
}

// evaluateSandbox answers the public sandbox key: test tokens only, no
// account, nothing charged, stored or notified.
func (s *Service) evaluateSandbox(req *EvalRequest, start time.Time) (*Evaluation, *Refusal) {
	if req.Err != nil {
		return nil, Invalid(req.Err.Error())
	}
	prof, ok := score.TestToken(req.Token)
	if !ok {
		return nil, &Refusal{Status: http.StatusBadRequest, Msg: MsgSandboxToken, Hint: HintSandboxToken}
	}
	ev := getEvaluation()
	ev.in.Network = prof.Network
	ev.extras(req, s.feeds.Current())
	score.Evaluate(&ev.in, &ev.res)
	ev.opts = evalOpts{kind: kindTestToken, test: true, sandbox: true, evaluatedMs: msSince(start)}
	ev.build()
	return ev, nil
}

// Sample is GET /v1/evaluate/sample (SPEC 4.3): a deterministic answer from
// the same builder as every other evaluation.
func (s *Service) Sample(scenario string) (*Evaluation, *Refusal) {
	start := time.Now()
	in, ok := score.Sample(scenario)
	if !ok {
		return nil, &Refusal{Status: http.StatusBadRequest, Msg: MsgUnknownScenario, Hint: HintUnknownScenario}
	}
	ev := getEvaluation()
	ev.in = in
	score.Evaluate(&ev.in, &ev.res)
	ev.opts = evalOpts{kind: kindSample, evaluatedMs: msSince(start), seen: &sampleSeen}
	ev.build()
	return ev, nil
}

// sampleSeen is the fixed device sightings every sample shows.
var sampleSeen = deviceSeen{
	checked:   checkedWithHistory(device.AllChecked, false),
	timesSeen: 1,
	firstSeen: time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC),
}

// extras resolves the email and time-zone inputs against the feeds.
func (ev *Evaluation) extras(req *EvalRequest, snap *netlists.Snapshot) {
	if req.EmailSent {
		ev.in.Email = score.Email{Sent: true, Disposable: snap.DisposableEmail(req.Email)}
	}
	if req.TZSent {
		if c, others, ok := snap.ZoneCountries(req.TZ); ok {
			ev.in.TimeZone = score.TimeZone{Sent: true, Zone: req.TZ, Country: c, Others: others}
		}
	}
}

func msSince(t time.Time) int64 { return time.Since(t).Milliseconds() }

// firstRunes is s cut to its first n characters.
func firstRunes(s string, n int) string {
	for i := range s {
		if n == 0 {
			return s[:i]
		}
		n--
	}
	return s
}
