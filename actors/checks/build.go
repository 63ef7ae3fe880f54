package checks

import (
	"net/netip"
	"sync"
	"time"
	"unsafe"

	"github.com/fraudd/fraudd/actors/devicehist"
	"github.com/fraudd/fraudd/intel/device"
	"github.com/fraudd/fraudd/intel/score"
	"github.com/fraudd/fraudd/wire"
)

// evalKind says what produced an evaluate answer; it decides which fields
// only a visitor check shows (CLARIFICATIONS.md).
type evalKind uint8

const (
	kindVisitor   evalKind = iota // a visitor check: a real network token or the degraded answer
	kindTestToken                 // a fixed test_* token (own key or sandbox)
	kindSample                    // GET /v1/evaluate/sample
)

// evalOpts are the facts the builder needs beside the engine's input and
// result.
type evalOpts struct {
	kind    evalKind
	test    bool // test: true (a test token or the test key)
	sandbox bool
	liveKey bool // a live key since the account object's date: it may appear
	// Visitor checks only: device_status (ok, unavailable, not_sent) and
	// evidence.network_age_s (with a network token).
	deviceStatus string
	networkAgeS  int64
	hasNetAge    bool
	evaluatedMs  int64
	// netEv says why each network flag was set (visitor checks; test
	// tokens and samples are filled in build).
	netEv []wire.NetworkEvidence
	// seen is the resolved device's global sightings (nil without a
	// resolved event; a sample shows fixed ones); on a visitor check also
	// evidence.device_age_s and device_replayed.
	seen           *deviceSeen
	deviceAgeS     int64
	deviceReplayed bool
	// Device-evidence beta results; nil when not sent.
	gpuEv     *wire.GPUEvidence
	browserEv *wire.BrowserConsistency
	// hist is this customer's device history (actors/devicehist); nil when
	// it was not observed.
	hist *devicehist.Facts
}

// deviceSeen is what the device's event and global sightings add to the
// device block: the checked signals, times_seen and first_seen.
type deviceSeen struct {
	checked   []string
	mask      device.Checked // the verdicts the report's checks covered
	timesSeen int64
	firstSeen time.Time
}

// Evaluation is one evaluate answer. It is pooled: its backing arrays make a
// typical answer cost no allocation beyond the address string. Body is valid
// until Release.
type Evaluation struct {
	in   score.Input
	res  score.Result
	opts evalOpts
	resp wire.Evaluate

	seen        deviceSeen
	histFacts   devicehist.Facts
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
	netEv       [maxNetEvidence]wire.NetworkEvidence
	device      wire.EvalDevice
	hist        histBlock
}

var evaluations = sync.Pool{New: func() any { return new(Evaluation) }}

func getEvaluation() *Evaluation {
	ev := evaluations.Get().(*Evaluation)
	ev.in, ev.opts = score.Input{}, evalOpts{}
	return ev
}

// Body is the answer to encode.
func (ev *Evaluation) Body() *wire.Evaluate { return &ev.resp }

// Release returns the answer to the pool; neither it nor its Body may be
// used afterwards.
func (ev *Evaluation) Release() { evaluations.Put(ev) }

// fixedIPText holds the text of every test token's fixed address, formatted
// once: a test-token answer, the commonest integration check, then formats
// (and allocates) none.
var fixedIPText = func() map[netip.Addr]string {
	m := make(map[netip.Addr]string)
	for _, p := range score.TestTokens() {
		m[p.Network.IP] = p.Network.IP.String()
	}
	return m
}()

// ipText is the answer's ip text of a.
func ipText(a netip.Addr) string {
	if t, ok := fixedIPText[a]; ok {
		return t
	}
	return a.String()
}

