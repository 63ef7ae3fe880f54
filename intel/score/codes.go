package score

import (
	"iter"
	"math/bits"
)

// Action is a decision: the engine's verdict, a rule's or a pin's action.
// The numeric order is the severity order (Allow < Review < Block), which is
// what "the most severe rule wins" compares.
type Action uint8

// Actions. ActionNone is the zero value: "no decision", e.g. an unset rule.
const (
	ActionNone Action = iota
	Allow
	Review
	Block
)

var actionNames = [...]string{"", "allow", "review", "block"}

// String returns the wire spelling ("allow", "review", "block"), "" for
// ActionNone or an out-of-range value.
func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return ""
}

// Valid reports whether a is one of Allow, Review, Block.
func (a Action) Valid() bool { return a >= Allow && a <= Block }

// Source says who authored the final decision: the engine, the account's
// custom rules or an exception pin.
type Source uint8

// Decision sources.
const (
	SourceEngine Source = iota
	SourceRules
	SourceException
)

var sourceNames = [...]string{"", "rules", "exception"}

// String returns the wire value of decision_source: "" for the engine (the
// field is then omitted), "rules" or "exception".
func (s Source) String() string {
	if int(s) < len(sourceNames) {
		return sourceNames[s]
	}
	return ""
}

// Signal is a rule signal of ADMIN.md: what a custom rule can match. The
// constants are in ADMIN.md's listing order, which is the order of every
// SignalSet iteration (rule_matched on the wire).
type Signal uint8

// Rule signals. SignalNone is the zero value and never fires.
const (
	SignalNone Signal = iota
	SignalVPN
	SignalProxy
	SignalTor
	SignalDatacenter
	SignalAnonymous
	SignalAutomation
	SignalAntidetect
	SignalEmulator
	SignalVirtualMachine
	SignalIncognito
	SignalPrivacyMode
	SignalIPBlocklisted
	SignalHighActivity
	SignalMultiAccount
	SignalDisposableEmail
	SignalTimezoneMismatch
	numSignals
)

// NumSignals is the number of rule signals (SignalNone excluded).
const NumSignals = int(numSignals) - 1

var signalNames = [numSignals]string{
	"", "vpn", "proxy", "tor", "datacenter", "anonymous", "automation",
	"antidetect", "emulator", "virtual_machine", "incognito", "privacy_mode",
	"ip_blocklisted", "high_activity", "multi_account", "disposable_email",
	"timezone_mismatch",
}

// String returns the ADMIN.md spelling of s, "" for SignalNone or an
// out-of-range value.
func (s Signal) String() string {
	if s < numSignals {
		return signalNames[s]
	}
	return ""
}

// Valid reports whether s is one of the ADMIN.md rule signals.
func (s Signal) Valid() bool { return s > SignalNone && s < numSignals }

// SignalSet is a set of rule signals. Its zero value is empty; it never
// allocates. Iteration is in Signal order (ADMIN.md's listing).
type SignalSet uint32

// Has reports whether s is in the set.
func (ss SignalSet) Has(s Signal) bool { return s.Valid() && ss&(1<<s) != 0 }

// Len returns the number of signals in the set.
func (ss SignalSet) Len() int { return bits.OnesCount32(uint32(ss)) }

func (ss *SignalSet) add(s Signal) { *ss |= 1 << s }

// All yields the signals in ADMIN.md order.
func (ss SignalSet) All() iter.Seq[Signal] {
	return func(yield func(Signal) bool) {
		for v := uint32(ss); v != 0; v &= v - 1 {
			if !yield(Signal(bits.TrailingZeros32(v))) {
				return
			}
		}
	}
}

// AppendStrings appends the signals' ADMIN.md names in order. It allocates
// only when dst lacks capacity; the strings themselves are constants.
func (ss SignalSet) AppendStrings(dst []string) []string {
	for v := uint32(ss); v != 0; v &= v - 1 {
		dst = append(dst, signalNames[bits.TrailingZeros32(v)])
	}
	return dst
}

