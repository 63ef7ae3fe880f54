package score

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestSpecDecisionRules walks SPEC 2.8 rule by rule (and SPEC 2.2's
// isSuspicious and 2.6's findings), with the reasons and score each row gives.
func TestSpecDecisionRules(t *testing.T) {
	cases := []struct {
		name       string
		flags      []string
		decision   Action
		reasons    string
		suspicious bool
		score      int
	}{
		{"clean", nil, Allow, "", false, 0},
		{"clean with device, email, matching zone", []string{"device", "email", "tzmatch"}, Allow, "", false, 0},

		// 2.8.1 block: proxy (except a privacy relay alone), Tor, bot, emulator, tampering.
		{"proxy", []string{"proxy"}, Block, "anonymous_network,proxy_detected", true, 85},
		{"open proxy", []string{"openproxy"}, Block, "anonymous_network,proxy_detected", true, 85},
		{"proxy in datacenter", []string{"proxy", "dc"}, Block, "anonymous_network,datacenter_asn,proxy_detected", true, 90},
		{"tor", []string{"tor"}, Block, "anonymous_network,tor_exit_node", true, 90},
		{"bot", []string{"automation"}, Block, "automation_detected", true, 90},
		{"emulator", []string{"emulator"}, Block, "emulator_detected", true, 80},
		{"tampering (antidetect)", []string{"antidetect"}, Block, "antidetect_browser", true, 85},
		{"relay plus an open proxy", []string{"relay", "openproxy"}, Block, "anonymous_network,privacy_relay,proxy_detected", true, 91},
		{"relay plus tor", []string{"relay", "tor"}, Block, "anonymous_network,privacy_relay,tor_exit_node", true, 94},
		{"vpn plus bot", []string{"vpn", "automation"}, Block, "anonymous_network,automation_detected,vpn_detected", true, 96},

		// 2.8.2 review: VPN alone, VM alone, privacy relay alone.
		{"vpn", []string{"vpn"}, Review, "anonymous_network,vpn_detected", true, 60},
		{"virtual machine", []string{"vm"}, Review, "virtual_machine", true, 50},
		{"privacy relay", []string{"relay"}, Review, "anonymous_network,privacy_relay", true, 40},
		{"privacy relay without proxy mirror", []string{"relayonly"}, Review, "anonymous_network,privacy_relay", true, 40},
		{"privacy relay in datacenter", []string{"relay", "dc"}, Review, "anonymous_network,datacenter_asn,privacy_relay", true, 61},
		{"vpn in datacenter (test_vpn)", []string{"vpn", "dc"}, Review, "anonymous_network,datacenter_asn,vpn_detected", true, 74},
		{"vpn and vm", []string{"vpn", "vm"}, Review, "anonymous_network,virtual_machine,vpn_detected", true, 80},

		// 2.8.3 datacenter / anonymous alone: not a block, and not suspicious (2.2).
		{"datacenter", []string{"dc"}, Allow, "datacenter_asn", false, 35},
		{"anonymous network", []string{"anon"}, Allow, "anonymous_network", false, 30},
		{"datacenter and anonymous", []string{"dc", "anon"}, Allow, "anonymous_network,datacenter_asn", false, 55},

		// 2.8.4 raise allow to review.
		{"disposable email", []string{"disposable"}, Review, "disposable_email", false, 40},
		{"time-zone mismatch", []string{"tzmismatch"}, Review, "timezone_mismatch", false, 20},
		{"device_many_accounts", []string{"devmany"}, Review, "device_many_accounts", false, 30},
		{"disposable on datacenter", []string{"disposable", "dc"}, Review, "datacenter_asn,disposable_email", false, 61},
		{"disposable on vpn stays review", []string{"disposable", "vpn"}, Review, "anonymous_network,disposable_email,vpn_detected", true, 76},
		{"disposable on tor stays block", []string{"disposable", "tor"}, Block, "anonymous_network,disposable_email,tor_exit_node", true, 94},
		{"mismatch not checked on vpn", []string{"tzmismatch", "vpn"}, Review, "anonymous_network,vpn_detected", true, 60},
		{"mismatch not checked on datacenter", []string{"tzmismatch", "dc"}, Allow, "datacenter_asn", false, 35},
		{"mismatch not checked on relay", []string{"tzmismatch", "relay"}, Review, "anonymous_network,privacy_relay", true, 40},
		{"mismatch not checked on tor", []string{"tzmismatch", "tor"}, Block, "anonymous_network,tor_exit_node", true, 90},
		{"mismatch not checked on proxy", []string{"tzmismatch", "proxy"}, Block, "anonymous_network,proxy_detected", true, 85},

		// SPEC 2.6: the three browser-consistency findings raise allow to review.
		{"gpu inconsistent", []string{"gpu"}, Review, "gpu_inconsistent", false, 25},
		{"antidetect randomization", []string{"adrand"}, Review, "antidetect_randomization", false, 40},
		{"antidetect profile burst", []string{"adburst"}, Review, "antidetect_profile_burst", false, 40},

		// Signals that add reasons and score but do not move the decision.
		{"incognito", []string{"incognito"}, Allow, "private_browsing", false, 10},
		{"privacy mode", []string{"privacy_mode"}, Allow, "", false, 5},
		{"device ip blocklisted", []string{"devbl"}, Allow, "ip_blocklisted", false, 40},
		{"network ip blocklisted", []string{"netbl"}, Allow, "ip_blocklisted", false, 40},
		{"high activity", []string{"high"}, Allow, "high_activity_device", false, 20},
		{"multi-account device", []string{"multi"}, Allow, "multi_account_device", false, 25},
		{"account_many_devices", []string{"acctmany"}, Allow, "account_many_devices", false, 20},
		{"ip_many_accounts", []string{"ipmany"}, Allow, "ip_many_accounts", false, 15},
		{"ip_many_accounts ignored on mobile", []string{"ipmany", "mobile"}, Allow, "", false, 0},
		{"ip_many_accounts ignored on vpn", []string{"ipmany", "vpn"}, Review, "anonymous_network,vpn_detected", true, 60},
		{"ip_many_accounts ignored on datacenter", []string{"ipmany", "dc"}, Allow, "datacenter_asn", false, 35},
		{"account_new_device", []string{"newdev"}, Allow, "account_new_device", false, 10},

		// 2.8.6 degraded: network flags false, allow unless device/email say otherwise.
		{"degraded", []string{"degraded"}, Allow, "", false, 0},
		{"degraded ignores network flags", []string{"degraded", "vpn", "tor", "proxy", "dc", "relay", "anon", "netbl"}, Allow, "", false, 0},
		{"degraded with bot", []string{"degraded", "automation"}, Block, "automation_detected", true, 90},
		{"degraded with vm", []string{"degraded", "vm"}, Review, "virtual_machine", true, 50},
		{"degraded with disposable", []string{"degraded", "disposable"}, Review, "disposable_email", false, 40},
		{"degraded zone not checked", []string{"degraded", "tzmismatch"}, Allow, "", false, 0},
		{"degraded ip count unmeasured", []string{"degraded", "ipmany"}, Allow, "", false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := eval(mk(c.flags...))
			if r.Decision != c.decision || r.EngineDecision != c.decision || reasons(r) != c.reasons ||
				r.IsSuspicious != c.suspicious || r.RiskScore != c.score {
				t.Errorf("got %s\nwant decision=%s reasons=[%s] suspicious=%v score=%d",
					describe(r), c.decision, c.reasons, c.suspicious, c.score)
			}
			if r.DecisionSource != SourceEngine || r.PolicyChanged || r.RuleMatched != 0 || r.ExceptionCount() != 0 {
				t.Errorf("no policy, yet %s", describe(r))
			}
		})
	}
}

