package checks

import (
	"slices"
	"strings"
	"time"

	"github.com/fraudd/fraudd/actors/challenge"
	"github.com/fraudd/fraudd/actors/devicehist"
	"github.com/fraudd/fraudd/actors/events"
	"github.com/fraudd/fraudd/intel/device"
	"github.com/fraudd/fraudd/intel/evidence"
	"github.com/fraudd/fraudd/intel/score"
	"github.com/fraudd/fraudd/wire"
)

// The resolve stage of a visitor check: every actor call an evaluation
// waits on after its charge is planned here, in this order.
//
//	call                 when                                       actor
//	events.Resolve       a fingerprintEventId was sent              actors/events
//	devicehist.Observe   a resolved device or an accountId          actors/devicehist
//	challenge.Submit     evidence was sent and the event resolved   actors/challenge
//
// The first two travel in the charge's chained call (chain.go): the
// limiters, the charge, the event and the history are one round trip, each
// actor handing the call to the next, and the history hears the visitor id
// the event resolved to. The evidence (a beta) is a round trip of its own
// after the chain. Each fails open: the answer goes on without what it
// could not read.

// planFacts adds the event and the history to the chain.
func (s *Service) planFacts(c *Call, ch *chain, ev *Evaluation, req *EvalRequest) {
	o := &ev.opts
	o.deviceStatus = "not_sent"
	if req.FingerprintEventID != "" {
		o.deviceStatus = "unavailable"
		if id, ok := events.ParseEventID(req.FingerprintEventID); ok {
			// The personal test key counts no use: test traffic shows in
			// no later answer (SPEC 2.2 customer_history "excludes
			// test-key traffic"), so a live evaluation of the event after
			// it is its first use, not a replay that adds no visit.
			ch.resolve = events.Resolve{ID: id, Account: c.Auth.View.ID, Now: c.Now, Peek: !c.liveKey()}
			ch.resolveP = true
		}
	}
	ch.obs = observation(c, req.FingerprintEventID, req.AccountID, &ev.in.Network)
	if err := s.chHistory.Prepare(ch.obs, &ch.observe); err != nil {
		ch.histErr = err
		return
	}
	ch.observeP = true
}

// resolveFacts feeds what the chain brought back to the engine and the
// builder, then submits the evidence. timedOut: the chain did not answer
// in time after the charge; the answer goes on without device or history.
func (s *Service) resolveFacts(c *Call, ch *chain, ev *Evaluation, req *EvalRequest, timedOut bool) {
	if timedOut {
		s.log.Warn("device event and history not read in time")
		// An event resolved before the history stalled was used: show it,
		// or the retry reads device_replayed of a device no answer showed.
		// The event's step wrote ch.resolved before it set the stage.
		if ch.resolveP && ch.stage.Load() >= stageObserve {
			s.applyDevice(c, ev, &ch.resolved, ch.eventErr)
		}
		return
	}
	if ch.resolveP {
		s.applyDevice(c, ev, &ch.resolved, ch.eventErr)
	}
	if (req.GPUEvidence != nil || req.BrowserEvidence != nil) && ev.in.Device.Present {
		s.submitEvidence(c, ev, req, c.Auth.View.ID)
	}
	if ch.histErr != nil {
		s.log.Warn("device history not observed", "err", ch.histErr)
		return
	}
	s.applyFacts(c, ev, &ch.facts)
}

// applyDevice reads the resolved fingerprintEventId and sets device_status:
// ok when the event resolved for this account, unavailable when an id was
// sent that did not (unknown, malformed, another account's, pruned, or the
// device store failing), not_sent otherwise. Without a resolved event the
// engine sees no device (SPEC 2.8.7: network-only decision, no device
// object, not degraded).
func (s *Service) applyDevice(c *Call, ev *Evaluation, res *events.Resolved, err error) {
	o := &ev.opts
	if err != nil {
		s.log.Warn("device event not resolved", "err", err)
		return
	}
	if !res.Found {
		return
	}
	o.deviceStatus = "ok"
	v := res.Verdict()
	ev.in.Device = score.Device{
		Present: true, Automation: v.Automation, Antidetect: v.Antidetect, Emulator: v.Emulator,
		VirtualMachine: v.VirtualMachine, Incognito: v.Incognito, PrivacyMode: v.PrivacyMode,
		IPBlocklisted: v.IPBlocklisted, Complete: v.Complete, TamperingScore: v.TamperingScore,
		VisitorID: v.VisitorID,
	}
	created := res.Event.Created
	first := res.Sightings.FirstSeen
	if first.IsZero() {
		first = created
	}
	ev.seen = deviceSeen{checked: v.Checked.Names(), mask: v.Checked, timesSeen: max(res.Sightings.TimesSeen, 1), firstSeen: first}
	o.seen = &ev.seen
	o.deviceAgeS = max(int64(c.Now.Sub(created)/time.Second), 0)
	o.deviceReplayed = res.Replayed
}

