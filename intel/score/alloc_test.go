package score

import (
	"testing"
)

// fullInput exercises every branch Evaluate has: all evidence kinds, rules
// and several matching pins.
func fullInput() Input {
	in := mk("vpn", "dc", "relay", "automation", "vm", "incognito", "devbl", "multi", "disposable",
		"tzmismatch", "devmany", "acctmany", "ipmany", "newdev", "gpu")
	in.Device.VisitorID = "abc"
	in.Device.TamperingScore = 0.4
	in.Policy = Policy{
		Rules: rules("vpn", "allow", "datacenter", "review", "proxy", "block", "automation", "block", "incognito", "allow"),
		Pins: []Pin{
			pin("10.0.0.0/8", "block", "elsewhere"),
			pin("73.158.0.0/16", "review", "isp"),
			pin("73.158.64.21", "allow", "host"),
			pin("v:abc", "allow", "device"),
		},
	}
	return in
}

// The scorer is on every evaluate: it must allocate nothing (STYLE.md habit 10).
func TestEvaluateAllocatesNothing(t *testing.T) {
	inputs := map[string]Input{"clean": mk(), "full": fullInput()}
	for _, s := range Scenarios() {
		inputs["sample "+s], _ = Sample(s)
	}
	for name, in := range inputs {
		var out Result
		if n := testing.AllocsPerRun(200, func() { Evaluate(&in, &out) }); n != 0 {
			t.Errorf("%s: Evaluate allocates %.1f times per run", name, n)
		}
	}
	in := fullInput()
	var out Result
	Evaluate(&in, &out)
	dst := make([]string, 0, NumReasons)
	if n := testing.AllocsPerRun(200, func() {
		dst = out.Reasons.AppendStrings(dst[:0])
		dst = out.RuleMatched.AppendStrings(dst[:0])
		dst = out.AppendExceptions(dst[:0]) // labelled pins: no formatting
		_, _ = ThreatType(&out)
	}); n != 0 {
		t.Errorf("rendering helpers allocate %.1f times per run", n)
	}
}

// Run with: go test ./intel/score/ -run '^$' -bench Evaluate -benchmem -benchtime=200000x
func BenchmarkEvaluate(b *testing.B) {
	tv, _ := TestToken("test_vpn")
	cases := []struct {
		name string
		in   Input
	}{
		{"clean", mk()},
		{"test_vpn", Input{Network: tv.Network}},
		{"full_policy", fullInput()},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var out Result
			b.ReportAllocs()
			for b.Loop() {
				Evaluate(&c.in, &out)
			}
		})
	}
}