// SPEC 2.8.7: without a device event the device fields are not evidence,
// and counts that need device evidence are null.
func TestNoDeviceEvent(t *testing.T) {
	in := mk()
	in.Device = Device{Automation: true, Antidetect: true, Emulator: true, VirtualMachine: true,
		Incognito: true, IPBlocklisted: true, TamperingScore: 1, VisitorID: "v"}
	in.Account = Account{DeviceAccounts24h: 9, NewDevice: true}
	r := eval(in)
	if r.Decision != Allow || r.Reasons != 0 || r.RiskScore != 0 || r.IsSuspicious || r.Fired != 0 {
		t.Fatalf("device fields without a device event counted: %s", describe(r))
	}
}

func TestNetworkSummary(t *testing.T) {
	cases := []struct {
		flags                  []string
		anonymous, residential bool
	}{
		{nil, false, true},
		{[]string{"vpn"}, true, true},
		{[]string{"proxy"}, true, false},
		{[]string{"relay"}, true, false},
		{[]string{"tor"}, true, true},
		{[]string{"anon"}, true, true},
		{[]string{"dc"}, false, false},
		{[]string{"vpn", "dc"}, true, false},
		{[]string{"mobile"}, false, true},
		{[]string{"degraded"}, false, false}, // flags mean "unavailable"
		{[]string{"degraded", "vpn"}, false, false},
	}
	for _, c := range cases {
		r := eval(mk(c.flags...))
		if r.Anonymous != c.anonymous || r.Residential != c.residential {
			t.Errorf("%v: anonymous=%v residential=%v, want %v %v", c.flags, r.Anonymous, r.Residential, c.anonymous, c.residential)
		}
	}
	if r := eval(mk("relay")); !r.PrivacyRelay || !r.Fired.Has(SignalProxy) {
		t.Errorf("relay: privacy_relay=%v proxy fired=%v", r.PrivacyRelay, r.Fired.Has(SignalProxy))
	}
}

