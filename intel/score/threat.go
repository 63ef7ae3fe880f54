package score

// Webhook threat_type values for engine-detected threats (SPEC §6).
const (
	ThreatTor                     = "Tor"
	ThreatProxy                   = "Proxy"
	ThreatBot                     = "Bot"
	ThreatDatacenterWithTampering = "Datacenter with tampering"
	ThreatAntidetect              = "Antidetect browser"
	ThreatVPN                     = "VPN"
	ThreatPrivacyRelay            = "Privacy relay"
	ThreatVirtualMachine          = "Virtual machine"
)

// ruleThreat holds "Custom rule (signal)" per signal, built once so naming a
// rule-decided block costs nothing.
var ruleThreat = func() (t [numSignals]string) {
	for s := SignalNone + 1; s < numSignals; s++ {
		t[s] = "Custom rule (" + signalNames[s] + ")"
	}
	return t
}()

// ThreatType says whether an evaluation is worth a threat.detected webhook
// (SPEC §6) and names it. Whether the traffic may fire webhooks at all (test
// tokens, sandbox, test key never do) is the caller's business.
//
// A block decided by policy is named after its author first, because it
// explains the decision the receiver sees: "Customer exception (name)" for a
// pin (Pin.Name: label, else the pinned target), "Custom rule (signal)" for a
// rule (Result.RuleSignal). Otherwise the engine's threats, most severe first:
// Tor, Proxy (not the relay), Bot (automation), Datacenter with tampering
// (datacenter plus antidetect or emulator: the webhook's "tampering" is a
// tampered browser or an emulator), Antidetect browser, VPN, Privacy relay,
// Virtual machine. SPEC §6 lists exactly these, so an emulator outside a
// datacenter, a disposable email or a time-zone mismatch alone fire nothing.
// Engine threats fire whatever the policy decided (SPEC §6 names no
// exception); the details' decision, rule_matched and exception_matched let
// the receiver filter.
//
// It allocates only to name a pin-decided block.
func ThreatType(res *Result) (string, bool) {
	if res == nil {
		return "", false
	}
	if res.Decision == Block {
		switch res.DecisionSource {
		case SourceException:
			if p, ok := res.ExceptionWinner(); ok {
				return "Customer exception (" + p.Name() + ")", true
			}
		case SourceRules:
			if res.RuleSignal.Valid() {
				return ruleThreat[res.RuleSignal], true
			}
		}
	}
	f, r := res.Fired, res.Reasons
	switch {
	case f.Has(SignalTor):
		return ThreatTor, true
	case r.Has(ReasonProxyDetected):
		return ThreatProxy, true
	case f.Has(SignalAutomation):
		return ThreatBot, true
	case f.Has(SignalDatacenter) && (f.Has(SignalAntidetect) || f.Has(SignalEmulator)):
		return ThreatDatacenterWithTampering, true
	case f.Has(SignalAntidetect):
		return ThreatAntidetect, true
	case f.Has(SignalVPN):
		return ThreatVPN, true
	case res.PrivacyRelay:
		return ThreatPrivacyRelay, true
	case res.vmReview: // SPEC §6 "virtual machine (review)": not before it reviewed
		return ThreatVirtualMachine, true
	}
	return "", false
}
