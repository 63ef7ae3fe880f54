package score

import (
	"flag"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"
)

var (
	seedFlag  = flag.Uint64("score.seed", 0, "seed for the randomised score tests (0: time-based)")
	itersFlag = flag.Int("score.iters", 20000, "random inputs per randomised test")
)

func testSeed(t *testing.T) uint64 {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -score.seed=%d)", seed, seed)
	return seed
}

// randomInput draws an input with every kind of evidence switched on or off
// at random, plus a random policy.
func randomInput(rng *rand.Rand) Input {
	b := func() bool { return rng.IntN(4) == 0 }
	countries := []string{"", "US", "DE", "NL"}
	in := Input{
		Network: Network{
			Degraded: rng.IntN(8) == 0,
			VPN:      b(), Proxy: b(), PrivacyRelay: b(), OpenProxy: rng.IntN(10) == 0,
			Datacenter: b(), Tor: rng.IntN(8) == 0, Anonymous: b(), Blocklisted: b(), Mobile: b(),
			IP:      netip.AddrFrom4([4]byte{73, 158, 64, byte(rng.IntN(4))}),
			Country: countries[rng.IntN(len(countries))],
		},
		Device: Device{
			Present:    rng.IntN(3) != 0,
			Automation: b(), Antidetect: b(), Emulator: b(), VirtualMachine: b(), Incognito: b(),
			PrivacyMode: b(), IPBlocklisted: b(), HighActivity: b(), MultiAccount: b(),
			TamperingScore: rng.Float64() * float64(rng.IntN(2)),
			VisitorID:      []string{"", "a", "b"}[rng.IntN(3)],
		},
		Email:    Email{Sent: b(), Disposable: b()},
		TimeZone: TimeZone{Sent: rng.IntN(2) == 0, Zone: "Z", Country: countries[rng.IntN(len(countries))]},
		Account: Account{
			DeviceAccounts24h: rng.IntN(5), AccountDevices24h: rng.IntN(5),
			IPAccounts24h: rng.IntN(5), NewDevice: b(),
		},
		Consistency: Consistency{GPUInconsistent: b(), AntidetectRandomization: b(), AntidetectProfileBurst: b()},
	}
	for range rng.IntN(4) {
		in.Policy.Rules = append(in.Policy.Rules, Rule{Signal: Signal(1 + rng.IntN(NumSignals)), Action: Action(1 + rng.IntN(3))})
	}
	for range rng.IntN(3) {
		p := Pin{Action: Action(1 + rng.IntN(3)), Label: "p"}
		if rng.IntN(2) == 0 {
			p.Prefix = netip.PrefixFrom(netip.AddrFrom4([4]byte{73, 158, 64, byte(rng.IntN(4))}), 30+rng.IntN(3)).Masked()
		} else {
			p.VisitorID = []string{"a", "b"}[rng.IntN(2)]
		}
		in.Policy.Pins = append(in.Policy.Pins, p)
	}
	return in
}

// strengthen lists every way to add evidence: switch one signal on, or make
// one reading stronger. Not in the list, because they are not risk evidence:
// Degraded (less evidence), Mobile (withholds the per-address count, as SPEC
// 2.2 says), and PrivacyRelay on top of Proxy (it reclassifies the proxy as
// the milder relay; on its own it is listed).
var strengthen = []struct {
	name  string
	apply func(*Input)
}{
	{"vpn", func(in *Input) { in.Network.VPN = true }},
	{"proxy", func(in *Input) { in.Network.Proxy = true }},
	{"privacy relay (no proxy yet)", func(in *Input) {
		if !in.Network.Proxy {
			in.Network.PrivacyRelay = true
		}
	}},
	{"open proxy", func(in *Input) { in.Network.OpenProxy = true }},
	{"datacenter", func(in *Input) { in.Network.Datacenter = true }},
	{"tor", func(in *Input) { in.Network.Tor = true }},
	{"anonymous", func(in *Input) { in.Network.Anonymous = true }},
	{"network blocklist", func(in *Input) { in.Network.Blocklisted = true }},
	{"device present", func(in *Input) { in.Device.Present = true }},
	{"automation", func(in *Input) { in.Device.Automation = true }},
	{"antidetect", func(in *Input) { in.Device.Antidetect = true }},
	{"emulator", func(in *Input) { in.Device.Emulator = true }},
	{"virtual machine", func(in *Input) { in.Device.VirtualMachine = true }},
	{"incognito", func(in *Input) { in.Device.Incognito = true }},
	{"privacy mode", func(in *Input) { in.Device.PrivacyMode = true }},
	{"device blocklist", func(in *Input) { in.Device.IPBlocklisted = true }},
	{"high activity", func(in *Input) { in.Device.HighActivity = true }},
	{"multi account", func(in *Input) { in.Device.MultiAccount = true }},
	{"tampering score up", func(in *Input) {
		in.Device.TamperingScore += (1 - in.Device.TamperingScore) * 0.5
	}},
	{"email sent", func(in *Input) { in.Email.Sent = true }},
	{"disposable", func(in *Input) { in.Email.Disposable = true }},
	{"zone sent", func(in *Input) { in.TimeZone.Sent = true }},
	{"device accounts up", func(in *Input) { in.Account.DeviceAccounts24h++ }},
	{"account devices up", func(in *Input) { in.Account.AccountDevices24h++ }},
	{"ip accounts up", func(in *Input) { in.Account.IPAccounts24h++ }},
	{"new device", func(in *Input) { in.Account.NewDevice = true }},
	{"gpu inconsistent", func(in *Input) { in.Consistency.GPUInconsistent = true }},
	{"antidetect randomization", func(in *Input) { in.Consistency.AntidetectRandomization = true }},
	{"antidetect profile burst", func(in *Input) { in.Consistency.AntidetectProfileBurst = true }},
}

