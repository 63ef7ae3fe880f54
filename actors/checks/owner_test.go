package checks

import (
	"errors"
	"testing"

	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/actors/devicehist"
	"github.com/fraudd/fraudd/actors/events"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/storage"
)

// ownerEvents and ownerHistory are an owner's parts that say what they did.
type ownerEvents struct {
	resolved int
	err      error
}

func (e *ownerEvents) Resolve(m events.Resolve) (events.Resolved, error) {
	e.resolved++
	if e.err != nil {
		return events.Resolved{}, e.err
	}
	return events.Resolved{Found: true, Event: storage.DeviceEvent{ID: m.ID, Account: m.Account, VisitorID: "visitor-7"}}, nil
}

type ownerHistory struct{ seen []devicehist.Observation }

func (h *ownerHistory) Observe(o devicehist.Observation) (devicehist.Facts, error) {
	h.seen = append(h.seen, o)
	return devicehist.Facts{Device: o.DeviceID != "", Account: o.AccountID != "", LinkedAccounts: 2, History: devicehist.History{Visits: 3}}, nil
}

// TestOwnerPartsRun: the owner runs the chain's steps in its order and
// with its rules.
func TestOwnerPartsRun(t *testing.T) {
	c := quota.Charge{Account: "acc_1", Hourly: true, Now: fixedNow}
	work := func() OwnerWork {
		return OwnerWork{Resolve: &events.Resolve{Account: "acc_1"}, Observe: &devicehist.Observation{Customer: "acc_1", AccountID: "user-1"}}
	}

	q, ev, h := &fakeQuota{}, &ownerEvents{}, &ownerHistory{}
	r := OwnerParts{Quota: q, Events: ev, History: h}.Run(c, work())
	if !r.Charge.Allowed || !r.Resolved.Found || r.Facts.LinkedAccounts != 2 || len(h.seen) != 1 || h.seen[0].DeviceID != "visitor-7" {
		t.Fatalf("allowed: %+v, observed %+v", r, h.seen)
	}

	// Refused: nothing resolved, nothing observed.
	q, ev, h = &fakeQuota{result: quota.ChargeResult{Refusal: quota.RefusedHourly}}, &ownerEvents{}, &ownerHistory{}
	if r := (OwnerParts{Quota: q, Events: ev, History: h}).Run(c, work()); r.Charge.Allowed || ev.resolved+len(h.seen) != 0 {
		t.Fatalf("refused: %+v, %d resolved, %d observed", r, ev.resolved, len(h.seen))
	}
	q.err = errors.New("store down")
	if r := (OwnerParts{Quota: q, Events: ev, History: h}).Run(c, work()); r.ChargeErr == nil || ev.resolved+len(h.seen) != 0 {
		t.Fatalf("charge error: %+v", r)
	}

	// The event failing: the history is still observed, without a device.
	ev, h = &ownerEvents{err: errors.New("events down")}, &ownerHistory{}
	r = OwnerParts{Quota: &fakeQuota{}, Events: ev, History: h}.Run(c, work())
	if r.EventErr == nil || len(h.seen) != 1 || h.seen[0].DeviceID != "" {
		t.Fatalf("event failing: %+v, observed %+v", r, h.seen)
	}
	// Neither a device nor an accountId: nothing to observe.
	w := work()
	w.Observe.AccountID = ""
	h = &ownerHistory{}
	(OwnerParts{Quota: &fakeQuota{}, Events: &ownerEvents{err: errors.New("down")}, History: h}).Run(c, w)
	if len(h.seen) != 0 {
		t.Fatalf("observed %+v with nothing to observe", h.seen)
	}
}

// remoteOwnerQuota plays a quota client whose account lives on another
// node: a chained charge with owner work is answered whole by that node's
// parts (OwnerDone); a plain one is charged.
type remoteOwnerQuota struct {
	*fakeQuota
	owner OwnerParts
	sent  int
}

func (q *remoteOwnerQuota) ChargeThen(st quota.ChargeStep) {
	if os, ok := st.(OwnerStep); ok {
		if w := os.OwnerWork(); !w.Empty() {
			q.sent++
			os.OwnerDone(q.owner.Run(*st.ChargeReq(), w))
			return
		}
	}
	st.Charged(q.Charge(*st.ChargeReq()))
}

// failingParts fail the test when the pipeline uses them.
type failingParts struct{ t *testing.T }

func (f failingParts) Collect(events.Collected) (events.EventID, error) { return events.EventID{}, nil }
func (f failingParts) Resolve(events.Resolve) (events.Resolved, error) {
	f.t.Error("the event was resolved on the evaluating node")
	return events.Resolved{}, nil
}
func (f failingParts) Peek(events.Resolve) (events.Resolved, error) { return events.Resolved{}, nil }
func (f failingParts) Observe(devicehist.Observation) (devicehist.Facts, error) {
	f.t.Error("the history was observed on the evaluating node")
	return devicehist.Facts{}, nil
}

// TestEvaluationOwnerWork: an evaluation whose account lives elsewhere
// sends its event and history with the charge, and answers with the
// owner's facts; the evaluating node's own parts are not used.
func TestEvaluationOwnerWork(t *testing.T) {
	ev, h := &ownerEvents{}, &ownerHistory{}
	q := &remoteOwnerQuota{fakeQuota: &fakeQuota{}}
	q.owner = OwnerParts{Quota: q.fakeQuota, Events: ev, History: h}
	fa := newFakeAccounts()
	s, err := New(Config{Accounts: fa, Limits: &fakeLimiter{}, Quota: q, Feeds: testFeeds(t), Events: failingParts{t}, History: failingParts{t}})
	if err != nil {
		t.Fatal(err)
	}
	var id events.EventID
	id[0] = 1
	c := &Call{Now: fixedNow, Auth: accounts.Auth{View: fa.view, Kind: accounts.KeyLive}}
	e, ref := s.Evaluate(c, &EvalRequest{FingerprintEventID: events.FormatEventID(id), AccountID: "user-1"})
	if ref != nil {
		t.Fatalf("refused: %+v", ref)
	}
	defer e.Release()
	body := e.Body()
	if q.sent != 1 || ev.resolved != 1 || len(h.seen) != 1 || h.seen[0].DeviceID != "visitor-7" || h.seen[0].AccountID != "user-1" {
		t.Fatalf("sent %d, the owner resolved %d and observed %+v", q.sent, ev.resolved, h.seen)
	}
	if body.DeviceStatus != "ok" || body.Device == nil || body.Device.LinkedAccounts == nil || *body.Device.LinkedAccounts != 2 {
		t.Fatalf("the answer lacks the owner's facts: status %q device %+v", body.DeviceStatus, body.Device)
	}
}
