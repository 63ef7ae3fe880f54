package fastapi

import (
	"sync"
	"time"

	"github.com/fraudd/fraudd/actors/devicehist"
	"github.com/fraudd/fraudd/intel/score"
	"github.com/fraudd/fraudd/wire"
)

// evalKind says what produced an evaluate answer; it decides which
// live-only fields appear (CLARIFICATIONS.md).
type evalKind uint8

const (
	evalLive      evalKind = iota // a real network token or the degraded fallback
	evalTestToken                 // a fixed test_* token (own key or sandbox)
	evalSample                    // GET /v1/evaluate/sample
)

// evalOpts are the facts the builder needs beside the engine's input/result.
type evalOpts struct {
	kind         evalKind
	test         bool // test: true (test token or test key)
	sandbox      bool
	deviceStatus string // live only: ok, unavailable, not_sent
	evaluatedMs  int64
	networkAgeS  int64 // live with a network token only
	hasNetAge    bool
	// Resolved device event (live only): evidence.device_age_s and
	// evidence.device_replayed.
	hasDevice      bool
	deviceAgeS     int64
	deviceReplayed bool
	// Device-evidence beta results (challenge.go); nil when not sent.
	gpuEv     *wire.GPUEvidence
	browserEv *wire.BrowserConsistency
	device    *deviceFacts // resolved device event, or nil
	// Device history (live only): the device's global sightings from
	// actors/events and this customer's facts from actors/devicehist.
	hist            *devicehist.Facts
	deviceFirstSeen time.Time // first sighting of the resolved device
	live            bool      // a live key: the account object may appear
	timesSeen       int64
	firstSeen       time.Time
}

// deviceFacts are the device fields that come from device history rather
// than the engine's input.
type deviceFacts struct {
	CheckedSignals []string
	TimesSeen      int64
	FirstSeen      string
	LinkedAccounts *int64
}

// evalState is one evaluate answer under construction. Pooled: the backing
// arrays make a typical answer cost no allocation beyond the address string.
type evalState struct {
	in   score.Input
	res  score.Result
	resp wire.Evaluate

	reasons     [32]string
	ruleMatched [16]string
	pins        [score.MaxPinMatches]string
	exc         wire.ExceptionMatched
	country     string
	service     string
	tzCountry   string
	complete    bool
	sdkBlocked  bool
	netAge      int64
	devAge      int64
	replayed    bool
	email       wire.EvalEmail
	tz          wire.EvalTimezone
	evidence    wire.Evidence
	device      wire.EvalDevice
	deviceFacts deviceFacts
	histFacts   devicehist.Facts
	hist        histBlock
}

var evalStates = sync.Pool{New: func() any { return new(evalState) }}

func getEvalState() *evalState {
	st := evalStates.Get().(*evalState)
	st.in = score.Input{}
	return st
}

func putEvalState(st *evalState) { evalStates.Put(st) }

