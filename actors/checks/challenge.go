package checks

import (
	"errors"
	"math"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fraudd/fraudd/actors/challenge"
	"github.com/fraudd/fraudd/actors/events"
	"github.com/fraudd/fraudd/intel/evidence"
	"github.com/fraudd/fraudd/wire"
)

// Bounds of the challenge's fingerprintEventId (SPEC 4.10), in characters.
const (
	MinChallengeEventID = 8
	MaxChallengeEventID = 200
)

// Challenge is POST /v1/device-evidence/challenge (SPEC 4.10) for an
// admitted caller: no usage charge, email or fraud decision. eventID is the
// body's fingerprintEventId; sent is false when the body could not be read
// or did not carry one as a string.
func (s *Service) Challenge(c *Call, eventID string, sent bool) (*wire.Challenge, *Refusal) {
	if c.Sandbox || !c.liveKey() {
		return nil, refuseLiveKey
	}
	if n := utf8.RuneCountInString(eventID); !sent || n < MinChallengeEventID || n > MaxChallengeEventID {
		return nil, Invalid(MsgEventIDInvalid)
	}
	v := c.Auth.View
	if !v.DeviceEvidenceBeta {
		s.purgeEvidence(v.ID)
		return nil, &Refusal{Status: http.StatusConflict, Msg: MsgBetaDisabled, Code: CodeBetaDisabled, Hint: HintBetaDisabled}
	}
	refuseEvent := func(hint string) *Refusal {
		return &Refusal{Status: http.StatusUnprocessableEntity, Msg: MsgEvidenceMissing, Code: CodeEvidenceMissing, Hint: hint}
	}
	id, ok := events.ParseEventID(eventID)
	if !ok {
		return nil, refuseEvent(HintEventUnknown)
	}
	// Peek: issuing a challenge must not make the evaluation that follows a
	// replay.
	res, err := s.events.Peek(events.Resolve{ID: id, Account: v.ID, Now: c.Now})
	if err != nil {
		s.log.Warn("device-evidence challenge: event not resolved", "err", err)
		return nil, refuseEvidence
	}
	switch {
	case !res.Found:
		return nil, refuseEvent(HintEventUnknown)
	case c.Now.Sub(res.Event.Created) >= challenge.EventMaxAge: // "under 5 minutes"
		return nil, refuseEvent(HintEventOld)
	case !originConfirmed(res.Event.Origin, v.Origins):
		return nil, refuseEvent(HintEventOrigin)
	}
	is, err := s.challenges.Issue(challenge.Issue{
		Customer: strings.Clone(v.ID), Event: events.FormatEventID(id),
		Device: res.Event.VisitorID, Now: c.Now,
	})
	var rl *challenge.RateLimited
	switch {
	case errors.As(err, &rl):
		return nil, &Refusal{Status: http.StatusTooManyRequests, Msg: MsgChallengeRate, Code: CodeChallengeRate,
			RetryAfter: max(int64(math.Ceil(rl.RetryAfter.Seconds())), 1)}
	case errors.Is(err, challenge.ErrOutstanding):
		return nil, &Refusal{Status: http.StatusConflict, Msg: MsgOutstanding, Code: CodeOutstanding, Hint: HintOutstanding}
	case err != nil:
		s.log.Warn("device-evidence challenge not issued", "err", err)
		return nil, refuseEvidence
	}
	return &wire.Challenge{
		Challenge: is.Challenge, ExpiresAt: is.Expires.UTC().Format(time.RFC3339),
		Protocol: evidence.GPUProtocol, ConsistencyProtocol: evidence.ConsistencyProtocol, Experimental: true,
	}, nil
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
