package score

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestRules(t *testing.T) {
	cases := []struct {
		name     string
		flags    []string
		rules    []Rule
		decision Action
		engine   Action
		source   Source
		matched  string
		decider  Signal
	}{
		{"no rules", []string{"vpn"}, nil, Review, Review, SourceEngine, "", SignalNone},
		{"rule for a signal that did not fire", []string{"vpn"}, rules("tor", "block"), Review, Review, SourceEngine, "", SignalNone},
		{"rule replaces engine (stricter)", []string{"vpn"}, rules("vpn", "block"), Block, Review, SourceRules, "vpn", SignalVPN},
		{"rule replaces engine (looser)", []string{"tor"}, rules("tor", "allow"), Allow, Block, SourceRules, "tor", SignalTor},
		{"rule equal to engine still sources", []string{"vpn"}, rules("vpn", "review"), Review, Review, SourceRules, "vpn", SignalVPN},
		{"most severe wins", []string{"vpn", "dc"}, rules("vpn", "allow", "datacenter", "block"), Block, Review, SourceRules, "vpn,datacenter", SignalDatacenter},
		{"most severe wins, any order", []string{"vpn", "dc"}, rules("datacenter", "review", "vpn", "allow"), Review, Review, SourceRules, "vpn,datacenter", SignalDatacenter},
		{"tie: first signal in ADMIN order decides", []string{"vpn", "dc"}, rules("datacenter", "block", "vpn", "block"), Block, Review, SourceRules, "vpn,datacenter", SignalVPN},
		{"allow rule wins over an unruled engine block", []string{"vpn", "tor"}, rules("vpn", "allow"), Allow, Block, SourceRules, "vpn", SignalVPN},
		{"datacenter rule alone", []string{"dc"}, rules("datacenter", "block"), Block, Allow, SourceRules, "datacenter", SignalDatacenter},
		{"anonymous rule on vpn", []string{"vpn"}, rules("anonymous", "block"), Block, Review, SourceRules, "anonymous", SignalAnonymous},
		{"device rule", []string{"incognito"}, rules("incognito", "review"), Review, Allow, SourceRules, "incognito", SignalIncognito},
		{"privacy_mode rule (no reason code, still a signal)", []string{"privacy_mode"}, rules("privacy_mode", "block"), Block, Allow, SourceRules, "privacy_mode", SignalPrivacyMode},
		{"disposable rule", []string{"disposable"}, rules("disposable_email", "allow"), Allow, Review, SourceRules, "disposable_email", SignalDisposableEmail},
		{"timezone rule", []string{"tzmismatch"}, rules("timezone_mismatch", "block"), Block, Review, SourceRules, "timezone_mismatch", SignalTimezoneMismatch},
		{"timezone rule needs a checked mismatch", []string{"tzmismatch", "dc"}, rules("timezone_mismatch", "block"), Allow, Allow, SourceEngine, "", SignalNone},
		{"ip_blocklisted from network", []string{"netbl"}, rules("ip_blocklisted", "block"), Block, Allow, SourceRules, "ip_blocklisted", SignalIPBlocklisted},
		{"degraded: network rules cannot match", []string{"degraded", "vpn"}, rules("vpn", "block"), Allow, Allow, SourceEngine, "", SignalNone},

		// SPEC 2.2 privacy relay: a proxy rule set to Allow allows a relay;
		// Review or Block does not apply to it, which stays review.
		{"relay: proxy allow allows it", []string{"relay"}, rules("proxy", "allow"), Allow, Review, SourceRules, "proxy", SignalProxy},
		{"relay: proxy review does not apply", []string{"relay"}, rules("proxy", "review"), Review, Review, SourceEngine, "", SignalNone},
		{"relay: proxy block does not apply", []string{"relay"}, rules("proxy", "block"), Review, Review, SourceEngine, "", SignalNone},
		{"relay without proxy mirror: allow", []string{"relayonly"}, rules("proxy", "allow"), Allow, Review, SourceRules, "proxy", SignalProxy},
		{"relay with vpn: proxy block does not apply", []string{"relay", "vpn"}, rules("proxy", "block"), Review, Review, SourceEngine, "", SignalNone},
		{"relay plus a real proxy: proxy block applies", []string{"relay", "openproxy"}, rules("proxy", "block"), Block, Block, SourceRules, "proxy", SignalProxy},
		{"relay: anonymous rule is not the proxy rule", []string{"relay"}, rules("anonymous", "block"), Block, Review, SourceRules, "anonymous", SignalAnonymous},
		{"plain proxy: proxy review applies", []string{"proxy"}, rules("proxy", "review"), Review, Block, SourceRules, "proxy", SignalProxy},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := mk(c.flags...)
			base := eval(in)
			in.Policy.Rules = c.rules
			r := eval(in)
			if r.Decision != c.decision || r.EngineDecision != c.engine || r.DecisionSource != c.source ||
				matched(r) != c.matched || r.RuleSignal != c.decider {
				t.Errorf("got %s decider=%s\nwant decision=%s engine=%s source=%q rules=[%s] decider=%s",
					describe(r), r.RuleSignal, c.decision, c.engine, c.source, c.matched, c.decider)
			}
			if r.PolicyChanged != (c.decision != c.engine) {
				t.Errorf("PolicyChanged=%v with decision %s engine %s", r.PolicyChanged, r.Decision, r.EngineDecision)
			}
			// Custom rules never change the score, reasons or isSuspicious.
			if r.RiskScore != base.RiskScore || r.Reasons != base.Reasons || r.IsSuspicious != base.IsSuspicious {
				t.Errorf("rules changed engine output: %s vs %s", describe(r), describe(base))
			}
		})
	}
}

