package score

import (
	"net/netip"
	"strings"
)

// Risk weights, in percent: how likely the signal alone is to mean a bad
// actor. Evaluate's comment gives the formula and why it is monotone.
const (
	wTor                     = 90
	wAutomation              = 90
	wProxy                   = 85 // a proxy that is not the privacy relay
	wAntidetect              = 85
	wEmulator                = 80
	wVPN                     = 60
	wVirtualMachine          = 50
	wPrivacyRelay            = 40
	wIPBlocklisted           = 40
	wDisposableEmail         = 40
	wAntidetectRandomization = 40
	wAntidetectProfileBurst  = 40
	wDatacenter              = 35
	wAnonymous               = 30 // Network.Anonymous only: VPN/proxy/Tor carry their own weight
	wDeviceManyAccounts      = 30
	wTimezoneMismatch        = 20
	wMultiAccount            = 25
	wGPUInconsistent         = 25
	wHighActivity            = 20
	wAccountManyDevices      = 20
	wIPManyAccounts          = 15
	wAccountNewDevice        = 10
	wIncognito               = 10
	wPrivacyMode             = 5
	wTamperingScoreMax       = 50 // × TamperingScore
)

// scoreOne is 1 in the fixed point the score is computed in. Integers, not
// floats, so a product landing on .5 rounds the same on every machine and
// 0.65 × 0.70 is exactly 0.455; floor division keeps each step monotone.
const scoreOne int64 = 1e12

// keep multiplies the running "probability that nothing is wrong" by the
// complement of weight w when the component fired.
func keep(k int64, on bool, w int64) int64 {
	if on {
		return k * (100 - w) / 100
	}
	return k
}

