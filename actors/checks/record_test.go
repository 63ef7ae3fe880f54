package checks

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/fraudd/fraudd/actors/webhook"
	"github.com/fraudd/fraudd/intel/score"
)

func TestWebhookEventMirrorsEvaluation(t *testing.T) {
	now := time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)
	rule := func(sig, act string) score.Rule {
		r, err := score.ParseRule(sig, act)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	pin := func(ip, act, label string) score.Pin {
		p, err := score.ParsePin(ip, "", act, label)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	addr := netip.MustParseAddr("198.51.100.4")
	cases := []struct {
		name string
		in   score.Input
		want *webhook.Event // nil: no webhook
	}{
		{"clean", score.Input{Network: score.Network{IP: addr, Country: "NL"}}, nil},
		{"degraded allow", score.Input{Network: score.Network{Degraded: true}}, nil},
		{"tor", score.Input{Network: score.Network{IP: addr, Country: "NL", Tor: true}},
			&webhook.Event{IP: "198.51.100.4", ThreatType: "Tor", Details: webhook.Details{Country: "NL", Tor: true, Decision: "block"}}},
		{"privacy relay", score.Input{Network: score.Network{IP: addr, Proxy: true, PrivacyRelay: true}},
			&webhook.Event{IP: "198.51.100.4", ThreatType: "Privacy relay", Details: webhook.Details{Proxied: true, PrivacyRelay: true, Decision: "review"}}},
		{"datacenter with an emulator", score.Input{Network: score.Network{IP: addr, Datacenter: true}, Device: score.Device{Present: true, Emulator: true, VirtualMachine: true}},
			&webhook.Event{IP: "198.51.100.4", ThreatType: "Datacenter with tampering", Details: webhook.Details{DCH: true, Tampering: true, VirtualMachine: true, Decision: "block"}}},
		{"bot with antidetect", score.Input{Network: score.Network{IP: addr}, Device: score.Device{Present: true, Automation: true, Antidetect: true}},
			&webhook.Event{IP: "198.51.100.4", ThreatType: "Bot", Details: webhook.Details{Bot: true, Antidetect: true, Tampering: true, Decision: "block"}}},
		{"degraded rule block", score.Input{Network: score.Network{Degraded: true, Tor: true}, Email: score.Email{Sent: true, Disposable: true},
			Policy: score.Policy{Rules: []score.Rule{rule("disposable_email", "block")}}},
			&webhook.Event{IP: "unknown", ThreatType: "Custom rule (disposable_email)", Details: webhook.Details{Decision: "block", RuleMatched: []string{"disposable_email"}}}},
		{"pin block", score.Input{Network: score.Network{IP: addr, VPN: true}, Policy: score.Policy{Pins: []score.Pin{pin("198.51.100.0/24", "block", "ring")}}},
			&webhook.Event{IP: "198.51.100.4", ThreatType: "Customer exception (ring)", Details: webhook.Details{VPN: true, Decision: "block", ExceptionMatched: []string{"ring"}}}},
	}
	for _, c := range cases {
		var res score.Result
		score.Evaluate(&c.in, &res)
		got, ok := webhookEvent("acc_1", now, &c.in, &res)
		if c.want == nil {
			if ok {
				t.Errorf("%s: fired %+v", c.name, got)
			}
			continue
		}
		c.want.Account, c.want.At = "acc_1", now
		if !ok || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.want)
		}
	}
}
