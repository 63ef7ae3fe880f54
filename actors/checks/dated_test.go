package checks

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/fraudd/fraudd/actors/events"
	"github.com/fraudd/fraudd/intel/device"
)

// evaluateAt admits a live-key caller and evaluates req at now.
func (p *realPipeline) evaluateAt(t *testing.T, now time.Time, req *EvalRequest) *Evaluation {
	t.Helper()
	p.h.reset()
	c := &Call{Addr: netip.MustParseAddr("73.0.0.1"), Now: now}
	if ref := p.Admit(c, Credential{Key: "sk_live_unit"}, AccessEvaluate); ref != nil {
		t.Fatalf("admit: %+v", ref)
	}
	ev, ref := p.Evaluate(c, req)
	if ref != nil {
		t.Fatalf("evaluate: %+v", ref)
	}
	return ev
}

// TestVirtualMachineReviewDated: SPEC 2.2 device.virtual_machine "On its own
// returns `review` (since 2026-09-29)"; the date is the request's.
func TestVirtualMachineReviewDated(t *testing.T) {
	p := newRealPipeline(t)
	for _, c := range []struct {
		now  time.Time
		want string
	}{
		{time.Date(2026, 9, 28, 23, 59, 0, 0, time.UTC), "allow"},
		{time.Date(2026, 9, 29, 0, 0, 0, 0, time.UTC), "review"},
	} {
		id, err := p.events.Collect(events.Collected{Account: p.view.ID, Now: c.now,
			Verdict: &device.Verdict{VisitorID: "vmvisitor" + c.now.Format("0102"), Complete: true, VirtualMachine: true, Checked: device.CheckVirtualMachine}})
		if err != nil {
			t.Fatal(err)
		}
		req := &EvalRequest{FingerprintEventID: events.FormatEventID(id)}
		if err := req.Normalize(); err != nil {
			t.Fatal(err)
		}
		ev := p.evaluateAt(t, c.now, req)
		b := ev.Body()
		if b.Device == nil || !b.Device.VirtualMachine || !slices.Contains(b.Reasons, "virtual_machine") {
			t.Fatalf("%v: no virtual machine device: %+v", c.now, b)
		}
		if b.Decision != c.want {
			t.Errorf("%v: a virtual machine alone decided %s, want %s", c.now, b.Decision, c.want)
		}
		ev.Release()
	}
}

// TestAccountObjectDated: SPEC 2.2 account: "Present when accountId is sent
// with a live key (since 2026-10-18)"; before, neither the object nor the
// reasons its counts add (device_many_accounts raising allow to review).
func TestAccountObjectDated(t *testing.T) {
	for _, c := range []struct {
		now     time.Time
		present bool
	}{
		{time.Date(2026, 10, 17, 23, 59, 0, 0, time.UTC), false},
		{time.Date(2026, 10, 18, 0, 0, 0, 0, time.UTC), true},
	} {
		p := newRealPipeline(t)
		id, err := p.events.Collect(events.Collected{Account: p.view.ID, Now: c.now, Verdict: &device.Verdict{VisitorID: "shared-device", Complete: true}})
		if err != nil {
			t.Fatal(err)
		}
		for i, acct := range []string{"user-1", "user-2", "user-3"} {
			req := &EvalRequest{FingerprintEventID: events.FormatEventID(id), AccountID: acct}
			if err := req.Normalize(); err != nil {
				t.Fatal(err)
			}
			ev := p.evaluateAt(t, c.now, req)
			b := ev.Body()
			if (b.Account != nil) != c.present {
				t.Errorf("%v %s: account object present=%v, want %v", c.now, acct, b.Account != nil, c.present)
			}
			if i == 2 {
				many := slices.Contains(b.Reasons, "device_many_accounts")
				if many != c.present || (b.Decision == "review") != c.present {
					t.Errorf("%v: third account on the device: decision %s reasons %v", c.now, b.Decision, b.Reasons)
				}
			}
			ev.Release()
		}
	}
}
