package checks

import (
	"errors"
	"net/http"
	"net/netip"
	"strings"

	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/actors/events"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/intel/device"
	"github.com/fraudd/fraudd/intel/nettoken"
	"github.com/fraudd/fraudd/storage"
)

// The browser collector's calls (COLLECTOR.md): the page's script posts the
// account's publishable key from any origin the account allows, and gets a
// network token or a device event id. No secret key, no charge.

// Page is who a collector call comes from: the publishable key (the
// X-Publishable-Key header, else the body's "key") and the page's Origin
// header ("" when none was sent).
type Page struct {
	Key    string
	Origin string
}

// collectAccount resolves the publishable key and checks the page's origin.
func (s *Service) collectAccount(p Page) (*accounts.View, *Refusal) {
	var v *accounts.View
	if strings.HasPrefix(p.Key, accounts.PrefixPublishable) && len(p.Key) > len(accounts.PrefixPublishable) {
		v = s.accounts.ByPublishableKey(p.Key)
	}
	switch {
	case v == nil && p.Key != "" && s.incomplete != nil && s.incomplete.Incomplete():
		// The key may be one of an account this node could not read (see
		// Admit): not told it does not exist.
		return nil, RefuseStorage
	case v == nil:
		return nil, &Refusal{Status: http.StatusUnauthorized, Msg: MsgPublishableKey, Hint: HintPublishableKey}
	case v.Suspended:
		return nil, refuseSuspended
	case !originAllowed(v.Origins, p.Origin):
		return nil, RefuseOrigin
	}
	return v, nil
}

// originAllowed: any origin when the account lists none; otherwise the
// request must come from a listed origin (a request without Origin — not a
// browser page — is refused too, since the list confines the key to sites).
func originAllowed(list []string, origin string) bool {
	if len(list) == 0 {
		return true
	}
	for _, o := range list {
		if origin != "" && strings.EqualFold(o, origin) {
			return true
		}
	}
	return false
}

// NetworkReport is what the collector's network call tells about the
// visitor's connection besides its address.
type NetworkReport struct {
	// Report: the browser ran the collector's checks (schema v ≥ 1).
	Report bool
	// Headers are the proxy evidence of the request's headers
	// (nettoken.Header* bits) and Infra says the caller address is one of
	// our own proxies: the transport reads both.
	Headers uint8
	Infra   bool
	// WebRTC is the browser's WebRTC status ("ok", "unsupported", "error",
	// "timeout"; anything else: not run) and the addresses it saw.
	WebRTC      string
	WebRTCAddrs []string
	WebRTCSent  bool
}

// CollectNetwork is POST /v1/collect/network: it measures the visitor's
// address and mints a network token (intel/nettoken documents the format
// and how each fact counts).
func (s *Service) CollectNetwork(c *Call, p Page, rep *NetworkReport) (token string, ref *Refusal) {
	v, ref := s.collectAccount(p)
	if ref != nil {
		return "", ref
	}
	f := nettoken.Facts{Issued: c.Now, Addr: c.Addr, Report: rep.Report, Headers: rep.Headers, Infra: rep.Infra}
	if rep.WebRTCSent {
		f.WebRTC = webrtcStatus(rep.WebRTC)
		for _, a := range rep.WebRTCAddrs {
			if ip, err := netip.ParseAddr(a); err == nil && ip.Zone() == "" {
				f.AddCandidate(ip, nettoken.IsPublic)
			}
		}
	}
	tok := s.netTokens.Sign(v.ID, &f)
	if tok == "" {
		return "", ServerError(errors.New("collect network: network tokens are not configured"))
	}
	return tok, nil
}

func webrtcStatus(s string) nettoken.WebRTC {
	switch s {
	case "ok":
		return nettoken.WebRTCOK
	case "unsupported":
		return nettoken.WebRTCUnsupported
	case "error":
		return nettoken.WebRTCError
	case "timeout":
		return nettoken.WebRTCTimeout
	}
	return nettoken.WebRTCNotRun
}

// DeviceReport is the collector's device call: its signals, decoded.
type DeviceReport struct {
	Signals *device.Signals
}

// maxEventOrigin bounds the Origin an event keeps: no real origin is longer.
const maxEventOrigin = 256

// CollectDevice is POST /v1/collect/device: it decides the device verdicts
// (intel/device), stores the event with its time, origin and address
// (fire-and-forget to actors/events) and answers the event id.
//
// The publishable key is public, so what a report may store is bounded: the
// event keeps the signals the verdicts read, cut to their bounds
// (device.Signals.Compact), never the raw body, and assessing exactly what is
// kept makes a re-assessment of the stored event agree with it; and each
// account has a daily budget of events and stored bytes
// (quota.CollectBudgetFor), past which the answer is 429 until 00:00 UTC.
func (s *Service) CollectDevice(c *Call, p Page, rep *DeviceReport) (eventID string, ref *Refusal) {
	v, ref := s.collectAccount(p)
	if ref != nil {
		return "", ref
	}
	if !s.store.Available() {
		return "", RefuseStorage
	}
	signals, err := rep.Signals.Compact()
	if err != nil || len(signals) > storage.MaxEventSignals {
		return "", &Refusal{Status: http.StatusRequestEntityTooLarge, Msg: MsgTooLarge, Hint: HintDeviceSignals}
	}
	origin := p.Origin
	if len(origin) > maxEventOrigin {
		origin = ""
	}
	// The event, assessed only once it is to be stored (a refused budget
	// costs no assessment), except where it travels with the budget's call.
	collected := func() events.Collected {
		var ipChecked, ipBlocked bool
		if nettoken.IsPublic(c.Addr) {
			cl := s.feeds.Current().Classify(c.Addr)
			ipChecked, ipBlocked = true, cl.Blocklisted
		}
		verdict := device.Assess(rep.Signals, device.Options{Key: s.visitorKey, IPChecked: ipChecked, IPBlocklisted: ipBlocked})
		return events.Collected{
			Account: v.ID, Now: c.Now, Origin: origin, Addr: c.Addr,
			Schema: uint8(min(max(rep.Signals.V, 0), 255)), Signals: signals, Verdict: &verdict,
		}
	}
	b := quota.Collect{Account: v.ID, Budget: quota.CollectBudgetFor(limitsOf(v, c.Now)), Bytes: int64(len(signals) + len(origin)), Now: c.Now}
	var budget quota.CollectResult
	var id events.EventID
	if oc, ok := s.quota.(OwnerCollector); ok {
		budget, id, err = oc.CollectEvent(b, collected())
	} else if budget, err = s.quota.Collect(b); err == nil && budget.Allowed {
		id, err = s.events.Collect(collected())
	}
	if err != nil {
		return "", storageUnavailable(err)
	}
	if !budget.Allowed {
		return "", &Refusal{Status: http.StatusTooManyRequests, Msg: MsgCollectBudget, Code: CodeCollectBudget,
			Hint: HintCollectBudget, RetryAfter: budget.RetryAfter}
	}
	return events.FormatEventID(id), nil
}