func TestPins(t *testing.T) {
	const ip = "73.158.64.21" // mk's address
	cases := []struct {
		name     string
		flags    []string
		rules    []Rule
		pins     []Pin
		visitor  string
		decision Action
		source   Source
		names    string // exception_matched, in Policy.Pins order
		winner   string
	}{
		{"ip pin outranks rule", []string{"vpn"}, rules("vpn", "block"), []Pin{pin(ip, "allow", "office")}, "",
			Allow, SourceException, "office", "office"},
		{"cidr pin", []string{"tor"}, nil, []Pin{pin("73.158.64.0/24", "review", "campus")}, "",
			Review, SourceException, "campus", "campus"},
		{"pin not matching", []string{"tor"}, nil, []Pin{pin("73.158.65.0/24", "allow", "x")}, "",
			Block, SourceEngine, "", ""},
		{"pin equal to engine still sources", nil, nil, []Pin{pin(ip, "allow", "office")}, "",
			Allow, SourceException, "office", "office"},
		{"visitor pin", []string{"automation"}, nil, []Pin{pin("v:abc", "allow", "qa robot")}, "abc",
			Allow, SourceException, "qa robot", "qa robot"},
		{"visitor pin needs the device", nil, nil, []Pin{pin("v:abc", "block", "x")}, "",
			Allow, SourceEngine, "", ""},
		{"visitor pin other device", nil, nil, []Pin{pin("v:abc", "block", "x")}, "abd",
			Allow, SourceEngine, "", ""},
		{"longest prefix wins", nil, nil, []Pin{pin("73.158.0.0/16", "block", "wide"), pin(ip, "allow", "host"), pin("73.158.64.0/24", "review", "mid")}, "",
			Allow, SourceException, "wide,host,mid", "host"},
		{"visitor pin beats address pins", nil, nil, []Pin{pin(ip, "allow", "host"), pin("v:abc", "block", "device")}, "abc",
			Block, SourceException, "host,device", "device"},
		{"same specificity: most severe", nil, nil, []Pin{{Prefix: netip.MustParsePrefix("73.158.64.0/24"), Action: Allow, Label: "a"}, {Prefix: netip.MustParsePrefix("73.158.64.0/24"), Action: Block, Label: "b"}}, "",
			Block, SourceException, "a,b", "b"},
		{"same specificity and action: first listed", nil, nil, []Pin{{Prefix: netip.MustParsePrefix("73.158.64.0/24"), Action: Review, Label: "a"}, {Prefix: netip.MustParsePrefix("73.158.64.0/24"), Action: Review, Label: "b"}}, "",
			Review, SourceException, "a,b", "a"},
		{"unlabelled pins named by target", nil, nil, []Pin{pin(ip, "allow", ""), pin("73.158.64.0/24", "allow", ""), pin("v:abc", "allow", "")}, "abc",
			Allow, SourceException, ip + ",73.158.64.0/24,abc", "abc"},
		{"ipv6 pin does not match ipv4", nil, nil, []Pin{pin("::/0", "block", "")}, "",
			Allow, SourceEngine, "", ""},
		{"degraded: ip pins cannot match", []string{"degraded"}, nil, []Pin{pin(ip, "block", "host"), pin("0.0.0.0/0", "block", "all")}, "",
			Allow, SourceEngine, "", ""},
		{"degraded: visitor pins still match", []string{"degraded"}, nil, []Pin{pin("v:abc", "block", "device")}, "abc",
			Block, SourceException, "device", "device"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := mk(c.flags...)
			if c.visitor != "" {
				in.Device.Present, in.Device.VisitorID = true, c.visitor
			}
			base := eval(in)
			in.Policy = Policy{Rules: c.rules, Pins: c.pins}
			r := eval(in)
			names := strings.Join(r.AppendExceptions(nil), ",")
			w, _ := r.ExceptionWinner()
			if r.Decision != c.decision || r.DecisionSource != c.source || names != c.names || w.Name() != c.winner {
				t.Errorf("got %s winner=%q\nwant decision=%s source=%q pins=[%s] winner=%q",
					describe(r), w.Name(), c.decision, c.source, c.names, c.winner)
			}
			if r.PolicyChanged != (r.Decision != r.EngineDecision) || r.EngineDecision != base.EngineDecision {
				t.Errorf("engine decision: %s vs %s", describe(r), describe(base))
			}
			if r.RiskScore != base.RiskScore || r.Reasons != base.Reasons {
				t.Errorf("pins changed the engine output")
			}
			if r.ExceptionCount() != len(r.AppendExceptions(nil)) {
				t.Errorf("ExceptionCount %d", r.ExceptionCount())
			}
		})
	}
}