// TestRiskScoreMonotone: more or stronger evidence never lowers risk_score,
// and never lifts an engine block.
func TestRiskScoreMonotone(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 1))
	for i := range *itersFlag {
		in := randomInput(rng)
		before := eval(in)
		// Apply a random chain of strengthenings; each step must not drop.
		for range 1 + rng.IntN(4) {
			s := strengthen[rng.IntN(len(strengthen))]
			s.apply(&in)
			after := eval(in)
			if after.RiskScore < before.RiskScore {
				t.Fatalf("iteration %d: %q lowered the score %d → %d\ninput %+v", i, s.name, before.RiskScore, after.RiskScore, in)
			}
			// The decision itself is not monotone by SPEC 2.8.4: a
			// datacenter exit turns the time-zone check off, so a
			// mismatch's review can fall back to allow. A block can't.
			if before.EngineDecision == Block && after.EngineDecision != Block {
				t.Fatalf("iteration %d: %q lifted an engine block\ninput %+v", i, s.name, in)
			}
			before = after
		}
	}
}

// TestInvariants checks, over random inputs, what must hold for every answer.
func TestInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 2))
	for i := range *itersFlag {
		in := randomInput(rng)
		r := eval(in)
		noPolicy := in
		noPolicy.Policy = Policy{}
		e := eval(noPolicy)
		fail := func(msg string) { t.Fatalf("iteration %d: %s\n%s\ninput %+v", i, msg, describe(r), in) }
		switch {
		case r.RiskScore < 0 || r.RiskScore > 100:
			fail("score out of range")
		case !r.Decision.Valid() || !r.EngineDecision.Valid():
			fail("invalid decision")
		case r.PolicyChanged != (r.Decision != r.EngineDecision):
			fail("PolicyChanged")
		case r.RiskScore != e.RiskScore || r.Reasons != e.Reasons || r.EngineDecision != e.EngineDecision ||
			r.IsSuspicious != e.IsSuspicious || r.Fired != e.Fired:
			fail("policy changed the engine's output")
		case r.DecisionSource == SourceEngine && r.Decision != r.EngineDecision:
			fail("decision changed without a source")
		case (r.DecisionSource == SourceException) != (r.ExceptionCount() > 0):
			fail("exception source without a matched pin")
		case r.DecisionSource == SourceRules && r.RuleMatched == 0:
			fail("rules source without a matched rule")
		case r.RuleMatched&^r.Fired != 0:
			fail("a rule matched a signal that did not fire")
		case in.Network.Degraded && (r.Anonymous || r.Residential || r.PrivacyRelay ||
			r.Fired&(1<<SignalVPN|1<<SignalProxy|1<<SignalTor|1<<SignalDatacenter|1<<SignalAnonymous) != 0):
			fail("degraded answer carries network flags")
		case r.Reasons.Has(ReasonProxyDetected) && r.Reasons.Has(ReasonPrivacyRelay) && !in.Network.OpenProxy:
			fail("relay reported as proxy too")
		case r.Reasons.Has(ReasonTimezoneMismatch) && !r.TimeZone.Checked:
			fail("mismatch without checked")
		case r.EngineDecision == Block && !r.IsSuspicious:
			fail("engine block without isSuspicious")
		case r.Reasons == 0 && r.RiskScore != 0 && in.Device.TamperingScore == 0 && !in.Device.PrivacyMode:
			fail("score without a reason")
		}
		if r.Reasons.Len() != len(r.Reasons.AppendStrings(nil)) || r.RuleMatched.Len() != len(r.RuleMatched.AppendStrings(nil)) {
			fail("set length")
		}
	}
}
