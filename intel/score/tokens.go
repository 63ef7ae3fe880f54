package score

import "net/netip"

// Profile is what a fixed test token (SPEC 2.9) stands for: the network
// reading an evaluation with that token is decided on.
type Profile struct {
	Token   string
	Network Network
}

// The test tokens' addresses and labels are pretend values: public-looking,
// fixed so golden files are stable, and not a claim about who holds those
// addresses (SPEC 2.9: "not shown as contract"). They avoid documentation and
// reserved space so the same address also passes the lookup's public check.
// The Tor address sits in a range long used by Tor exits and the datacenter
// one in a published cloud range, so a bare lookup of either tells the same
// story.
var testTokens = [...]Profile{
	{Token: "test_clean", Network: Network{
		IP: netip.AddrFrom4([4]byte{73, 158, 64, 21}), Country: "US", Complete: true,
	}},
	{Token: "test_vpn", Network: Network{
		VPN: true, Datacenter: true, Service: "NordVPN",
		IP: netip.AddrFrom4([4]byte{89, 187, 178, 24}), Country: "NL", Complete: true,
	}},
	{Token: "test_proxy", Network: Network{
		Proxy: true, Datacenter: true, Service: "Bright Data",
		IP: netip.AddrFrom4([4]byte{45, 134, 212, 87}), Country: "US", Complete: true,
	}},
	{Token: "test_datacenter", Network: Network{
		Datacenter: true, Service: "AWS",
		IP: netip.AddrFrom4([4]byte{54, 85, 20, 10}), Country: "US", Complete: true,
	}},
	{Token: "test_tor", Network: Network{
		Tor: true, Service: "TOR",
		IP: netip.AddrFrom4([4]byte{185, 220, 101, 42}), Country: "", Complete: true,
	}},
}

// TestToken returns the profile of a SPEC 2.9 test token (test_clean,
// test_vpn, test_proxy, test_datacenter, test_tor; exact spelling).
func TestToken(name string) (Profile, bool) {
	for _, p := range testTokens {
		if p.Token == name {
			return p, true
		}
	}
	return Profile{}, false
}

// TestTokens lists every test token's profile (a copy).
func TestTokens() []Profile { return append([]Profile(nil), testTokens[:]...) }

// IsTestToken reports whether name is one of the SPEC 2.9 test tokens.
func IsTestToken(name string) bool {
	_, ok := TestToken(name)
	return ok
}

// DefaultScenario is the sample scenario when none is given (SPEC 4.3).
const DefaultScenario = "vpn"

// samples maps each scenario to its test token's network and a fixed,
// pretend visitor id (20 characters like the provider's).
var samples = [...]struct {
	scenario, token, visitorID string
}{
	{"clean", "test_clean", "sMpLcLeAn0000000001a"},
	{"vpn", "test_vpn", "sMpLvPn000000000002b"},
	{"datacenter", "test_datacenter", "sMpLdAtAcEnTeR00003c"},
	{"proxy", "test_proxy", "sMpLpRoXy0000000004d"},
	{"tor", "test_tor", "sMpLtOr000000000005e"},
	{"bot", "test_clean", "sMpLbOt000000000006f"},
}

// Sample returns the deterministic input behind GET /v1/evaluate/sample
// (SPEC 4.3) for scenario clean, vpn, datacenter, proxy, tor or bot; ""
// means DefaultScenario, anything else is unknown (400 per CLARIFICATIONS).
// Network readings are the test tokens'; every scenario carries a device and
// a recognised time zone so the sample shows the whole answer shape. bot is
// the clean network with automation device signals. The Input has no policy:
// samples run without an account.
func Sample(scenario string) (Input, bool) {
	if scenario == "" {
		scenario = DefaultScenario
	}
	for _, s := range samples {
		if s.scenario != scenario {
			continue
		}
		p, _ := TestToken(s.token)
		in := Input{
			Network:  p.Network,
			Device:   Device{Present: true, VisitorID: s.visitorID, Complete: true},
			TimeZone: TimeZone{Sent: true, Zone: "America/New_York", Country: "US"},
		}
		if scenario == "bot" {
			in.Device.Automation = true
			in.Device.TamperingScore = 0.3
		}
		return in, true
	}
	return Input{}, false
}

// Scenarios lists the sample scenarios in a fixed order (for tests and the
// 400 hint).
func Scenarios() []string {
	out := make([]string, len(samples))
	for i, s := range samples {
		out[i] = s.scenario
	}
	return out
}