// A pin outranks rules, but the rules that matched stay visible (for logs
// and webhook details); the wire shows rule_matched only with "rules".
func TestPinKeepsRuleMatches(t *testing.T) {
	in := mk("vpn")
	in.Policy = Policy{Rules: rules("vpn", "block"), Pins: []Pin{pin("73.158.64.21", "allow", "office")}}
	r := eval(in)
	if r.DecisionSource != SourceException || matched(r) != "vpn" || r.RuleSignal != SignalVPN {
		t.Errorf("%s", describe(r))
	}
}

func TestPinMappedVisitorAddress(t *testing.T) {
	in := mk()
	in.Network.IP = netip.MustParseAddr("::ffff:73.158.64.21")
	in.Policy.Pins = []Pin{pin("73.158.64.21", "block", "host")}
	if r := eval(in); r.Decision != Block {
		t.Errorf("mapped visitor address did not match its IPv4 pin: %s", describe(r))
	}
	in.Network.IP = netip.MustParseAddr("2a02:1::5")
	in.Policy.Pins = []Pin{pin("2a02:1::/32", "block", "v6")}
	if r := eval(in); r.Decision != Block {
		t.Errorf("IPv6 prefix: %s", describe(r))
	}
}

// More matches than MaxPinMatches: the winner is still found and listed, and
// the list stays in Policy.Pins order.
func TestPinOverflow(t *testing.T) {
	in := mk()
	for i := range 12 {
		in.Policy.Pins = append(in.Policy.Pins, Pin{Prefix: netip.PrefixFrom(netip.MustParseAddr("73.158.64.0"), 8+i), Action: Allow, Label: string(rune('a' + i))})
	}
	in.Policy.Pins[11].Action = Block // the longest prefix, listed last
	r := eval(in)
	names := strings.Join(r.AppendExceptions(nil), ",")
	if r.Decision != Block || r.ExceptionCount() != MaxPinMatches || names != "a,b,c,d,e,f,g,l" {
		t.Errorf("got %s names %s", describe(r), names)
	}
	if _, ok := r.Exception(MaxPinMatches); ok {
		t.Errorf("Exception past the count")
	}
}