func TestTimeZone(t *testing.T) {
	zurich := func(net string) Input {
		in := mk()
		in.Network.Country = net
		in.TimeZone = TimeZone{Sent: true, Zone: "Europe/Zurich", Country: "CH", Others: "DE LI"}
		return in
	}
	cases := []struct {
		name     string
		in       Input
		want     TimeZoneResult
		mismatch bool
	}{
		{"not sent", mk(), TimeZoneResult{}, false},
		{"match", mk("tzmatch"), TimeZoneResult{true, "America/Chicago", "US", true, true}, false},
		{"mismatch", mk("tzmismatch"), TimeZoneResult{true, "Europe/Berlin", "DE", false, true}, true},
		{"vpn: not checked", mk("tzmismatch", "vpn"), TimeZoneResult{true, "Europe/Berlin", "DE", false, false}, false},
		{"vpn matching: reported, not checked", mk("tzmatch", "vpn"), TimeZoneResult{true, "America/Chicago", "US", true, false}, false},
		{"datacenter: not checked", mk("tzmismatch", "dc"), TimeZoneResult{true, "Europe/Berlin", "DE", false, false}, false},
		{"degraded: country unknown", mk("tzmatch", "degraded"), TimeZoneResult{true, "America/Chicago", "US", false, false}, false},
		{"zone without country", func() Input {
			in := mk()
			in.TimeZone = TimeZone{Sent: true, Zone: "UTC"}
			return in
		}(), TimeZoneResult{true, "UTC", "", false, false}, false},
		{"network country unknown", func() Input {
			in := mk("tzmismatch")
			in.Network.Country = ""
			return in
		}(), TimeZoneResult{true, "Europe/Berlin", "DE", false, false}, false},
		{"country case differs", func() Input {
			in := mk()
			in.TimeZone = TimeZone{Sent: true, Zone: "America/Chicago", Country: "us"}
			return in
		}(), TimeZoneResult{true, "America/Chicago", "us", true, true}, false},
		// Europe/Zurich is CH's and, by zone1970.tab, DE's and LI's too.
		{"shared zone, another user's country", zurich("DE"), TimeZoneResult{true, "Europe/Zurich", "DE", true, true}, false},
		{"shared zone, the last of its countries", zurich("LI"), TimeZoneResult{true, "Europe/Zurich", "LI", true, true}, false},
		{"shared zone, no user's country", zurich("FR"), TimeZoneResult{true, "Europe/Zurich", "CH", false, true}, true},
		{"shared zone, a prefix of a user's country", zurich("D"), TimeZoneResult{true, "Europe/Zurich", "CH", false, true}, true},
		{"shared zone, network country unknown", zurich(""), TimeZoneResult{true, "Europe/Zurich", "CH", false, false}, false},
	}
	for _, c := range cases {
		r := eval(c.in)
		if r.TimeZone != c.want || r.Reasons.Has(ReasonTimezoneMismatch) != c.mismatch ||
			r.Fired.Has(SignalTimezoneMismatch) != c.mismatch {
			t.Errorf("%s: got %+v mismatch=%v, want %+v %v", c.name, r.TimeZone,
				r.Reasons.Has(ReasonTimezoneMismatch), c.want, c.mismatch)
		}
	}
}