// build fills st.resp from st.in, st.res and o. Every evaluate answer — live,
// test token, sandbox, sample — comes out of this one function.
func (st *evalState) build(o *evalOpts) *wire.Evaluate {
	in, res := &st.in, &st.res
	r := &st.resp
	*r = wire.Evaluate{Status: "success"}
	net := &in.Network
	degraded := net.Degraded

	r.Decision = res.Decision.String()
	if res.DecisionSource != score.SourceEngine {
		r.DecisionSource = res.DecisionSource.String()
	}
	if res.DecisionSource == score.SourceRules {
		r.RuleMatched = res.RuleMatched.AppendStrings(st.ruleMatched[:0])
	}
	if res.DecisionSource == score.SourceException && res.ExceptionCount() > 0 {
		st.exc.Names = res.AppendExceptions(st.pins[:0])
		r.ExceptionMatched = &st.exc
	}
	if res.PolicyChanged {
		r.EngineDecision = res.EngineDecision.String()
	}
	r.RiskScore = res.RiskScore
	r.IsSuspicious = res.IsSuspicious
	r.Degraded = degraded

	if degraded || !net.IP.IsValid() {
		// Also a token whose reading found no address (sdk_blocked).
		r.IP = "unknown"
	}
	if !degraded {
		if net.IP.IsValid() {
			r.IP = net.IP.String()
		}
		if net.Country != "" {
			st.country = net.Country
			r.Country = &st.country
		}
		if net.Service != "" {
			st.service = net.Service
			r.Network.Service = &st.service
		}
		n := &r.Network
		n.VPN = net.VPN
		n.Proxy = net.Proxy || net.PrivacyRelay || net.OpenProxy
		n.PrivacyRelay = res.PrivacyRelay
		n.Datacenter = net.Datacenter
		n.Tor = net.Tor
	}
	r.Network.Anonymous = res.Anonymous
	r.Network.Residential = res.Residential
	if o.kind == evalLive {
		st.complete = !degraded && net.Complete
		st.sdkBlocked = net.SDKBlocked
		r.Network.Complete = &st.complete
		r.Network.SDKBlocked = &st.sdkBlocked
		r.DeviceStatus = o.deviceStatus
		if o.hasNetAge || o.hasDevice {
			st.evidence = wire.Evidence{}
			if o.hasNetAge {
				st.netAge = o.networkAgeS
				st.evidence.NetworkAgeS = &st.netAge
			}
			if o.hasDevice {
				st.devAge, st.replayed = o.deviceAgeS, o.deviceReplayed
				st.evidence.DeviceAgeS = &st.devAge
				st.evidence.DeviceReplayed = &st.replayed
			}
			r.Evidence = &st.evidence
		}
	}

	if in.Device.Present {
		d := &in.Device
		st.device = wire.EvalDevice{
			Antidetect: d.Antidetect, Automation: d.Automation, Emulator: d.Emulator,
			VirtualMachine: d.VirtualMachine, Incognito: d.Incognito, PrivacyMode: d.PrivacyMode,
			IPBlocklisted: d.IPBlocklisted, HighActivity: d.HighActivity, VisitorID: d.VisitorID,
			TamperingScore: d.TamperingScore, Complete: d.Complete, MultiAccount: d.MultiAccount,
		}
		if f := o.device; f != nil {
			st.device.CheckedSignals = f.CheckedSignals
			st.device.TimesSeen = f.TimesSeen
			st.device.FirstSeen = f.FirstSeen
			st.device.Returning = f.TimesSeen > 1
			st.device.LinkedAccounts = f.LinkedAccounts
		}
		if o.hist != nil {
			st.device.CustomerHistory = st.hist.device(&st.device, o.hist, o.timesSeen, o.firstSeen)
		}
		st.device.GPUEvidence, st.device.BrowserConsistency = o.gpuEv, o.browserEv
		if st.device.CheckedSignals == nil {
			st.device.CheckedSignals = []string{}
		}
		r.Device = &st.device
	}
	if o.hist != nil {
		r.Account = st.hist.account(o.hist, o.live)
	}
	if in.Email.Sent {
		st.email.Disposable = in.Email.Disposable
		r.Email = &st.email
	}
	if tz := &res.TimeZone; tz.Present {
		st.tz = wire.EvalTimezone{Reported: tz.Reported, MatchesIP: tz.MatchesIP, Checked: tz.Checked}
		if tz.Country != "" {
			st.tzCountry = tz.Country
			st.tz.Country = &st.tzCountry
		}
		r.Timezone = &st.tz
	}
	r.Reasons = res.Reasons.AppendStrings(st.reasons[:0])
	r.EvaluatedInMs = o.evaluatedMs
	r.Test = o.test
	r.Sandbox = o.sandbox
	r.Sample = o.kind == evalSample

	r.Details = wire.Details{
		IP: r.IP, CC: r.Country, VPN: r.Network.VPN, Proxied: r.Network.Proxy,
		Anon: r.Network.Anonymous, DCH: r.Network.Datacenter, Service: r.Network.Service, Tor: r.Network.Tor,
	}
	return r
}
