package score

import (
	"testing"
	"time"
)

func TestThreatType(t *testing.T) {
	cases := []struct {
		name   string
		flags  []string
		policy Policy
		visit  string
		want   string // "" = no webhook
	}{
		{"clean", nil, Policy{}, "", ""},
		{"tor", []string{"tor"}, Policy{}, "", ThreatTor},
		{"test_proxy", []string{"proxy", "dc"}, Policy{}, "", ThreatProxy},
		{"open proxy", []string{"openproxy"}, Policy{}, "", ThreatProxy},
		{"privacy relay (review)", []string{"relay"}, Policy{}, "", ThreatPrivacyRelay},
		{"vpn", []string{"vpn"}, Policy{}, "", ThreatVPN},
		{"test_vpn", []string{"vpn", "dc"}, Policy{}, "", ThreatVPN},
		{"bot", []string{"automation"}, Policy{}, "", ThreatBot},
		{"antidetect", []string{"antidetect"}, Policy{}, "", ThreatAntidetect},
		{"datacenter with antidetect", []string{"dc", "antidetect"}, Policy{}, "", ThreatDatacenterWithTampering},
		{"datacenter with emulator", []string{"dc", "emulator"}, Policy{}, "", ThreatDatacenterWithTampering},
		{"virtual machine (review)", []string{"vm"}, Policy{}, "", ThreatVirtualMachine},
		{"tor outranks the rest", []string{"vpn", "automation", "tor", "vm"}, Policy{}, "", ThreatTor},

		// Not in SPEC §6's list.
		{"datacenter alone", []string{"dc"}, Policy{}, "", ""},
		{"emulator alone", []string{"emulator"}, Policy{}, "", ""},
		{"disposable email", []string{"disposable"}, Policy{}, "", ""},
		{"time-zone mismatch", []string{"tzmismatch"}, Policy{}, "", ""},
		{"anonymous alone", []string{"anon"}, Policy{}, "", ""},
		{"degraded", []string{"degraded", "tor"}, Policy{}, "", ""},

		// Policy-decided blocks.
		{"rule block", []string{"dc"}, Policy{Rules: rules("datacenter", "block")}, "", "Custom rule (datacenter)"},
		{"rule block names the deciding rule", []string{"vpn", "dc"}, Policy{Rules: rules("datacenter", "block", "vpn", "review")}, "", "Custom rule (datacenter)"},
		{"rule block over an engine threat", []string{"tor"}, Policy{Rules: rules("tor", "block")}, "", "Custom rule (tor)"},
		{"rule review is no policy threat", []string{"disposable"}, Policy{Rules: rules("disposable_email", "review")}, "", ""},
		{"rule allow keeps the engine threat", []string{"vpn"}, Policy{Rules: rules("vpn", "allow")}, "", ThreatVPN},
		{"pin block", nil, Policy{Pins: []Pin{pin("73.158.64.0/24", "block", "fraud ring")}}, "", "Customer exception (fraud ring)"},
		{"pin block without label", nil, Policy{Pins: []Pin{pin("73.158.64.21", "block", "")}}, "", "Customer exception (73.158.64.21)"},
		{"device pin block", nil, Policy{Pins: []Pin{pin("v:abc", "block", "")}}, "abc", "Customer exception (abc)"},
		{"pin allow keeps the engine threat", []string{"tor"}, Policy{Pins: []Pin{pin("73.158.64.21", "allow", "ok")}}, "", ThreatTor},
		{"pin allow over a rule block", []string{"dc"}, Policy{Rules: rules("datacenter", "block"), Pins: []Pin{pin("73.158.64.21", "allow", "ok")}}, "", ""},
	}
	for _, c := range cases {
		in := mk(c.flags...)
		if c.visit != "" {
			in.Device.Present, in.Device.VisitorID = true, c.visit
		}
		in.Policy = c.policy
		r := eval(in)
		got, ok := ThreatType(&r)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("%s: ThreatType = %q, %v; want %q (%s)", c.name, got, ok, c.want, describe(r))
		}
	}
	if s, ok := ThreatType(nil); s != "" || ok {
		t.Errorf("nil result")
	}
}

// TestVirtualMachineThreatDated: a virtual machine is a threat (SPEC §6
// "virtual machine (review)") only at a request time when it reviews; before
// VirtualMachineReviewSince it is an allow and fires nothing.
func TestVirtualMachineThreatDated(t *testing.T) {
	for _, c := range []struct {
		at   time.Time
		want string
	}{
		{VirtualMachineReviewSince.Add(-time.Second), ""},
		{VirtualMachineReviewSince, ThreatVirtualMachine},
	} {
		in := mk("vm")
		in.At = c.at
		r := eval(in)
		if got, _ := ThreatType(&r); got != c.want {
			t.Errorf("at %s: ThreatType = %q, want %q (%s)", c.at, got, c.want, describe(r))
		}
	}
}
