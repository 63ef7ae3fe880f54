package score

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"
)

// mk builds an Input from short flag names, so each table row reads like the
// spec sentence it checks. The base is a measured residential US address.
func mk(flags ...string) Input {
	in := Input{Network: Network{
		IP: netip.MustParseAddr("73.158.64.21"), Country: "US", Complete: true,
	}}
	dev := func() *Device { in.Device.Present = true; return &in.Device }
	for _, f := range flags {
		switch f {
		case "degraded":
			in.Network.Degraded = true
		case "vpn":
			in.Network.VPN = true
		case "proxy":
			in.Network.Proxy = true
		case "relay": // as the feed reports it: proxy and relay together
			in.Network.Proxy, in.Network.PrivacyRelay = true, true
		case "relayonly": // relay without the Proxy mirror set
			in.Network.PrivacyRelay = true
		case "openproxy":
			in.Network.OpenProxy = true
		case "dc":
			in.Network.Datacenter = true
		case "tor":
			in.Network.Tor = true
		case "anon":
			in.Network.Anonymous = true
		case "netbl":
			in.Network.Blocklisted = true
		case "mobile":
			in.Network.Mobile = true
		case "device":
			dev()
		case "automation":
			dev().Automation = true
		case "antidetect":
			dev().Antidetect = true
		case "emulator":
			dev().Emulator = true
		case "vm":
			dev().VirtualMachine = true
		case "incognito":
			dev().Incognito = true
		case "privacy_mode":
			dev().PrivacyMode = true
		case "devbl":
			dev().IPBlocklisted = true
		case "high":
			dev().HighActivity = true
		case "multi":
			dev().MultiAccount = true
		case "email":
			in.Email.Sent = true
		case "disposable":
			in.Email = Email{Sent: true, Disposable: true}
		case "tzmatch":
			in.TimeZone = TimeZone{Sent: true, Zone: "America/Chicago", Country: "US"}
		case "tzmismatch":
			in.TimeZone = TimeZone{Sent: true, Zone: "Europe/Berlin", Country: "DE"}
		case "devmany":
			dev()
			in.Account.DeviceAccounts24h = 3
		case "acctmany":
			in.Account.AccountDevices24h = 3
		case "ipmany":
			in.Account.IPAccounts24h = 3
		case "newdev":
			dev()
			in.Account.NewDevice = true
		case "gpu":
			in.Consistency.GPUInconsistent = true
		case "adrand":
			in.Consistency.AntidetectRandomization = true
		case "adburst":
			in.Consistency.AntidetectProfileBurst = true
		default:
			panic("mk: unknown flag " + f)
		}
	}
	return in
}

func eval(in Input) Result {
	var r Result
	Evaluate(&in, &r)
	return r
}

func reasons(r Result) string { return strings.Join(r.Reasons.AppendStrings(nil), ",") }
func matched(r Result) string { return strings.Join(r.RuleMatched.AppendStrings(nil), ",") }

func rules(pairs ...string) []Rule {
	var out []Rule
	for i := 0; i+1 < len(pairs); i += 2 {
		r, err := ParseRule(pairs[i], pairs[i+1])
		if err != nil {
			panic(err)
		}
		out = append(out, r)
	}
	return out
}

func pin(target, action, label string) Pin {
	ip, vid := target, ""
	if strings.HasPrefix(target, "v:") {
		ip, vid = "", strings.TrimPrefix(target, "v:")
	}
	p, err := ParsePin(ip, vid, action, label)
	if err != nil {
		panic(err)
	}
	return p
}

func describe(r Result) string {
	return fmt.Sprintf("decision=%s engine=%s source=%q score=%d reasons=[%s] suspicious=%v rules=[%s] pins=%v",
		r.Decision, r.EngineDecision, r.DecisionSource, r.RiskScore, reasons(r), r.IsSuspicious, matched(r),
		slices.Clip(r.AppendExceptions(nil)))
}

func nan() float64         { return math.NaN() }
func inf(sign int) float64 { return math.Inf(sign) }