// SPEC 2.9: every test token, alone (sandbox, no policy).
func TestTestTokens(t *testing.T) {
	cases := []struct {
		token      string
		decision   Action
		reasons    string
		suspicious bool
		score      int
		service    string
		country    string
	}{
		{"test_clean", Allow, "", false, 0, "", "US"},
		{"test_vpn", Review, "anonymous_network,datacenter_asn,vpn_detected", true, 74, "NordVPN", "NL"},
		{"test_proxy", Block, "anonymous_network,datacenter_asn,proxy_detected", true, 90, "Bright Data", "US"},
		{"test_datacenter", Allow, "datacenter_asn", false, 35, "AWS", "US"},
		{"test_tor", Block, "anonymous_network,tor_exit_node", true, 90, "TOR", ""},
	}
	for _, c := range cases {
		p, ok := TestToken(c.token)
		if !ok || p.Token != c.token || !IsTestToken(c.token) {
			t.Fatalf("%s: not a test token", c.token)
		}
		if !p.Network.IP.IsValid() || !p.Network.IP.IsGlobalUnicast() || p.Network.IP.IsPrivate() {
			t.Errorf("%s: pretend address %v is not public-looking", c.token, p.Network.IP)
		}
		if p.Network.Service != c.service || p.Network.Country != c.country {
			t.Errorf("%s: service %q country %q", c.token, p.Network.Service, p.Network.Country)
		}
		r := eval(Input{Network: p.Network})
		if r.Decision != c.decision || reasons(r) != c.reasons || r.IsSuspicious != c.suspicious || r.RiskScore != c.score {
			t.Errorf("%s: %s", c.token, describe(r))
		}
	}
	for _, bad := range []string{"", "test_", "TEST_CLEAN", "test_bot", "test_clean "} {
		if _, ok := TestToken(bad); ok || IsTestToken(bad) {
			t.Errorf("%q accepted as a test token", bad)
		}
	}
}

// SPEC 2.9: with the account's own keys test tokens obey its rules and pins.
func TestTestTokensObeyPolicy(t *testing.T) {
	p, _ := TestToken("test_tor")
	in := Input{Network: p.Network, Policy: Policy{Rules: rules("tor", "review")}}
	if r := eval(in); r.Decision != Review || r.DecisionSource != SourceRules || r.EngineDecision != Block {
		t.Errorf("rule: %s", describe(r))
	}
	in.Policy.Pins = []Pin{pin(p.Network.IP.String(), "allow", "our tor relay")}
	if r := eval(in); r.Decision != Allow || r.DecisionSource != SourceException {
		t.Errorf("pin: %s", describe(r))
	}
}

func TestSamples(t *testing.T) {
	want := map[string]Action{"clean": Allow, "vpn": Review, "datacenter": Allow, "proxy": Block, "tor": Block, "bot": Block}
	for _, s := range Scenarios() {
		in, ok := Sample(s)
		if !ok {
			t.Fatalf("%s: unknown", s)
		}
		again, _ := Sample(s)
		if !reflect.DeepEqual(in, again) {
			t.Errorf("%s: not deterministic", s)
		}
		r := eval(in)
		if r.Decision != want[s] {
			t.Errorf("%s: %s", s, describe(r))
		}
		if !in.Device.Present || !in.TimeZone.Sent || len(in.Device.VisitorID) != 20 {
			t.Errorf("%s: sample lacks device or zone: %+v", s, in)
		}
		delete(want, s)
	}
	if len(want) != 0 {
		t.Errorf("scenarios missing: %v", want)
	}
	def, _ := Sample("")
	vpn, _ := Sample("vpn")
	if !reflect.DeepEqual(def, vpn) || DefaultScenario != "vpn" {
		t.Errorf("default scenario is not vpn")
	}
	if r := eval(vpn); r.TimeZone.Checked || r.Reasons.Has(ReasonTimezoneMismatch) {
		t.Errorf("vpn sample checked its zone: %+v", r.TimeZone)
	}
	bot, _ := Sample("bot")
	if r := eval(bot); !r.Reasons.Has(ReasonAutomationDetected) || r.RiskScore != 92 || !r.Residential {
		t.Errorf("bot: %s", describe(r))
	}
	for _, bad := range []string{"unknown", "VPN", "test_vpn", " clean"} {
		if _, ok := Sample(bad); ok {
			t.Errorf("scenario %q accepted", bad)
		}
	}
}