// Evaluate decides one evaluation. It reads in, overwrites *out and never
// allocates or panics; a nil in reads as the zero Input (clean), a nil out
// is a no-op.
//
// Engine decision (SPEC 2.8):
//   - block: a proxy that is not the privacy relay, Tor, automation,
//     emulator, antidetect (tampering);
//   - else review: VPN, virtual machine (since VirtualMachineReviewSince),
//     privacy relay (since PrivacyRelaySince; before, it is a proxy);
//   - else allow — datacenter and anonymous-network alone stay allow;
//   - then allow is raised to review by a disposable email, a checked
//     time-zone mismatch, device_many_accounts, or one of the three SPEC 2.6
//     browser-consistency findings. No other account count raises it
//     (SPEC 2.2 says so only for device_many_accounts); incognito, privacy
//     mode, blocklisted address, high activity and multi-account only add
//     reasons and score.
//
// Risk score: the weights (percent) act as independent evidence, a "noisy OR":
//
//	k          = (1 − 0.5·t) × Π (1 − wᵢ/100)   over the components that fired
//	risk_score = round(100 × (1 − k))
//
// where t ∈ [0, 1] is the device tampering score (clamped, NaN reads 0,
// counted in steps of 0.0001), computed in exact fixed point and rounded half up.
// Weights: Tor 90, automation 90, proxy (not the relay) 85, antidetect 85,
// emulator 80, VPN 60, virtual machine 50, privacy relay 40, blocklisted
// address 40, disposable email 40, antidetect randomization 40, antidetect
// profile burst 40, datacenter 35, unclassified anonymous network 30,
// device_many_accounts 30, multi-account device 25, GPU inconsistent 25,
// time-zone mismatch 20, high activity 20, account_many_devices 20,
// ip_many_accounts 15, account_new_device 10, incognito 10, privacy mode 5.
// network.anonymous adds nothing of its own when VPN, proxy or Tor already
// carry their weight. A single component scores its own weight (Tor alone
// 90, like the bare lookup; datacenter alone 35), no signal at all scores 0,
// and 100 needs several strong signals agreeing. Every factor is ≤ 1, so switching a
// component on or raising t never lowers the score. Where the spec turns one
// reading off when another fires, the newcomer outweighs what it turns off:
// any VPN, proxy, relay, Tor or datacenter exit (≥ 35) switches off both the
// time-zone check (20) and the per-address account count (15), together
// 1 − 0.80·0.85 = 32. A mobile carrier also withholds that count but is not a
// risk signal (the spec makes the count null there), and a privacy relay (40)
// replaces the proxy weight (85) only because the proxy *is* the relay, a
// reclassification, not an extra signal. Rules and pins never change the
// score.
//
// Policy (ADMIN.md, SPEC 2.2): each fired signal with a rule applies that
// rule; the most severe applied action replaces the engine decision
// (decision_source "rules"). A proxy rule applies to a privacy relay only when
// its action is Allow. A matching pin outranks rules (decision_source
// "exception"); among several, the most specific wins (device pin, then the
// longest prefix), then the most severe, then the first listed.
func Evaluate(in *Input, out *Result) {
	if out == nil {
		return
	}
	var zero Input
	if in == nil {
		in = &zero
	}
	*out = Result{pinWin: -1, pins: in.Policy.Pins}

	// Network evidence; all false when degraded (SPEC 2.8.6).
	n := &in.Network
	var vpn, relay, realProxy, tor, dc, anonRaw, netBlocked bool
	if !n.Degraded {
		vpn = n.VPN
		// Before PrivacyRelaySince a privacy relay is a proxy like any other.
		relay = n.PrivacyRelay && in.since(PrivacyRelaySince)
		realProxy = n.OpenProxy || (n.Proxy && !n.PrivacyRelay) || (n.PrivacyRelay && !relay)
		tor = n.Tor
		dc = n.Datacenter
		anonRaw = n.Anonymous
		netBlocked = n.Blocklisted
	}
	proxy := realProxy || relay
	anonymous := vpn || proxy || tor || anonRaw
	exit := vpn || proxy || tor || dc

	// Device evidence; all false without a device event (SPEC 2.8.7).
	d := &in.Device
	var automation, antidetect, emulator, vm, incognito, privacyMode, devBlocked, highActivity, multiAccount bool
	var tampering int64 // tampering score in 1/10000
	if d.Present {
		automation = d.Automation
		antidetect = d.Antidetect
		emulator = d.Emulator
		vm = d.VirtualMachine
		incognito = d.Incognito
		privacyMode = d.PrivacyMode
		devBlocked = d.IPBlocklisted
		highActivity = d.HighActivity
		multiAccount = d.MultiAccount
		switch t := d.TamperingScore; {
		case !(t > 0): // also NaN
		case t >= 1:
			tampering = 10000
		default:
			tampering = int64(t*10000 + 0.5)
		}
	}
	ipBlocked := netBlocked || devBlocked

	disposable := in.Email.Sent && in.Email.Disposable

	// Time zone: compared only when both countries are known and the exit is
	// not one where a mismatch is expected.
	var tzMismatch bool
	if tz := &in.TimeZone; tz.Sent {
		netCountry := ""
		if !n.Degraded {
			netCountry = n.Country
		}
		known := tz.Country != "" && netCountry != ""
		out.TimeZone = TimeZoneResult{
			Present:   true,
			Reported:  tz.Zone,
			Country:   tz.Country,
			MatchesIP: known && strings.EqualFold(tz.Country, netCountry),
			Checked:   known && !exit,
		}
		// A zone several countries use (Europe/Zurich: CH, DE for Büsingen,
		// LI) is, for an address in one of them, that country's zone:
		// timezone.country names it, so that matches_ip stays "zone's
		// country equals country" (SPEC 2.2).
		if known && !out.TimeZone.MatchesIP && usesZone(tz.Others, netCountry) {
			out.TimeZone.Country, out.TimeZone.MatchesIP = netCountry, true
		}
		tzMismatch = out.TimeZone.Checked && !out.TimeZone.MatchesIP
	}

	a := &in.Account
	deviceMany := d.Present && a.DeviceAccounts24h >= ManyThreshold
	accountMany := a.AccountDevices24h >= ManyThreshold
	ipMany := !n.SharedExit() && a.IPAccounts24h >= ManyThreshold
	newDevice := d.Present && a.NewDevice

	c := &in.Consistency

	// Reasons.
	var rs ReasonSet
	set := func(on bool, r Reason) {
		if on {
			rs.add(r)
		}
	}
	set(accountMany, ReasonAccountManyDevices)
	set(newDevice, ReasonAccountNewDevice)
	set(anonymous, ReasonAnonymousNetwork)
	set(antidetect, ReasonAntidetectBrowser)
	set(c.AntidetectProfileBurst, ReasonAntidetectProfileBurst)
	set(c.AntidetectRandomization, ReasonAntidetectRandomization)
	set(automation, ReasonAutomationDetected)
	set(dc, ReasonDatacenterASN)
	set(deviceMany, ReasonDeviceManyAccounts)
	set(disposable, ReasonDisposableEmail)
	set(emulator, ReasonEmulatorDetected)
	set(c.GPUInconsistent, ReasonGPUInconsistent)
	set(highActivity, ReasonHighActivityDevice)
	set(ipBlocked, ReasonIPBlocklisted)
	set(ipMany, ReasonIPManyAccounts)
	set(multiAccount, ReasonMultiAccountDevice)
	set(relay, ReasonPrivacyRelay)
	set(incognito, ReasonPrivateBrowsing)
	set(realProxy, ReasonProxyDetected)
	set(tzMismatch, ReasonTimezoneMismatch)
	set(tor, ReasonTorExitNode)
	set(vm, ReasonVirtualMachine)
	set(vpn, ReasonVPNDetected)
	out.Reasons = rs

	// Fired rule signals.
	var fs SignalSet
	fire := func(on bool, s Signal) {
		if on {
			fs.add(s)
		}
	}
	fire(vpn, SignalVPN)
	fire(proxy, SignalProxy)
	fire(tor, SignalTor)
	fire(dc, SignalDatacenter)
	fire(anonymous, SignalAnonymous)
	fire(automation, SignalAutomation)
	fire(antidetect, SignalAntidetect)
	fire(emulator, SignalEmulator)
	fire(vm, SignalVirtualMachine)
	fire(incognito, SignalIncognito)
	fire(privacyMode, SignalPrivacyMode)
	fire(ipBlocked, SignalIPBlocklisted)
	fire(highActivity, SignalHighActivity)
	fire(multiAccount, SignalMultiAccount)
	fire(disposable, SignalDisposableEmail)
	fire(tzMismatch, SignalTimezoneMismatch)
	out.Fired = fs
	out.vmReview = vm && in.since(VirtualMachineReviewSince)

	// Engine decision.
	engine := Allow
	switch {
	case realProxy || tor || automation || emulator || antidetect:
		engine = Block
	case vpn || out.vmReview || relay:
		engine = Review
	case disposable || tzMismatch || deviceMany ||
		c.GPUInconsistent || c.AntidetectRandomization || c.AntidetectProfileBurst:
		engine = Review
	}
	out.EngineDecision = engine
	out.IsSuspicious = vpn || proxy || tor || antidetect || automation || emulator || vm
	out.Anonymous = anonymous
	out.Residential = !n.Degraded && !dc && !proxy
	out.PrivacyRelay = relay

	// Risk score; the multiplication order is fixed so results are
	// bit-for-bit reproducible.
	k := scoreOne
	k = keep(k, tor, wTor)
	k = keep(k, automation, wAutomation)
	k = keep(k, realProxy, wProxy)
	k = keep(k, antidetect, wAntidetect)
	k = keep(k, emulator, wEmulator)
	k = keep(k, vpn, wVPN)
	k = keep(k, vm, wVirtualMachine)
	k = keep(k, relay, wPrivacyRelay)
	k = keep(k, ipBlocked, wIPBlocklisted)
	k = keep(k, disposable, wDisposableEmail)
	k = keep(k, c.AntidetectRandomization, wAntidetectRandomization)
	k = keep(k, c.AntidetectProfileBurst, wAntidetectProfileBurst)
	k = keep(k, dc, wDatacenter)
	k = keep(k, anonRaw, wAnonymous)
	k = keep(k, deviceMany, wDeviceManyAccounts)
	k = keep(k, tzMismatch, wTimezoneMismatch)
	k = keep(k, multiAccount, wMultiAccount)
	k = keep(k, c.GPUInconsistent, wGPUInconsistent)
	k = keep(k, highActivity, wHighActivity)
	k = keep(k, accountMany, wAccountManyDevices)
	k = keep(k, ipMany, wIPManyAccounts)
	k = keep(k, newDevice, wAccountNewDevice)
	k = keep(k, incognito, wIncognito)
	k = keep(k, privacyMode, wPrivacyMode)
	k = k * (10000*100 - tampering*wTamperingScoreMax) / (10000 * 100)
	score := (100*(scoreOne-k) + scoreOne/2) / scoreOne // round half up
	out.RiskScore = int(min(max(score, 0), 100))

	// Custom rules.
	decision, source := engine, SourceEngine
	var best Action
	for _, r := range in.Policy.Rules {
		if !r.Action.Valid() || !fs.Has(r.Signal) {
			continue
		}
		// SPEC 2.2: a proxy rule reaches a privacy relay only to allow it.
		if r.Signal == SignalProxy && !realProxy && r.Action != Allow {
			continue
		}
		out.RuleMatched.add(r.Signal)
		if r.Action > best || (r.Action == best && r.Signal < out.RuleSignal) {
			best, out.RuleSignal = r.Action, r.Signal
		}
	}
	if best != ActionNone {
		decision, source = best, SourceRules
	}

	// Exception pins.
	var ip netip.Addr // unknown when degraded: IP pins cannot match
	if !n.Degraded {
		ip = n.IP.Unmap()
	}
	visitor := ""
	if d.Present {
		visitor = d.VisitorID
	}
	win, winSpec := -1, -1
	for i := range in.Policy.Pins {
		p := &in.Policy.Pins[i]
		if !p.Action.Valid() {
			continue
		}
		var hit bool
		if p.Prefix.IsValid() {
			hit = ip.IsValid() && p.Prefix.Contains(ip)
		} else {
			hit = visitor != "" && p.VisitorID == visitor
		}
		if !hit {
			continue
		}
		if int(out.pinN) < MaxPinMatches {
			out.pinIdx[out.pinN] = int32(i)
			out.pinN++
		}
		spec := p.specificity()
		if win < 0 || spec > winSpec || (spec == winSpec && p.Action > in.Policy.Pins[win].Action) {
			win, winSpec = i, spec
		}
	}
	if win >= 0 {
		// Keep the winner listed even past MaxPinMatches; it comes after
		// every listed index, so the list stays in Policy.Pins order.
		if last := out.pinIdx[out.pinN-1]; int(last) != win && win > int(last) {
			out.pinIdx[out.pinN-1] = int32(win)
		}
		out.pinWin = int32(win)
		decision, source = in.Policy.Pins[win].Action, SourceException
	}

	out.Decision = decision
	out.DecisionSource = source
	out.PolicyChanged = decision != engine
}

// usesZone reports whether cc is in the space-separated country list
// others, case-insensitively. It does not allocate.
func usesZone(others, cc string) bool {
	for others != "" {
		var c string
		c, others, _ = strings.Cut(others, " ")
		if strings.EqualFold(c, cc) {
			return true
		}
	}
	return false
}