// Reason is a SPEC §2.7 reason code. The constants are in SPEC §2.7's listing
// order, which is alphabetical; every ReasonSet iterates in this order, so
// `reasons` on the wire is stable. SPEC §9 only ever adds codes: append new
// ones in their alphabetical place and regenerate golden files.
type Reason uint8

// Reason codes (SPEC §2.7), and when the engine adds each:
const (
	ReasonAccountManyDevices      Reason = iota // Account.AccountDevices24h >= 3
	ReasonAccountNewDevice                      // Account.NewDevice with device evidence
	ReasonAnonymousNetwork                      // network.anonymous: VPN, proxy (incl. relay), Tor or Network.Anonymous
	ReasonAntidetectBrowser                     // Device.Antidetect
	ReasonAntidetectProfileBurst                // Consistency.AntidetectProfileBurst
	ReasonAntidetectRandomization               // Consistency.AntidetectRandomization
	ReasonAutomationDetected                    // Device.Automation
	ReasonDatacenterASN                         // Network.Datacenter
	ReasonDeviceManyAccounts                    // Account.DeviceAccounts24h >= 3 with device evidence
	ReasonDisposableEmail                       // Email.Sent && Email.Disposable
	ReasonEmulatorDetected                      // Device.Emulator
	ReasonGPUInconsistent                       // Consistency.GPUInconsistent
	ReasonHighActivityDevice                    // Device.HighActivity
	ReasonIPBlocklisted                         // Network.Blocklisted or Device.IPBlocklisted
	ReasonIPManyAccounts                        // Account.IPAccounts24h >= 3, not on a shared exit
	ReasonMultiAccountDevice                    // Device.MultiAccount
	ReasonPrivacyRelay                          // Network.PrivacyRelay (instead of proxy_detected)
	ReasonPrivateBrowsing                       // Device.Incognito
	ReasonProxyDetected                         // a proxy that is not the privacy relay
	ReasonTimezoneMismatch                      // timezone.checked && !timezone.matches_ip
	ReasonTorExitNode                           // Network.Tor
	ReasonVirtualMachine                        // Device.VirtualMachine
	ReasonVPNDetected                           // Network.VPN
	numReasons
)

// NumReasons is the number of reason codes.
const NumReasons = int(numReasons)

var reasonNames = [numReasons]string{
	"account_many_devices", "account_new_device", "anonymous_network",
	"antidetect_browser", "antidetect_profile_burst", "antidetect_randomization",
	"automation_detected", "datacenter_asn", "device_many_accounts",
	"disposable_email", "emulator_detected", "gpu_inconsistent",
	"high_activity_device", "ip_blocklisted", "ip_many_accounts",
	"multi_account_device", "privacy_relay", "private_browsing",
	"proxy_detected", "timezone_mismatch", "tor_exit_node", "virtual_machine",
	"vpn_detected",
}

// String returns the SPEC §2.7 code, "" for an out-of-range value.
func (r Reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return ""
}

// ReasonSet is a set of reason codes. Its zero value is empty; it never
// allocates. Iteration is in SPEC §2.7 (alphabetical) order.
type ReasonSet uint32

// Has reports whether r is in the set.
func (rs ReasonSet) Has(r Reason) bool { return r < numReasons && rs&(1<<r) != 0 }

// Len returns the number of reasons in the set.
func (rs ReasonSet) Len() int { return bits.OnesCount32(uint32(rs)) }

func (rs *ReasonSet) add(r Reason) { *rs |= 1 << r }

// All yields the reasons in SPEC §2.7 order.
func (rs ReasonSet) All() iter.Seq[Reason] {
	return func(yield func(Reason) bool) {
		for v := uint32(rs); v != 0; v &= v - 1 {
			if !yield(Reason(bits.TrailingZeros32(v))) {
				return
			}
		}
	}
}

// AppendStrings appends the reason codes in SPEC §2.7 order. It allocates only
// when dst lacks capacity; the strings themselves are constants.
func (rs ReasonSet) AppendStrings(dst []string) []string {
	for v := uint32(rs); v != 0; v &= v - 1 {
		dst = append(dst, reasonNames[bits.TrailingZeros32(v)])
	}
	return dst
}