func TestParseSignalAction(t *testing.T) {
	admin := []string{"vpn", "proxy", "tor", "datacenter", "anonymous", "automation", "antidetect", "emulator",
		"virtual_machine", "incognito", "privacy_mode", "ip_blocklisted", "high_activity", "multi_account",
		"disposable_email", "timezone_mismatch"}
	if NumSignals != len(admin) {
		t.Fatalf("NumSignals %d, ADMIN.md lists %d", NumSignals, len(admin))
	}
	for i, name := range admin {
		s, err := ParseSignal(name)
		if err != nil || s.String() != name || int(s) != i+1 {
			t.Errorf("ParseSignal(%q) = %v, %v", name, s, err)
		}
	}
	for _, bad := range []string{"", "VPN", "bot", "proxied", "vpn ", "tampering"} {
		if _, err := ParseSignal(bad); !errors.Is(err, ErrInvalidPolicy) {
			t.Errorf("ParseSignal(%q) err %v", bad, err)
		}
	}
	for _, name := range []string{"allow", "review", "block"} {
		a, err := ParseAction(name)
		if err != nil || a.String() != name || !a.Valid() {
			t.Errorf("ParseAction(%q) = %v, %v", name, a, err)
		}
	}
	for _, bad := range []string{"", "Allow", "deny", "none"} {
		if _, err := ParseAction(bad); !errors.Is(err, ErrInvalidPolicy) {
			t.Errorf("ParseAction(%q) err %v", bad, err)
		}
	}
	if _, err := ParseSignal(strings.Repeat("x", 10000)); err == nil || len(err.Error()) > 400 {
		t.Errorf("long input echoed: %d bytes", len(err.Error()))
	}
	if Signal(200).String() != "" || Action(9).String() != "" || Source(9).String() != "" || Reason(200).String() != "" {
		t.Errorf("out-of-range String")
	}
	if SourceEngine.String() != "" || SourceRules.String() != "rules" || SourceException.String() != "exception" {
		t.Errorf("source names")
	}
}

func TestValidateRules(t *testing.T) {
	if err := ValidateRules(rules("vpn", "block", "tor", "allow")); err != nil {
		t.Error(err)
	}
	if err := ValidateRules(nil); err != nil {
		t.Error(err)
	}
	for _, bad := range [][]Rule{
		rules("vpn", "block", "vpn", "allow"),
		{{Signal: 0, Action: Block}},
		{{Signal: 99, Action: Block}},
		{{Signal: SignalVPN}},
	} {
		if err := ValidateRules(bad); !errors.Is(err, ErrInvalidPolicy) {
			t.Errorf("%v: err %v", bad, err)
		}
	}
}

