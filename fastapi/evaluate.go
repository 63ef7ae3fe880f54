package fastapi

import (
	"time"

	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/intel/netlists"
	"github.com/fraudd/fraudd/intel/nettoken"
	"github.com/fraudd/fraudd/intel/score"
)

const (
	msgSandboxToken = "The public sandbox key only accepts the test tokens test_clean, test_vpn, test_proxy, test_datacenter and test_tor."
	hintSandbox     = "sk_test_sandbox is for trying the API; use your own live or test key for real tokens."
)

// tokenClass is what the evaluate token turned out to be.
type tokenClass uint8

const (
	tokenNone    tokenClass = iota // missing, null or empty: the degraded answer
	tokenTest                      // a fixed test_* token
	tokenNetwork                   // a verified network token
	tokenInvalid                   // anything else: 400 Invalid token.
)

// handleEvaluate is POST /v1/evaluate (SPEC 4.1).
func (s *Server) handleEvaluate(ctx *fasthttp.RequestCtx, r *request) {
	start := time.Now() // evaluated_in_ms measures processing, not the (test) clock
	st := getEvalState()
	defer putEvalState(st)
	var req evalRequest
	derr := decodeEvaluate(ctx.Request.Header.ContentType(), ctx.PostBody(), &req)

	if r.sandbox {
		if derr != nil {
			s.writeError(ctx, fasthttp.StatusBadRequest, derr.Error(), "", "")
			return
		}
		prof, ok := score.TestToken(req.Token)
		if !ok {
			s.writeError(ctx, fasthttp.StatusBadRequest, msgSandboxToken, "", hintSandbox)
			return
		}
		st.in.Network = prof.Network
		s.evalExtras(st, &req, nil)
		score.Evaluate(&st.in, &st.res)
		s.writeJSON(ctx, fasthttp.StatusOK, st.build(&evalOpts{kind: evalTestToken, test: true, sandbox: true, evaluatedMs: msSince(start)}))
		return
	}

	view := r.auth.View
	testKey := r.auth.Kind == accounts.KeyTest
	class := tokenNone
	var prof score.Profile
	var netFacts nettoken.Facts
	switch {
	case derr != nil:
		class = tokenInvalid
	case !req.TokenSent:
		class = tokenNone
	default:
		var ok bool
		if prof, ok = score.TestToken(req.Token); ok {
			class = tokenTest
		} else if netFacts, ok = s.verifyNetToken(view.ID, req.Token); ok {
			// A collector token (collect.go): verified with an HMAC, no hop.
			class = tokenNetwork
		} else {
			// Tampered, malformed or another account's: the SPEC's
			// provider-rejected token.
			class = tokenInvalid
		}
	}

	// Every attempt, 400s included, uses one hourly request; test tokens never
	// count toward the month; totals exclude test keys, test tokens, 400s and
	// (decided below) the bare degraded allow.
	monthly := class == tokenNone || class == tokenNetwork
	total := class == tokenNetwork && !testKey
	if _, ok := s.charge(ctx, r, quota.Evaluate, monthly, total); !ok {
		return
	}
	if derr != nil {
		s.writeError(ctx, fasthttp.StatusBadRequest, derr.Error(), "", "")
		return
	}
	if class == tokenInvalid {
		s.writeError(ctx, fasthttp.StatusBadRequest, errInvalidToken.Error(), "", "")
		return
	}

	st.in.Policy = view.Policy
	o := evalOpts{test: testKey}
	switch class {
	case tokenTest:
		st.in.Network = prof.Network
		o.kind, o.test = evalTestToken, true
	case tokenNone:
		st.in.Network = score.Network{Degraded: true}
		o.kind = evalLive
	case tokenNetwork:
		applyNetToken(st, &o, &netFacts, s.deps.Feeds.Current(), r.now)
	}
	s.evalExtras(st, &req, s.deps.Feeds.Current())
	if o.kind == evalLive {
		// One actor round trip when an event id was sent (collect_eval.go).
		s.resolveDevice(st, &o, req.FingerprintEventID, view.ID, r.now)
		// One more only when device evidence was sent (challenge.go).
		s.applyEvidence(st, &o, &req, view.ID, view.DeviceEvidenceBeta, r.now)
		// One more with a device or an accountId: this customer's device and
		// account history (devicehist.go). It fails open.
		s.applyHistory(r, st, &o, &req)
	}
	score.Evaluate(&st.in, &st.res)
	if class == tokenNone && !testKey && !bareAllow(&st.res) {
		s.deps.Quota.CountTotal(view.ID, r.now)
	}
	if o.kind == evalLive && !testKey {
		s.recordEvaluation(r, &st.in.Network, &st.res)
		s.notifyWebhook(r, &st.in, &st.res)
	}
	o.evaluatedMs = msSince(start)
	s.writeJSON(ctx, fasthttp.StatusOK, st.build(&o))
}

// bareAllow is the degraded fallback that SPEC 2.8.6 leaves out of totals:
// an engine allow with nothing raised.
func bareAllow(res *score.Result) bool {
	return res.Decision == score.Allow && res.Reasons.Len() == 0 && res.DecisionSource == score.SourceEngine
}

// evalExtras resolves the email and time-zone inputs against the feeds. The
// sandbox passes no snapshot lookups beyond the same embedded tables.
func (s *Server) evalExtras(st *evalState, req *evalRequest, snap *netlists.Snapshot) {
	if snap == nil && s.deps.Feeds != nil {
		snap = s.deps.Feeds.Current()
	}
	if req.EmailSent {
		st.in.Email = score.Email{Sent: true, Disposable: snap.DisposableEmail(req.Email)}
	}
	if req.TZSent {
		if c, ok := snap.ZoneCountry(req.TZ); ok {
			st.in.TimeZone = score.TimeZone{Sent: true, Zone: req.TZ, Country: c}
		}
	}
}

func msSince(t time.Time) int64 { return time.Since(t).Milliseconds() }

// handleSample is GET /v1/evaluate/sample (SPEC 4.3): a deterministic answer
// from the production builder.
func (s *Server) handleSample(ctx *fasthttp.RequestCtx, r *request) {
	start := time.Now()
	scenario := string(ctx.QueryArgs().Peek("scenario"))
	in, ok := score.Sample(scenario)
	if !ok {
		s.writeError(ctx, fasthttp.StatusBadRequest, "Unknown scenario.", "",
			"scenario is one of clean, vpn, datacenter, proxy, tor, bot (default vpn).")
		return
	}
	st := getEvalState()
	defer putEvalState(st)
	st.in = in
	score.Evaluate(&st.in, &st.res)
	o := evalOpts{kind: evalSample, evaluatedMs: msSince(start), device: &sampleDevice}
	s.writeJSON(ctx, fasthttp.StatusOK, st.build(&o))
}

// sampleDevice is the fixed device history every sample shows.
var sampleDevice = deviceFacts{
	CheckedSignals: []string{"antidetect", "automation", "emulator", "virtual_machine", "incognito", "privacy_mode", "ip_blocklisted", "high_activity"},
	TimesSeen:      1,
	FirstSeen:      "2026-11-01T12:00:00Z",
}