func TestNilAndHostileInput(t *testing.T) {
	var r Result
	Evaluate(nil, &r)
	if r.Decision != Allow || r.RiskScore != 0 {
		t.Errorf("nil input: %s", describe(r))
	}
	Evaluate(&Input{}, nil) // must not panic

	for _, ts := range []float64{-1, 0, 0.5, 1, 7, nan(), inf(1), inf(-1)} {
		in := mk("device")
		in.Device.TamperingScore = ts
		r := eval(in)
		if r.RiskScore < 0 || r.RiskScore > 50 {
			t.Errorf("tampering %v: score %d", ts, r.RiskScore)
		}
	}
	in := mk("vpn")
	in.Account = Account{DeviceAccounts24h: -5, AccountDevices24h: -1 << 62, IPAccounts24h: 1 << 62}
	in.Policy = Policy{
		Rules: []Rule{{Signal: 200, Action: Block}, {Signal: SignalVPN, Action: 9}, {Signal: SignalVPN}},
		Pins:  []Pin{{Action: Block}, {VisitorID: "x", Action: 0}, {Label: "no target", Action: Allow}},
	}
	r = eval(in)
	if r.Decision != Review || r.DecisionSource != SourceEngine || r.ExceptionCount() != 0 {
		t.Errorf("malformed policy was applied: %s", describe(r))
	}
	if r.Reasons.Has(ReasonIPManyAccounts) {
		t.Errorf("ip count counted on a vpn exit")
	}
}

// TestDatedBehaviour: SPEC 2.2 device.virtual_machine "On its own returns
// `review` (since 2026-09-29)" and network.privacy_relay "On every
// evaluation since 2026-10-10" (SPEC §9's dated additions), keyed on the
// request's time. Before 2026-10-10 a privacy relay is the proxy
// network.proxy says it is.
func TestDatedBehaviour(t *testing.T) {
	day := func(m time.Month, d int) time.Time { return time.Date(2026, m, d, 0, 0, 0, 0, time.UTC) }
	cases := []struct {
		name     string
		flags    []string
		at       time.Time
		decision Action
		reasons  string
	}{
		{"vm alone before 2026-09-29", []string{"vm"}, day(9, 29).Add(-time.Second), Allow, "virtual_machine"},
		{"vm alone on 2026-09-29", []string{"vm"}, day(9, 29), Review, "virtual_machine"},
		{"relay before 2026-10-10 is a proxy", []string{"relay"}, day(10, 10).Add(-time.Second), Block, "anonymous_network,proxy_detected"},
		{"relay only before 2026-10-10 is a proxy", []string{"relayonly"}, day(10, 9), Block, "anonymous_network,proxy_detected"},
		{"relay on 2026-10-10", []string{"relay"}, day(10, 10), Review, "anonymous_network,privacy_relay"},
	}
	for _, c := range cases {
		in := mk(c.flags...)
		in.At = c.at
		var res Result
		Evaluate(&in, &res)
		relay := strings.Contains(c.reasons, "privacy_relay")
		if got := strings.Join(res.Reasons.AppendStrings(nil), ","); res.Decision != c.decision || got != c.reasons || res.PrivacyRelay != relay {
			t.Errorf("%s: decision %v reasons %q privacy_relay %v, want %v %q %v", c.name, res.Decision, got, res.PrivacyRelay, c.decision, c.reasons, relay)
		}
	}
}
