package webhook

import "github.com/fraudd/fraudd/storage"

// flagBits maps the payload's boolean details to their stored bits.
func flagBits(d *Details) storage.HookFlags {
	var f storage.HookFlags
	for _, b := range [...]struct {
		on  bool
		bit storage.HookFlags
	}{
		{d.VPN, storage.HookVPN}, {d.Proxied, storage.HookProxied}, {d.Tor, storage.HookTor}, {d.DCH, storage.HookDCH},
		{d.Bot, storage.HookBot}, {d.Tampering, storage.HookTampering}, {d.Antidetect, storage.HookAntidetect},
		{d.VirtualMachine, storage.HookVirtualMachine}, {d.PrivacyRelay, storage.HookPrivacyRelay},
	} {
		if b.on {
			f |= b.bit
		}
	}
	return f
}

// pendingOf is the stored form of account's event e: what it is, how many
// attempts it had and when the next may start.
func pendingOf(account string, e *event) *storage.PendingHook {
	d := &e.ev.Details
	return &storage.PendingHook{Account: account, EventID: e.id, Event: e.kind, Attempts: e.attempts, Due: e.due,
		EventAt: e.ev.At, IP: e.ev.IP, ThreatType: e.ev.ThreatType, Country: d.Country, Flags: flagBits(d),
		Decision: d.Decision, RuleMatched: d.RuleMatched, ExceptionMatched: d.ExceptionMatched}
}

// eventOf rebuilds a queued event from its stored form; its payload is the
// same bytes as before (Payload is a function of kind, id and event).
func eventOf(p *storage.PendingHook) *event {
	f := p.Flags
	ev := &Event{Account: p.Account, At: p.EventAt, IP: p.IP, ThreatType: p.ThreatType, Details: Details{
		Country: p.Country, VPN: f&storage.HookVPN != 0, Proxied: f&storage.HookProxied != 0, Tor: f&storage.HookTor != 0,
		DCH: f&storage.HookDCH != 0, Bot: f&storage.HookBot != 0, Tampering: f&storage.HookTampering != 0,
		Antidetect: f&storage.HookAntidetect != 0, VirtualMachine: f&storage.HookVirtualMachine != 0,
		PrivacyRelay: f&storage.HookPrivacyRelay != 0, Decision: p.Decision,
		RuleMatched: p.RuleMatched, ExceptionMatched: p.ExceptionMatched,
	}}
	return &event{kind: p.Event, id: p.EventID, ev: ev, body: Payload(p.Event, p.EventID, ev), attempts: p.Attempts, due: p.Due}
}