// submitEvidence handles gpuEvidence / browserEvidence after the event
// resolved: validate, consume the challenge and record, in one hop. The
// personal test key only reads: it leaves the challenge unused and records
// nothing (challenge.Submit Peek).
// browserEvidence takes precedence when both are sent. Results show under
// device; findings only raise allow to review (score.Consistency).
func (s *Service) submitEvidence(c *Call, ev *Evaluation, req *EvalRequest, account string) {
	beta := c.Auth.View.DeviceEvidenceBeta
	if req.BrowserEvidence != nil {
		ev.opts.browserEv = s.browserEvidence(c, ev, req, account, beta)
		return
	}
	ev.opts.gpuEv = s.gpuEvidence(c, ev, req, account, beta)
}

func (s *Service) gpuEvidence(c *Call, ev *Evaluation, req *EvalRequest, account string, beta bool) *wire.GPUEvidence {
	out := &wire.GPUEvidence{}
	if !beta {
		s.purgeEvidence(account)
		out.Status = challenge.StatusDisabled
		return out
	}
	g, err := evidence.ParseGPU(req.GPUEvidence)
	if err != nil {
		out.Status = challenge.StatusInvalid
		return out
	}
	res, err := s.challenges.Submit(challenge.Submit{
		Customer: strings.Clone(account), Event: canonicalEventID(req.FingerprintEventID),
		Device: ev.in.Device.VisitorID, Challenge: g.Challenge, GPU: &g.Features, Now: c.Now,
		Peek: !c.liveKey(), // the test key's traffic shows in no later answer
	})
	if err != nil {
		s.log.Warn("gpu evidence not recorded", "err", err)
		out.Status = challenge.StatusUnavailable
		return out
	}
	out.Status = res.Status
	if res.HasNearest {
		d := res.RMS
		out.NearestDevice, out.RMSDistance = res.Nearest, &d
	}
	return out
}

// Findings of the browser-consistency evidence (SPEC 2.6).
const (
	findingGPU           = "gpu_inconsistent"
	findingRandomization = "antidetect_randomization"
	findingBurst         = "antidetect_profile_burst"
)

func (s *Service) browserEvidence(c *Call, ev *Evaluation, req *EvalRequest, account string, beta bool) *wire.BrowserConsistency {
	out := &wire.BrowserConsistency{Experimental: true, Source: "browser_reported", Findings: []string{}, Checks: []wire.ConsistencyCheck{}}
	if !beta {
		s.purgeEvidence(account)
		out.Status = "disabled"
		return out
	}
	b, err := evidence.ParseBrowser(req.BrowserEvidence)
	if err != nil {
		out.Status = "invalid"
		return out
	}
	res, err := s.challenges.Submit(challenge.Submit{
		Customer: strings.Clone(account), Event: canonicalEventID(req.FingerprintEventID),
		Device: ev.in.Device.VisitorID, Challenge: b.Challenge, AccountID: strings.Clone(req.AccountID),
		Browser: &b, Now: c.Now, Peek: !c.liveKey(),
	})
	switch {
	case err != nil:
		s.log.Warn("browser evidence not checked", "err", err)
		out.Status = "unavailable"
		return out
	case !res.Accepted:
		out.Status = "replay"
		return out
	}
	rep := evidence.Compare(&b)
	out.Status = rep.Status
	for _, ck := range rep.Checks {
		out.Checks = append(out.Checks, wire.ConsistencyCheck{Name: ck.Name, Status: ck.Status})
	}
	cons := &ev.in.Consistency
	if rep.GPUInconsistent {
		cons.GPUInconsistent = true
		out.Findings = append(out.Findings, findingGPU)
	}
	if res.Randomization {
		cons.AntidetectRandomization = true
		out.Findings = append(out.Findings, findingRandomization)
	}
	if res.ProfileBurst {
		cons.AntidetectProfileBurst = true
		out.Findings = append(out.Findings, findingBurst)
	}
	if len(out.Findings) > 0 {
		out.Status = "inconsistent"
	}
	return out
}

