package checks

import (
	"github.com/fraudd/fraudd/actors/devicehist"
	"github.com/fraudd/fraudd/actors/events"
	"github.com/fraudd/fraudd/actors/quota"
)

// What an evaluation asks of the account's owner in cluster mode. The
// owner of an account holds its quota and its customer's device history
// (docs/cluster.md): an evaluation on another node sends the charge, the
// device event to resolve and the history to observe in one round trip,
// and the owner runs them in the chain's order (OwnerParts.Run). The
// single-node path never builds any of it.

// OwnerWork is what follows the charge at the owner: nil fields are not
// asked for.
type OwnerWork struct {
	Resolve *events.Resolve
	Observe *devicehist.Observation
}

// Empty reports whether the charge is all there is.
func (w OwnerWork) Empty() bool { return w.Resolve == nil && w.Observe == nil }

// OwnerResult is the owner's answer: the charge, then (when it was
// allowed and they were asked for) the event and the history.
type OwnerResult struct {
	Charge    quota.ChargeResult
	ChargeErr error
	Resolved  events.Resolved
	EventErr  error
	Facts     devicehist.Facts
	HistErr   error
}

// OwnerStep is a chained charge that carries owner work: a quota client
// that reaches the owner over the network sends both at once and answers
// OwnerDone; one that charges here calls Charged and the chain goes on
// through the local parts as on a single node.
type OwnerStep interface {
	quota.ChargeStep
	// OwnerWork is what follows the charge (Empty: nothing).
	OwnerWork() OwnerWork
	// OwnerDone answers the whole step; it must not block.
	OwnerDone(OwnerResult)
}

// OwnerParts are the owner's own parts an OwnerWork runs on.
type OwnerParts struct {
	Quota interface {
		Charge(quota.Charge) (quota.ChargeResult, error)
	}
	Events interface {
		Resolve(events.Resolve) (events.Resolved, error)
	}
	History interface {
		Observe(devicehist.Observation) (devicehist.Facts, error)
	}
}

// Run charges c and, when allowed, does w, in the chain's order and with
// its rules: a refused charge resolves no event and observes nothing; the
// event names the device the history observes; the facts fail open (an
// error is returned beside the others).
func (p OwnerParts) Run(c quota.Charge, w OwnerWork) OwnerResult {
	charge, err := p.Quota.Charge(c)
	if err != nil || !charge.Allowed {
		return OwnerResult{Charge: charge, ChargeErr: err}
	}
	r := p.Rest(w)
	r.Charge = charge
	return r
}

// Rest does w for a charge allowed elsewhere: a lease holder charged it
// from its slice of the account's allowance, and the event and the history
// still live here. The result's Charge is left zero.
func (p OwnerParts) Rest(w OwnerWork) OwnerResult {
	var r OwnerResult
	var obs devicehist.Observation
	if w.Observe != nil {
		obs = *w.Observe
	}
	if w.Resolve != nil {
		// A test-key observation's event counts no use (planFacts).
		w.Resolve.Peek = w.Resolve.Peek || obs.Test
		r.Resolved, r.EventErr = p.Events.Resolve(*w.Resolve)
		if r.EventErr == nil && r.Resolved.Found {
			obs.DeviceID, obs.Replayed = r.Resolved.Event.VisitorID, r.Resolved.Replayed
		}
	}
	if w.Observe != nil && (obs.DeviceID != "" || obs.AccountID != "") {
		r.Facts, r.HistErr = p.History.Observe(obs)
	}
	return r
}

// OwnerCollector is a quota client that stores a collected device event
// where the account's collection budget is counted, in the same call
// (cluster mode): the event then lives with the account, and an
// evaluation on any node resolves it at the owner it already calls. A
// refused budget stores nothing.
type OwnerCollector interface {
	CollectEvent(quota.Collect, events.Collected) (quota.CollectResult, events.EventID, error)
}
