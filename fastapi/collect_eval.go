package fastapi

import (
	"time"

	"github.com/fraudd/fraudd/actors/events"
	"github.com/fraudd/fraudd/intel/device"
	"github.com/fraudd/fraudd/intel/netlists"
	"github.com/fraudd/fraudd/intel/nettoken"
	"github.com/fraudd/fraudd/intel/score"
	"github.com/fraudd/fraudd/storage"
)

// verifyNetToken checks a collector token for the evaluating account: pure,
// an HMAC and no actor hop. A tampered, malformed or other account's token
// is simply not ok (400 Invalid token.).
func (s *Server) verifyNetToken(account, token string) (nettoken.Facts, bool) {
	if s.deps.NetTokens == nil {
		return nettoken.Facts{}, false
	}
	return s.deps.NetTokens.Verify(account, token)
}

// applyNetToken sets the network layer from a verified token, with
// evidence.network_age_s. An old token still evaluates: expiry is advice.
func applyNetToken(st *evalState, o *evalOpts, f *nettoken.Facts, snap *netlists.Snapshot, now time.Time) {
	st.in.Network = nettoken.Network(f, snap)
	o.kind = evalLive
	o.networkAgeS, o.hasNetAge = nettoken.Age(f, now), true
}

// resolveDevice resolves fingerprintEventId on a live evaluation in one
// actor round trip and sets device_status: ok when the event resolved for
// this account, unavailable when an id was sent that did not (unknown,
// malformed, another account's, pruned, or the device store failing),
// not_sent otherwise. Without a resolved event the engine sees no device
// (SPEC 2.8.7: network-only decision, no device object, not degraded).
func (s *Server) resolveDevice(st *evalState, o *evalOpts, eventID, account string, now time.Time) {
	o.deviceStatus = "not_sent"
	if eventID == "" {
		return
	}
	o.deviceStatus = "unavailable"
	id, ok := events.ParseEventID(eventID)
	if !ok || s.deps.Devices == nil {
		return
	}
	res, err := s.deps.Devices.Resolve(events.Resolve{ID: id, Account: account, Now: now})
	if err != nil {
		s.log.Warn("device event not resolved", "err", err)
		return
	}
	if !res.Found {
		return
	}
	o.deviceStatus = "ok"
	e := &res.Event
	st.in.Device = score.Device{
		Present:        true,
		Automation:     e.Flags&storage.EventAutomation != 0,
		Antidetect:     e.Flags&storage.EventAntidetect != 0,
		Emulator:       e.Flags&storage.EventEmulator != 0,
		VirtualMachine: e.Flags&storage.EventVirtualMachine != 0,
		Incognito:      e.Flags&storage.EventIncognito != 0,
		PrivacyMode:    e.Flags&storage.EventPrivacyMode != 0,
		IPBlocklisted:  e.Flags&storage.EventIPBlocklisted != 0,
		Complete:       e.Flags&storage.EventComplete != 0,
		TamperingScore: float64(e.Tampering) / 10000,
		VisitorID:      e.VisitorID,
	}
	f := &st.deviceFacts
	*f = deviceFacts{CheckedSignals: device.Checked(e.Checked).Names(), TimesSeen: max(res.History.TimesSeen, 1)}
	first := res.History.FirstSeen
	if first.IsZero() {
		first = e.Created
	}
	f.FirstSeen = first.UTC().Format(time.RFC3339)
	o.deviceFirstSeen = first
	o.device = f
	o.hasDevice = true
	o.deviceAgeS = max(int64(now.Sub(e.Created)/time.Second), 0)
	o.deviceReplayed = res.Replayed
}