// purgeEvidence deletes what the beta kept for an account whose beta is off
// (SPEC §8: disabling the beta deletes samples and challenges). It runs on
// the account's next challenge or evidence submission.
func (s *Service) purgeEvidence(account string) {
	if err := s.challenges.Purge(strings.Clone(account)); err != nil {
		s.log.Warn("device evidence not purged", "err", err)
	}
}

// canonicalEventID is the event id as the challenge recorded it.
func canonicalEventID(id string) string {
	if b, ok := events.ParseEventID(id); ok {
		return events.FormatEventID(b)
	}
	return strings.Clone(id)
}

// applyFacts feeds the customer's history facts to the engine and the
// builder.
func (s *Service) applyFacts(c *Call, ev *Evaluation, f *devicehist.Facts) {
	ev.histFacts = *f
	ev.opts.hist = &ev.histFacts
	var timesSeen int64
	var firstSeen time.Time
	if sn := ev.opts.seen; sn != nil {
		timesSeen, firstSeen = sn.timesSeen, sn.firstSeen
	}
	applyHistory(&ev.in, &ev.histFacts, c.accountObject(), timesSeen, firstSeen, c.Now)
	if sn := ev.opts.seen; sn == &ev.seen {
		// The history decided high_activity, and multi_account when an
		// accountId came with the device: checked, so a false is clean.
		sn.checked = checkedWithHistory(sn.mask, f.Device && f.Account)
	}
}

// checkedLists[multi][mask] is device.checked_signals for a device whose
// report's checks were mask and whose history was read: high_activity
// added, and multi_account with an accountId. Built once: the evaluate
// path hands out a shared slice.
var checkedLists = func() (out [2][device.AllChecked + 1][]string) {
	for m := range device.AllChecked + 1 {
		base := device.Checked(m).Names()
		out[0][m] = append(slices.Clip(base), "high_activity")
		out[1][m] = append(slices.Clone(out[0][m]), "multi_account")
	}
	return out
}()

func checkedWithHistory(mask device.Checked, multi bool) []string {
	i := 0
	if multi {
		i = 1
	}
	return checkedLists[i][mask&device.AllChecked]
}

// accountObjectSince is when the `account` object and the reasons of its
// counts began (SPEC 2.2: "Present when accountId is sent with a live key
// (since 2026-10-18)").
var accountObjectSince = time.Date(2026, 10, 18, 0, 0, 0, 0, time.UTC)

// accountObject reports whether an accountId's counts apply to c: a live
// key, at a request time since accountObjectSince.
func (c *Call) accountObject() bool { return c.liveKey() && !c.Now.Before(accountObjectSince) }

// observation is an evaluation's device and account evidence for the
// customer's device-history shard. The device id (the resolved event's
// visitor id) is set once the event resolved; accountID is the request's
// accountId ("" when not sent). The personal test key reads without
// recording.
func observation(c *Call, eventID, accountID string, n *score.Network) devicehist.Observation {
	o := devicehist.Observation{
		Customer: c.Auth.View.ID, Test: !c.liveKey(),
		EventID: eventID, AccountID: accountID,
		SharedExit: n.SharedExit(), Now: c.Now,
	}
	if !n.Degraded {
		o.IP = n.IP
	}
	return o
}

// applyHistory sets the engine inputs that come from device history:
// high_activity (the customer's own 24 h visits, or the device's global
// sightings: timesSeen, firstSeen) and multi_account when a device event
// resolved, and the account counts when an accountId came with a live key.
func applyHistory(in *score.Input, f *devicehist.Facts, liveKey bool, timesSeen int64, firstSeen, now time.Time) {
	if in.Device.Present {
		in.Device.HighActivity = devicehist.HighActivity(f.Visits24h, timesSeen, firstSeen, now)
		in.Device.MultiAccount = f.Device && f.Account && f.LinkedAccounts > 1
	}
	in.Account = scoreAccount(f, liveKey)
}

// scoreAccount is the engine's view of the account object; zero (no
// account reasons) without an accountId or off a live key.
func scoreAccount(f *devicehist.Facts, liveKey bool) score.Account {
	if !liveKey || !f.Account {
		return score.Account{}
	}
	a := score.Account{AccountDevices24h: f.AccountDevices24h}
	if f.Device {
		a.DeviceAccounts24h, a.NewDevice = f.DeviceAccounts24h, f.NewDevice
	}
	if f.IPCounted {
		a.IPAccounts24h = f.IPAccounts24h
	}
	return a
}
