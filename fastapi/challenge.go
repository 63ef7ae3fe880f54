package fastapi

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/actors/challenge"
	"github.com/fraudd/fraudd/actors/events"
	"github.com/fraudd/fraudd/intel/evidence"
	"github.com/fraudd/fraudd/storage"
	"github.com/fraudd/fraudd/wire"
)

// Device-evidence beta messages (SPEC 4.10).
const (
	msgLiveKeyRequired   = "live key required"
	msgEventIDInvalid    = "fingerprintEventId is required: a string of 8 to 200 characters."
	msgBetaDisabled      = "The device evidence beta is not enabled for this account."
	msgOutstanding       = "Too many outstanding device-evidence challenges; use or let some expire."
	msgEvidenceMissing   = "No fresh device event from a confirmed website for this fingerprintEventId."
	msgChallengeRate     = "Too many device-evidence challenges this hour."
	msgEvidenceDown      = "Device evidence is temporarily unavailable; continue with normal checks."
	codeBetaDisabled     = "device_evidence_disabled"
	codeOutstanding      = "too_many_outstanding_challenges"
	codeEvidenceMissing  = "device_event_not_eligible"
	codeChallengeRate    = "challenge_rate_limited"
	codeEvidenceDown     = "evidence_unavailable"
	minEventIDLen        = 8
	maxEventIDLen        = 200
	hintEventOld         = "The device event is older than 5 minutes: collect a new one."
	hintEventOrigin      = "The device event was collected on a website that is not among the account's confirmed origins."
	hintEventUnknown     = "The device event is unknown to this account, or was pruned."
	findingGPU           = "gpu_inconsistent"
	findingRandomization = "antidetect_randomization"
	findingBurst         = "antidetect_profile_burst"
)

// handleChallenge is POST /v1/device-evidence/challenge (SPEC 4.10). No usage
// charge, email or fraud decision.
func (s *Server) handleChallenge(ctx *fasthttp.RequestCtx, r *request) {
	if r.sandbox || r.auth.Kind == accounts.KeyTest {
		s.writeError(ctx, fasthttp.StatusUnauthorized, msgLiveKeyRequired, "", "Call this endpoint with your sk_live_ key (or a token minted from it).")
		return
	}
	var body struct {
		ID *string `json:"fingerprintEventId"`
	}
	if json.Unmarshal(ctx.PostBody(), &body) != nil || body.ID == nil ||
		utf8.RuneCountInString(*body.ID) < minEventIDLen || utf8.RuneCountInString(*body.ID) > maxEventIDLen {
		s.writeError(ctx, fasthttp.StatusBadRequest, msgEventIDInvalid, "", "")
		return
	}
	view := r.auth.View
	if !view.DeviceEvidenceBeta {
		s.purgeEvidence(view.ID)
		s.writeError(ctx, fasthttp.StatusConflict, msgBetaDisabled, codeBetaDisabled, "The operator enables it per account.")
		return
	}
	if s.deps.Challenges == nil || s.deps.Devices == nil {
		s.evidenceUnavailable(ctx)
		return
	}
	id, ok := events.ParseEventID(*body.ID)
	if !ok {
		s.writeError(ctx, fasthttp.StatusUnprocessableEntity, msgEvidenceMissing, codeEvidenceMissing, hintEventUnknown)
		return
	}
	res, err := s.peekEvent(id, view.ID, r.now)
	if err != nil {
		s.log.Warn("device-evidence challenge: event not resolved", "err", err)
		s.evidenceUnavailable(ctx)
		return
	}
	switch {
	case !res.Found:
		s.writeError(ctx, fasthttp.StatusUnprocessableEntity, msgEvidenceMissing, codeEvidenceMissing, hintEventUnknown)
		return
	case r.now.Sub(res.Event.Created) > challenge.EventMaxAge:
		s.writeError(ctx, fasthttp.StatusUnprocessableEntity, msgEvidenceMissing, codeEvidenceMissing, hintEventOld)
		return
	case !originConfirmed(res.Event.Origin, view.Origins):
		s.writeError(ctx, fasthttp.StatusUnprocessableEntity, msgEvidenceMissing, codeEvidenceMissing, hintEventOrigin)
		return
	}
	is, err := s.deps.Challenges.Issue(challenge.Issue{
		Customer: strings.Clone(view.ID), Event: events.FormatEventID(id),
		Device: res.Event.VisitorID, Now: r.now,
	})
	var rl *challenge.RateLimited
	switch {
	case errors.As(err, &rl):
		s.writeRetry(ctx, fasthttp.StatusTooManyRequests, max(int(math.Ceil(rl.RetryAfter.Seconds())), 1), msgChallengeRate, codeChallengeRate, "")
		return
	case errors.Is(err, challenge.ErrOutstanding):
		s.writeError(ctx, fasthttp.StatusConflict, msgOutstanding, codeOutstanding, "Challenges expire 2 minutes after issue.")
		return
	case err != nil:
		s.log.Warn("device-evidence challenge not issued", "err", err)
		s.evidenceUnavailable(ctx)
		return
	}
	s.writeJSON(ctx, fasthttp.StatusOK, &wire.Challenge{
		Challenge: is.Challenge, ExpiresAt: is.Expires.UTC().Format(time.RFC3339),
		Protocol: evidence.GPUProtocol, ConsistencyProtocol: evidence.ConsistencyProtocol, Experimental: true,
	})
}

