package score

import (
	"net/netip"
	"time"
)

// Network is what the network layer measured for the visitor's address. The
// zero value is a measured, clean, residential connection with no address.
type Network struct {
	// Degraded: no network evidence at all (missing token or an outage,
	// SPEC 2.8.6). Every other field is then ignored as evidence: the flags
	// read false, meaning "unavailable", the address and country unknown.
	Degraded bool

	VPN bool // commercial VPN exit
	// Proxy: a residential or SOCKS/HTTP proxy. As on the wire (SPEC 2.2) it
	// may also be set for a privacy relay; see PrivacyRelay.
	Proxy bool
	// PrivacyRelay: the address is a device vendor's privacy relay egress.
	// It implies a proxy, and Proxy && PrivacyRelay means "the proxy is the
	// relay", not "a relay and another proxy": a relay must never block on
	// its own, whether or not the feed also set Proxy.
	PrivacyRelay bool
	// OpenProxy: an open HTTP/SOCKS proxy. Always a real proxy, even when
	// PrivacyRelay is also set.
	OpenProxy  bool
	Datacenter bool // known datacenter or cloud ASN / range
	Tor        bool // Tor exit
	// Anonymous: an anonymising network the layer could not classify as VPN,
	// proxy or Tor. network.anonymous is true for it and for any of those.
	Anonymous   bool
	Blocklisted bool // address on a spam or attack blocklist

	// Mobile: a mobile-carrier address. Not a risk signal; it marks a shared
	// exit, so the per-address account count is not used (SPEC 2.2 account).
	Mobile bool

	// Informational: echoed on the wire, never change decision or score.
	Service    string // provider label, "" when unknown (network.service null)
	Complete   bool   // network.complete
	SDKBlocked bool   // network.sdk_blocked

	IP      netip.Addr // visitor address; matched against IP pins
	Country string     // ISO 3166-1 alpha-2, "" when unknown (country null)
}

// SharedExit reports whether the address is shared by many users (VPN, proxy,
// privacy relay, datacenter, Tor, mobile carrier) or unmeasured (degraded, or
// sdk_blocked: the reading failed); the "accounts from this address in 24 h"
// count is then null on the wire and ignored by the engine.
func (n *Network) SharedExit() bool {
	return n.Degraded || n.SDKBlocked || n.VPN || n.Proxy || n.PrivacyRelay || n.OpenProxy ||
		n.Datacenter || n.Tor || n.Mobile
}

// Device is what the device-intelligence provider returned for the event id.
// Present is false when no fingerprintEventId was sent or it did not resolve
// (SPEC 2.8.7): every other field is then ignored.
type Device struct {
	Present bool

	Automation     bool // automated browser (bot)
	Antidetect     bool // antidetect / fingerprint-spoofing browser: "tampering" of SPEC 2.8.1
	Emulator       bool
	VirtualMachine bool
	Incognito      bool
	PrivacyMode    bool
	IPBlocklisted  bool
	HighActivity   bool
	MultiAccount   bool // linked_accounts > 1

	// TamperingScore is the upstream score in [0, 1]; it only feeds the risk
	// score. Values outside [0, 1] are clamped, NaN reads as 0.
	TamperingScore float64

	VisitorID string // matched against visitor_id pins
	Complete  bool   // informational (device.complete)
}

// Email is the email check. Sent is false when no email was sent.
type Email struct {
	Sent       bool
	Disposable bool
}

// TimeZone is the visitor's reported zone, already resolved against the zone
// → country table. Sent is true only for a recognised zone (SPEC 2.1: the
// timezone block appears only then).
type TimeZone struct {
	Sent    bool
	Zone    string // IANA name as reported (echoed as timezone.reported)
	Country string // ISO 3166-1 alpha-2 of the zone, "" for zones without one (UTC, Etc/*)
	// Others are the other countries tzdata says use the zone (zone1970.tab),
	// space-separated ("DE LI" for Europe/Zurich): the zone matches an
	// address in any of them too.
	Others string
}

// Account carries the per-account counts of SPEC 2.2 (`account` object).
// Zero values mean "none or unknown"; the engine applies the thresholds.
type Account struct {
	// DeviceAccounts24h: accounts seen on this device in 24 h, this one
	// included. Ignored without device evidence (null on the wire).
	DeviceAccounts24h int
	// AccountDevices24h: devices this account was checked on in 24 h.
	AccountDevices24h int
	// IPAccounts24h: accounts from this address in 24 h. Ignored on a shared
	// exit (Network.SharedExit).
	IPAccounts24h int
	// NewDevice: the account was seen on another device and never this one.
	// Ignored without device evidence.
	NewDevice bool
}

// ManyThreshold is the count at which the account counts add their reason
// (SPEC 2.2: "3 or more").
const ManyThreshold = 3

// Consistency carries the three browser-consistency findings that SPEC 2.6
// lets raise allow to review (never to block).
type Consistency struct {
	GPUInconsistent         bool
	AntidetectRandomization bool
	AntidetectProfileBurst  bool
}