func TestParsePin(t *testing.T) {
	good := []struct{ ip, vid, text string }{
		{"203.0.113.7", "", "203.0.113.7"},
		{" 203.0.113.7 ", "", "203.0.113.7"},
		{"203.0.113.0/24", "", "203.0.113.0/24"},
		{"203.0.113.7/24", "", "203.0.113.0/24"},
		{"203.0.113.7/32", "", "203.0.113.7"},
		{"::ffff:203.0.113.7", "", "203.0.113.7"},
		{"::ffff:203.0.113.0/120", "", "203.0.113.0/24"},
		{"2001:db8::1", "", "2001:db8::1"},
		{"2001:db8::/48", "", "2001:db8::/48"},
		{"", "Xy7qZ", "Xy7qZ"},
	}
	for _, g := range good {
		p, err := ParsePin(g.ip, g.vid, "review", "")
		if err != nil || p.Text() != g.text || p.Action != Review || p.IsIP() != (g.ip != "") {
			t.Errorf("ParsePin(%q, %q) = %+v %v", g.ip, g.vid, p, err)
		}
		if err := ValidatePins([]Pin{p}); err != nil {
			t.Errorf("ValidatePins(%+v): %v", p, err)
		}
	}
	bad := []struct{ ip, vid, action, label string }{
		{"", "", "allow", ""},
		{"1.2.3.4", "v", "allow", ""},
		{"1.2.3.4", "", "maybe", ""},
		{"1.2.3", "", "allow", ""},
		{"1.2.3.4/33", "", "allow", ""},
		{"fe80::1%eth0", "", "allow", ""},
		{"fe80::1%eth0/64", "", "allow", ""},
		{"example.com", "", "allow", ""},
		{"1.2.3.4", "", "allow", strings.Repeat("é", MaxLabelLen+1)},
		{"", strings.Repeat("v", MaxVisitorIDLen+1), "allow", ""},
		// A pin that could never match: blank, or with a space or a
		// control character in it.
		{"", "   ", "block", ""},
		{"", " 0123456789abcdef0123 ", "block", ""},
		{"", "a\tb", "block", ""},
		{"  ", "v", "block", ""},
	}
	for _, b := range bad {
		if _, err := ParsePin(b.ip, b.vid, b.action, b.label); !errors.Is(err, ErrInvalidPolicy) {
			t.Errorf("ParsePin(%q, %q, %q) err %v", b.ip, b.vid, b.action, err)
		}
	}
	if _, err := ParsePin("1.2.3.4", "", "allow", strings.Repeat("é", MaxLabelLen)); err != nil {
		t.Errorf("label of %d characters (not bytes) refused: %v", MaxLabelLen, err)
	}
}

func TestValidatePins(t *testing.T) {
	ok := []Pin{pin("1.2.3.4", "allow", "a"), pin("1.2.3.0/24", "block", "b"), pin("v:x", "review", "c")}
	if err := ValidatePins(ok); err != nil {
		t.Error(err)
	}
	for name, bad := range map[string][]Pin{
		"duplicate address": {pin("1.2.3.4", "allow", "a"), pin("1.2.3.4/32", "block", "b")},
		"duplicate visitor": {pin("v:x", "allow", ""), pin("v:x", "block", "")},
		"no target":         {{Action: Allow}},
		"two targets":       {{Prefix: netip.MustParsePrefix("1.2.3.4/32"), VisitorID: "x", Action: Allow}},
		"host bits":         {{Prefix: netip.MustParsePrefix("1.2.3.4/24"), Action: Allow}},
		"no action":         {{VisitorID: "x"}},
	} {
		if err := ValidatePins(bad); !errors.Is(err, ErrInvalidPolicy) {
			t.Errorf("%s: err %v", name, err)
		}
	}
}

func TestPolicyErrorText(t *testing.T) {
	_, err := ParseAction("deny")
	if err == nil || err.Error() != `action "deny" must be allow, review or block` || !errors.Is(err, ErrInvalidPolicy) {
		t.Errorf("%v", err)
	}
	err = ValidateRules(rules("vpn", "block", "vpn", "allow"))
	if err == nil || err.Error() != "rules[1]: signal vpn appears twice" {
		t.Errorf("%v", err)
	}
}