// peekEvent finds the account's device event, from the store when it is
// there (no use counted), else through the device actor (which counts one:
// the next evaluation of the event then reports device_replayed).
func (s *Server) peekEvent(id events.EventID, account string, now time.Time) (events.Resolved, error) {
	if s.deps.Events != nil {
		e, err := s.deps.Events.GetEvent(id)
		switch {
		case err == nil && e.Account == account:
			return events.Resolved{Found: true, Event: *e}, nil
		case err == nil:
			return events.Resolved{}, nil
		case !errors.Is(err, storage.ErrNotFound):
			return events.Resolved{}, err
		}
	}
	return s.deps.Devices.Resolve(events.Resolve{ID: id, Account: account, Now: now})
}

func (s *Server) evidenceUnavailable(ctx *fasthttp.RequestCtx) {
	s.writeRetry(ctx, fasthttp.StatusServiceUnavailable, retryAfterStorage, msgEvidenceDown, codeEvidenceDown, "")
}

// purgeEvidence deletes what the beta kept for an account whose beta is off
// (SPEC §8: disabling the beta deletes samples and challenges). It runs on the
// account's next challenge or evidence submission.
func (s *Server) purgeEvidence(account string) {
	if s.deps.Challenges == nil {
		return
	}
	if err := s.deps.Challenges.Purge(strings.Clone(account)); err != nil {
		s.log.Warn("device evidence not purged", "err", err)
	}
}

// originConfirmed reports whether the event's collecting origin is one of
// the account's confirmed origins (scheme and host case-insensitive, a
// trailing slash ignored). An event without an Origin never is.
func originConfirmed(origin string, confirmed []string) bool {
	o := strings.TrimSuffix(origin, "/")
	if o == "" {
		return false
	}
	for _, c := range confirmed {
		if strings.EqualFold(o, strings.TrimSuffix(strings.TrimSpace(c), "/")) {
			return true
		}
	}
	return false
}

// applyEvidence handles gpuEvidence / browserEvidence on a live evaluation,
// after resolveDevice: validate, consume the challenge and record, in one
// actor hop. browserEvidence takes precedence when both are sent. Results
// show under device; findings only raise allow to review (score.Consistency).
func (s *Server) applyEvidence(st *evalState, o *evalOpts, req *evalRequest, account string, beta bool, now time.Time) {
	if req.GPUEvidence == nil && req.BrowserEvidence == nil || !st.in.Device.Present {
		return
	}
	if req.BrowserEvidence != nil {
		o.browserEv = s.browserEvidence(st, req, account, beta, now)
		return
	}
	o.gpuEv = s.gpuEvidence(st, req, account, beta, now)
}

func (s *Server) gpuEvidence(st *evalState, req *evalRequest, account string, beta bool, now time.Time) *wire.GPUEvidence {
	out := &wire.GPUEvidence{}
	if !beta {
		s.purgeEvidence(account)
		out.Status = challenge.StatusDisabled
		return out
	}
	g, err := evidence.ParseGPU(req.GPUEvidence)
	if err != nil {
		out.Status = challenge.StatusInvalid
		return out
	}
	if s.deps.Challenges == nil {
		out.Status = challenge.StatusUnavailable
		return out
	}
	res, err := s.deps.Challenges.Submit(challenge.Submit{
		Customer: strings.Clone(account), Event: canonicalEventID(req.FingerprintEventID),
		Device: st.in.Device.VisitorID, Challenge: g.Challenge, GPU: &g.Features, Now: now,
	})
	if err != nil {
		s.log.Warn("gpu evidence not recorded", "err", err)
		out.Status = challenge.StatusUnavailable
		return out
	}
	out.Status = res.Status
	if res.HasNearest {
		d := res.RMS
		out.NearestDevice, out.RMSDistance = res.Nearest, &d
	}
	return out
}

func (s *Server) browserEvidence(st *evalState, req *evalRequest, account string, beta bool, now time.Time) *wire.BrowserConsistency {
	out := &wire.BrowserConsistency{Experimental: true, Source: "browser_reported", Findings: []string{}, Checks: []wire.ConsistencyCheck{}}
	if !beta {
		s.purgeEvidence(account)
		out.Status = "disabled"
		return out
	}
	b, err := evidence.ParseBrowser(req.BrowserEvidence)
	if err != nil {
		out.Status = "invalid"
		return out
	}
	if s.deps.Challenges == nil {
		out.Status = "unavailable"
		return out
	}
	res, err := s.deps.Challenges.Submit(challenge.Submit{
		Customer: strings.Clone(account), Event: canonicalEventID(req.FingerprintEventID),
		Device: st.in.Device.VisitorID, Challenge: b.Challenge, AccountID: strings.Clone(req.AccountID),
		Browser: &b, Now: now,
	})
	switch {
	case err != nil:
		s.log.Warn("browser evidence not checked", "err", err)
		out.Status = "unavailable"
		return out
	case !res.Accepted:
		out.Status = "replay"
		return out
	}
	rep := evidence.Compare(&b)
	out.Status = rep.Status
	for _, c := range rep.Checks {
		out.Checks = append(out.Checks, wire.ConsistencyCheck{Name: c.Name, Status: c.Status})
	}
	c := &st.in.Consistency
	if rep.GPUInconsistent {
		c.GPUInconsistent = true
		out.Findings = append(out.Findings, findingGPU)
	}
	if res.Randomization {
		c.AntidetectRandomization = true
		out.Findings = append(out.Findings, findingRandomization)
	}
	if res.ProfileBurst {
		c.AntidetectProfileBurst = true
		out.Findings = append(out.Findings, findingBurst)
	}
	if len(out.Findings) > 0 {
		out.Status = "inconsistent"
	}
	return out
}

// canonicalEventID is the event id as the challenge recorded it.
func canonicalEventID(s string) string {
	if id, ok := events.ParseEventID(s); ok {
		return events.FormatEventID(id)
	}
	return strings.Clone(s)
}