// Input is everything one evaluation is decided on.
type Input struct {
	Network     Network
	Device      Device
	Email       Email
	TimeZone    TimeZone
	Account     Account
	Consistency Consistency
	// Policy is the account's rules and pins; the zero value is "none"
	// (sandbox, samples, bare test tokens). Evaluate only reads it.
	Policy Policy
	// At is the request's time: a behaviour SPEC §9 dates applies from its
	// date on. The zero time applies every dated behaviour (samples).
	At time.Time
}

// Dates (UTC) from which SPEC §9's dated behaviour applies.
var (
	// VirtualMachineReviewSince: a virtual machine alone returns review
	// (SPEC 2.2 device.virtual_machine).
	VirtualMachineReviewSince = time.Date(2026, 9, 29, 0, 0, 0, 0, time.UTC)
	// PrivacyRelaySince: a privacy relay is told apart from a proxy
	// (SPEC 2.2 network.privacy_relay); before, it was a proxy.
	PrivacyRelaySince = time.Date(2026, 10, 10, 0, 0, 0, 0, time.UTC)
)

// since reports whether the behaviour dated d applies to in.
func (in *Input) since(d time.Time) bool { return in.At.IsZero() || !in.At.Before(d) }

// TimeZoneResult is the timezone block of SPEC 2.2.
type TimeZoneResult struct {
	Present   bool   // the block appears (a recognised zone was sent)
	Reported  string // timezone.reported
	Country   string // timezone.country ("" → null)
	MatchesIP bool   // zone country equals the network country (both known)
	// Checked: the comparison counts. False on VPN, proxy (incl. relay), Tor
	// or datacenter exits, and when either country is unknown (degraded, Tor
	// with no country, zones such as UTC), since nothing can be raised then.
	Checked bool
}

// MaxPinMatches is how many matched pins a Result lists. The winner is
// always chosen among all pins and always listed.
const MaxPinMatches = 8

// Result is the engine's answer. Evaluate overwrites every field.
type Result struct {
	Decision       Action // final decision, after rules and pins
	EngineDecision Action // the engine's own verdict
	// PolicyChanged: Decision != EngineDecision. engine_decision appears on
	// the wire only then.
	PolicyChanged  bool
	DecisionSource Source // SourceRules / SourceException whenever policy matched, even if unchanged

	RiskScore    int // 0–100, engine only: rules and pins never change it
	Reasons      ReasonSet
	IsSuspicious bool // legacy isSuspicious, SPEC 2.2

	// Fired is every rule signal that fired, whether or not a rule exists
	// for it (webhook details, rule matching).
	Fired SignalSet
	// RuleMatched is every fired signal whose rule applied, set even when a
	// pin then outranked the rules. The wire shows rule_matched only with
	// decision_source "rules" (SPEC 2.2 "with rules").
	RuleMatched SignalSet
	// RuleSignal is the signal of the rule that decided: the first in Signal
	// order among the matched rules with the most severe action.
	RuleSignal Signal

	// Network summary, after the degraded rule (all false when degraded).
	Anonymous    bool // network.anonymous
	Residential  bool // network.residential: neither datacenter nor proxy fired
	PrivacyRelay bool // network.privacy_relay
	// vmReview: a virtual machine fired at a request time when it returns
	// review (VirtualMachineReviewSince); only then is it a threat.
	vmReview bool

	TimeZone TimeZoneResult

	pinN   uint8
	pinWin int32 // index into pins of the winning pin, -1 when none
	pinIdx [MaxPinMatches]int32
	pins   []Pin // Input.Policy.Pins, to name the matches
}

// ExceptionCount returns how many pins matched (at most MaxPinMatches are
// listed). On evaluate, exception_matched is a string when this is 1 and a
// list when more (CLARIFICATIONS.md); on lookup it is always a list.
func (r *Result) ExceptionCount() int { return int(r.pinN) }

// Exception returns the i-th matched pin, in Policy.Pins order.
func (r *Result) Exception(i int) (Pin, bool) {
	if i < 0 || i >= int(r.pinN) || int(r.pinIdx[i]) >= len(r.pins) {
		return Pin{}, false
	}
	return r.pins[r.pinIdx[i]], true
}

// ExceptionWinner returns the pin that decided, if any.
func (r *Result) ExceptionWinner() (Pin, bool) {
	if r.pinWin < 0 || int(r.pinWin) >= len(r.pins) || r.pinN == 0 {
		return Pin{}, false
	}
	return r.pins[r.pinWin], true
}

// AppendExceptions appends the names (Pin.Name) of the matched pins in
// Policy.Pins order: the value of exception_matched. It allocates only for
// an unlabelled IP pin (the address is formatted) or when dst is short.
func (r *Result) AppendExceptions(dst []string) []string {
	for i := 0; i < int(r.pinN); i++ {
		if p, ok := r.Exception(i); ok {
			dst = append(dst, p.Name())
		}
	}
	return dst
}
