package checks

import (
	"strings"
	"time"

	"github.com/fraudd/fraudd/actors/recent"
	"github.com/fraudd/fraudd/actors/traffic"
	"github.com/fraudd/fraudd/actors/webhook"
	"github.com/fraudd/fraudd/intel/netlists"
	"github.com/fraudd/fraudd/intel/score"
)

// The record stage: what an answered call leaves behind. Every call here is
// a Send: nothing waits on it, and none of it changes the answer.
//
//	what                     when                                          actor
//	quota.CountTotal         degraded evaluation, live key, not a bare allow  actors/quota
//	traffic.Record           visitor check or lookup with a live key          actors/traffic
//	webhook.Notify           visitor check with a live key, a SPEC §6 threat  actors/webhook
//	recent.Record            every answered visitor check of an account,      actors/recent
//	                         the test key's marked, but the bare degraded
//	                         allow (no test tokens, sandbox or samples)
//
// Device sightings and customer history were recorded by the resolve
// stage's calls themselves (events.Resolve, devicehist.Observe).

// recordEvaluation records an answered evaluation.
func (s *Service) recordEvaluation(c *Call, ev *Evaluation, out outcome) {
	// The recent list is stored (Pebble, 7 days): SPEC 2.9 test tokens are
	// "never ... stored", and 2.8.6 omits the bare degraded allow from
	// "stored events". The personal test key's checks are stored, flagged
	// test (SPEC §5.2).
	if c.Auth.View != nil && ev.opts.kind == kindVisitor && !(ev.in.Network.Degraded && bareAllow(&ev.res)) {
		s.recent.Record(recentEntry(c, ev))
	}
	if !c.liveKey() {
		return
	}
	if charges[out].total == totalAfterScoring && !bareAllow(&ev.res) {
		s.quota.CountTotal(c.Auth.View.ID, c.Now)
	}
	if ev.opts.kind != kindVisitor {
		return
	}
	n, res := &ev.in.Network, &ev.res
	// A threat is anything the engine itself did not allow (policy
	// overrides aside).
	s.traffic.Record(traffic.Record{
		Now: c.Now, Threat: res.EngineDecision != score.Allow,
		VPN:   !n.Degraded && n.VPN,
		Proxy: !n.Degraded && (n.Proxy || n.OpenProxy || n.PrivacyRelay),
		DCH:   !n.Degraded && n.Datacenter,
	})
	// Accounts without a receiver cost one field check.
	if v := c.Auth.View; v.WebhookURL != "" {
		if e, ok := webhookEvent(v.ID, c.Now, &ev.in, res); ok {
			s.webhooks.Notify(e)
		}
	}
}

// recentEntry is the console's view of an evaluation: fixed-size, with no
// pointer into the request (the account and pin strings are the immutable
// view's and policy's).
func recentEntry(c *Call, ev *Evaluation) recent.Entry {
	res, n := &ev.res, &ev.in.Network
	e := recent.Entry{Account: c.Auth.View.ID, At: c.Now, RequestID: c.RequestID,
		Decision: res.Decision, Engine: res.EngineDecision, Source: res.DecisionSource,
		Rule: res.RuleSignal, RuleMatched: res.RuleMatched, Risk: uint8(min(max(res.RiskScore, 0), 100)),
		Reasons: res.Reasons, Test: ev.opts.test}
	if !n.Degraded {
		e.IP = n.IP
		e.SetCountry(n.Country)
	}
	if p, ok := res.ExceptionWinner(); ok {
		e.Pin = p
	}
	return e
}

// bareAllow is the degraded fallback that SPEC 2.8.6 leaves out of totals:
// an engine allow with nothing raised.
func bareAllow(res *score.Result) bool {
	return res.Decision == score.Allow && res.Reasons.Len() == 0 && res.DecisionSource == score.SourceEngine
}

// recordLookup counts a live-key bare lookup for the threat feed.
func (s *Service) recordLookup(c *Call, b *netlists.BareResult) {
	if c.liveKey() {
		s.traffic.Record(traffic.Record{Now: c.Now, Threat: b.Verdict != netlists.VerdictAllow, DCH: b.Datacenter})
	}
}

// webhookEvent builds the threat.detected event of an evaluation SPEC §6
// calls a threat (score.ThreatType), mirroring the evaluate answer's
// fields. Everything it carries is copied: nothing may point into the
// request's buffers once it crosses into the actor.
func webhookEvent(account string, now time.Time, in *score.Input, res *score.Result) (*webhook.Event, bool) {
	tt, ok := score.ThreatType(res)
	if !ok {
		return nil, false
	}
	n, d := &in.Network, &in.Device
	ev := &webhook.Event{Account: account, At: now, ThreatType: tt, IP: "unknown"}
	det := &ev.Details
	if !n.Degraded {
		if n.IP.IsValid() { // no address measured: "unknown", as the answer shows
			ev.IP = n.IP.String()
		}
		det.Country = strings.Clone(n.Country)
		det.VPN, det.Tor, det.DCH = n.VPN, n.Tor, n.Datacenter
		det.Proxied = n.Proxy || n.PrivacyRelay || n.OpenProxy
	}
	det.PrivacyRelay = res.PrivacyRelay
	if d.Present {
		det.Bot = d.Automation
		det.Antidetect = d.Antidetect
		det.VirtualMachine = d.VirtualMachine
		det.Tampering = d.Antidetect || d.Emulator
	}
	det.Decision = res.Decision.String()
	// As on the evaluate answer: rule_matched with a rule-decided answer,
	// exception_matched with a pin-decided one.
	switch res.DecisionSource {
	case score.SourceRules:
		det.RuleMatched = res.RuleMatched.AppendStrings(nil)
	case score.SourceException:
		det.ExceptionMatched = res.AppendExceptions(nil)
		for i, name := range det.ExceptionMatched {
			det.ExceptionMatched[i] = strings.Clone(name)
		}
	}
	return ev, true
}