// build fills ev.resp from ev.in, ev.res and ev.opts. Every evaluate answer
// (visitor check, test token, sandbox, sample) comes out of this one
// function.
func (ev *Evaluation) build() {
	in, res, o := &ev.in, &ev.res, &ev.opts
	r := &ev.resp
	*r = wire.Evaluate{Status: "success"}
	net := &in.Network
	degraded := net.Degraded

	r.Decision = res.Decision.String()
	if res.DecisionSource != score.SourceEngine {
		r.DecisionSource = res.DecisionSource.String()
	}
	if res.DecisionSource == score.SourceRules {
		r.RuleMatched = res.RuleMatched.AppendStrings(ev.ruleMatched[:0])
	}
	if res.DecisionSource == score.SourceException && res.ExceptionCount() > 0 {
		ev.exc.Names = res.AppendExceptions(ev.pins[:0])
		r.ExceptionMatched = &ev.exc
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
			r.IP = ipText(net.IP)
		}
		if net.Country != "" {
			ev.country = net.Country
			r.Country = &ev.country
		}
		if net.Service != "" {
			ev.service = net.Service
			r.Network.Service = &ev.service
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
	if o.kind == kindVisitor {
		ev.complete = !degraded && net.Complete
		ev.sdkBlocked = net.SDKBlocked
		r.Network.Complete = &ev.complete
		r.Network.SDKBlocked = &ev.sdkBlocked
		r.DeviceStatus = o.deviceStatus
		if o.hasNetAge || o.seen != nil {
			ev.evidence = wire.Evidence{}
			if o.hasNetAge {
				ev.netAge = o.networkAgeS
				ev.evidence.NetworkAgeS = &ev.netAge
			}
			if o.seen != nil {
				ev.devAge, ev.replayed = o.deviceAgeS, o.deviceReplayed
				ev.evidence.DeviceAgeS = &ev.devAge
				ev.evidence.DeviceReplayed = &ev.replayed
			}
			r.Evidence = &ev.evidence
		}
	}
	// Why each network flag was set (additive): absent when none was.
	netEv := o.netEv
	switch o.kind {
	case kindTestToken:
		netEv = fixedEvidence(ev.netEv[:0], r, evTestToken)
	case kindSample:
		netEv = fixedEvidence(ev.netEv[:0], r, evSample)
	}
	if !degraded && len(netEv) > 0 {
		if r.Evidence == nil {
			ev.evidence = wire.Evidence{}
			r.Evidence = &ev.evidence
		}
		r.Evidence.Network = netEv
	}

	if in.Device.Present {
		d := &in.Device
		ev.device = wire.EvalDevice{
			Antidetect: d.Antidetect, Automation: d.Automation, Emulator: d.Emulator,
			VirtualMachine: d.VirtualMachine, Incognito: d.Incognito, PrivacyMode: d.PrivacyMode,
			IPBlocklisted: d.IPBlocklisted, HighActivity: d.HighActivity, VisitorID: d.VisitorID,
			TamperingScore: d.TamperingScore, Complete: d.Complete, MultiAccount: d.MultiAccount,
		}
		if sn := o.seen; sn != nil {
			ev.device.CheckedSignals = sn.checked
			ev.device.TimesSeen = sn.timesSeen
			ev.device.FirstSeen = ev.hist.stamp(0, sn.firstSeen)
			ev.device.Returning = sn.timesSeen > 1
		}
		if o.hist != nil {
			ev.device.CustomerHistory = ev.hist.device(&ev.device, o.hist)
		}
		ev.device.GPUEvidence, ev.device.BrowserConsistency = o.gpuEv, o.browserEv
		if ev.device.CheckedSignals == nil {
			ev.device.CheckedSignals = []string{}
		}
		r.Device = &ev.device
	}
	if o.hist != nil {
		r.Account = ev.hist.account(o.hist, o.liveKey)
	}
	if in.Email.Sent {
		ev.email.Disposable = in.Email.Disposable
		r.Email = &ev.email
	}
	if tz := &res.TimeZone; tz.Present {
		ev.tz = wire.EvalTimezone{Reported: tz.Reported, MatchesIP: tz.MatchesIP, Checked: tz.Checked}
		if tz.Country != "" {
			ev.tzCountry = tz.Country
			ev.tz.Country = &ev.tzCountry
		}
		r.Timezone = &ev.tz
	}
	r.Reasons = res.Reasons.AppendStrings(ev.reasons[:0])
	r.EvaluatedInMs = o.evaluatedMs
	r.Test = o.test
	r.Sandbox = o.sandbox
	r.Sample = o.kind == kindSample

	r.Details = wire.Details{
		IP: r.IP, CC: r.Country, VPN: r.Network.VPN, Proxied: r.Network.Proxy,
		Anon: r.Network.Anonymous, DCH: r.Network.Datacenter, Service: r.Network.Service, Tor: r.Network.Tor,
	}
}

// histBlock is the device-history part of one evaluate answer. It lives by
// value in the pooled Evaluation: the nullable fields point into it and its
// time strings are formatted into its own buffers, so filling it allocates
// nothing. What it returns is valid until it is filled again.
type histBlock struct {
	acct      wire.EvalAccount
	history   wire.CustomerHistory
	devAccts  int
	ipAccts   int
	newDevice bool
	linked    int64
	stamps    [3][len(time.RFC3339) + 8]byte
}

// stamp formats t (UTC, seconds) into buffer i without allocating.
func (b *histBlock) stamp(i int, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	s := t.UTC().AppendFormat(b.stamps[i][:0], time.RFC3339)
	return unsafe.String(unsafe.SliceData(s), len(s))
}

// account is the `account` object: nil (absent) unless an accountId came
// with a live key.
func (b *histBlock) account(f *devicehist.Facts, liveKey bool) *wire.EvalAccount {
	if !liveKey || !f.Account {
		return nil
	}
	b.acct = wire.EvalAccount{DevicesForAccount24h: f.AccountDevices24h, RelatedAccounts90d: f.RelatedAccounts90d}
	if f.Device {
		b.devAccts, b.newDevice = f.DeviceAccounts24h, f.NewDevice
		b.acct.AccountsOnDevice24h, b.acct.NewDevice = &b.devAccts, &b.newDevice
	}
	if f.IPCounted {
		b.ipAccts = f.IPAccounts24h
		b.acct.AccountsFromIP24h = &b.ipAccts
	}
	return &b.acct
}

// device fills the device block's fields that come from this customer's
// history — linked_accounts (only with an accountId) and multi_account —
// and returns device.customer_history, nil when f has no device facts.
func (b *histBlock) device(d *wire.EvalDevice, f *devicehist.Facts) *wire.CustomerHistory {
	d.LinkedAccounts, d.MultiAccount = nil, false
	if !f.Device {
		return nil
	}
	if f.Account {
		b.linked = int64(f.LinkedAccounts)
		d.LinkedAccounts = &b.linked
		d.MultiAccount = f.LinkedAccounts > 1
	}
	h := &f.History
	b.history = wire.CustomerHistory{
		Visits: h.Visits, Returning: h.Returning(), FirstSeen: b.stamp(1, h.FirstSeen), LastSeen: b.stamp(2, h.LastSeen),
		Accounts: h.Accounts, WindowDays: devicehist.WindowDays,
	}
	return &b.history
}
