package rpc

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/fraudd/fraudd/actors/devicehist"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/storage"
)

// FuzzChargeRequest: whatever bytes a peer sends, decoding and checking a
// Charge never panics, and a request that passes the check converts back to
// the same message (nothing is dropped or invented between the wire and the
// actors). Protobuf decoding itself is generated; the check is ours.
func FuzzChargeRequest(f *testing.F) {
	for _, c := range []quota.Charge{capped, uncapped} {
		b, err := proto.Marshal(chargeMsg(&c, 7))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x08, 0x00})
	// A field this build does not know, inside Limits (found by the fuzzer:
	// the comparison must ignore unknown fields at every depth).
	withUnknown := chargeMsg(&capped, 7)
	withUnknown.Limits.ProtoReflect().SetUnknown([]byte{0x32, 0x01, '0'})
	b, err := proto.Marshal(withUnknown)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		var r ChargeRequest
		if proto.Unmarshal(b, &r) != nil {
			return
		}
		c, err := chargeOf(&r)
		if err != nil {
			return
		}
		back := chargeMsg(&c, r.Token)
		back.Version, back.CallId = r.Version, r.CallId // the transport's, not the charge's
		r.ProtoReflect().SetUnknown(nil)
		r.Limits.ProtoReflect().SetUnknown(nil)
		if !proto.Equal(back, &r) {
			t.Fatalf("%v converts back to %v", &r, back)
		}
	})
}

// FuzzLeaseRequest: whatever bytes a peer sends, checking a Lease request
// never panics, a request that passes converts back to the same message,
// and a reply that passes its check never lends a slice without a name.
func FuzzLeaseRequest(f *testing.F) {
	l := quota.Lease{Account: "acct_1", Holder: "b", Hourly: true, Monthly: true, Total: true, Limits: capped.Limits, For: 1e9, Want: 40,
		Report: quota.LeaseReport{Seq: 3, Used: 12}}
	b, err := proto.Marshal(leaseMsg(&l, 7, 6))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte{0x08, 0x01, 0x12, 0x01, 'a'})
	f.Fuzz(func(t *testing.T, b []byte) {
		var rep LeaseReply
		if proto.Unmarshal(b, &rep) == nil {
			if g, err := leaseGrantOf(&rep); err == nil && g.Units > 0 && g.Seq == 0 {
				t.Fatalf("%v lends %d units under no name", &rep, g.Units)
			}
		}
		var r LeaseRequest
		if proto.Unmarshal(b, &r) != nil {
			return
		}
		l, err := leaseOf(&r)
		if err != nil {
			return
		}
		if l.Want < 0 || l.For <= 0 || l.Report.Used < 0 {
			t.Fatalf("%v passed the check as %+v", &r, l)
		}
		back := leaseMsg(&l, r.Token, r.ReportToken)
		back.Version = r.Version
		r.ProtoReflect().SetUnknown(nil)
		r.Limits.ProtoReflect().SetUnknown(nil)
		if !proto.Equal(back, &r) {
			t.Fatalf("%v converts back to %v", &r, back)
		}
	})
}

// FuzzDaysReply: whatever a peer answers to Days, the check never panics,
// and what it passes has one non-negative day each from first to last.
func FuzzDaysReply(f *testing.F) {
	ok := &DaysReply{Version: version, Node: "b", Days: []*DayCount{{Day: 20000, Used: 3}, {Day: 20001, Lookups: 2}}}
	b, err := proto.Marshal(ok)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte{0x12, 0x01, 'b', 0x1a, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		var r DaysReply
		if proto.Unmarshal(b, &r) != nil {
			return
		}
		days, err := daysOf(&r, "b", 20000, 20001)
		if err != nil {
			return
		}
		for i, d := range days {
			if d.Day != uint32(20000+i) || d.Used < 0 || d.Lookups < 0 {
				t.Fatalf("%v passed as day %d: %v", &r, i, d)
			}
		}
	})
}

// FuzzResolveReply: whatever a peer answers to Resolve, converting it never
// panics, and an answer that passes is a found event with sane sightings.
func FuzzResolveReply(f *testing.F) {
	ok := &ResolveReply{Version: version, Found: true, Event: []byte("\x02\x00\x00Q,b\x8c\xafc\xad\xcf]\xfee\xab:0\x06acct_1\x81\x80\xee\x89\xd4\xd9\xaa\xf5\x18\x00\x00\x00\x02{}\x00\x00\x00\tvisitor-1\x00\x00\x00"),
		Visitor: "visitor-1", TimesSeen: 3}
	b, err := proto.Marshal(ok)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte{0x10, 0x01, 0x22, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		var r ResolveReply
		if proto.Unmarshal(b, &r) != nil {
			return
		}
		res, err := resolvedOf(&r)
		if err == nil && res.Found && (res.Sightings.TimesSeen < 0 || len(res.Sightings.Visitor) > 32) {
			t.Fatalf("%v passed as %+v", &r, res)
		}
	})
}

// FuzzDiscountRequest: whatever bytes a peer sends, checking a Discount
// never panics, and one that passes names an account and a load and takes
// at most one call, and carries what the message said.
func FuzzDiscountRequest(f *testing.F) {
	for _, r := range []*DiscountRequest{
		{Version: version, From: "a", Account: "acct_1", Month: 202611, Load: 9, Used: 1, Evaluations: 1},
		{Version: version, From: "a", Account: "acct_1", Month: 202611, Load: 9, Used: 1, Hourly: true, Bucket: 1, ChargedUnixNano: 1_700_000_000_000_000_000},
	} {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x08, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		var r DiscountRequest
		if proto.Unmarshal(b, &r) != nil {
			return
		}
		d, err := discountOf(&r)
		if err != nil {
			return
		}
		c, tot := d.Taken.Counts, d.Taken.Totals
		m := d.Taken.Month
		if d.Account == "" || len(d.Account) > maxObsAccountID || d.From == "" || d.From != r.From || d.Tag == 0 || d.Account != d.Taken.Account ||
			uint32(m) != r.Month || m%100 < 1 || m%100 > 12 || c.Used+c.Lookups > 1 || (tot.LimitHits == 1 && c.Used+c.Lookups+tot.Evaluations != 0) || c.Used != r.Used || c.Lookups != r.Lookups || tot.Evaluations != r.Evaluations || tot.LimitHits != r.LimitHits ||
			c.Used > 1 || c.Lookups > 1 || tot.Evaluations > 1 || tot.LimitHits > 1 || c.Used < 0 || c.Lookups < 0 || tot.Evaluations < 0 || tot.LimitHits < 0 ||
			d.Hourly != r.Hourly || uint32(d.Bucket) != r.Bucket || d.Bucket > quota.Test || (d.Hourly && d.At.UnixNano() != r.ChargedUnixNano) {
			t.Fatalf("%v passed as %+v", &r, d)
		}
	})
}

// stubMirrorHistory is a MirrorHistory that keeps the pushes and the
// observations it is given.
type stubMirrorHistory struct {
	applied  []devicehist.MirrorPush
	observed []devicehist.Observation
}

func (*stubMirrorHistory) Prepare(devicehist.Observation, *devicehist.Prepared) error { return nil }
func (*stubMirrorHistory) ObserveThen(devicehist.ObserveStep)                         {}
func (h *stubMirrorHistory) Observe(o devicehist.Observation) (devicehist.Facts, error) {
	h.observed = append(h.observed, o)
	return devicehist.Facts{}, nil
}
func (h *stubMirrorHistory) MirrorApply(p devicehist.MirrorPush)             { h.applied = append(h.applied, p) }
func (*stubMirrorHistory) MirrorDrop(string)                                 {}
func (*stubMirrorHistory) SetMirrorSink(func(devicehist.MirrorPush))         {}
func (*stubMirrorHistory) IsWatched(string) bool                             { return true }
func (*stubMirrorHistory) PushEvent(string, string, []byte)                  {}
func (*stubMirrorHistory) PushEventTo(string, string, uint64, []byte)        {}
func (*stubMirrorHistory) Watch(string, uint64, devicehist.MirrorKeys) error { return nil }
func (*stubMirrorHistory) Unwatch(string, uint64)                            {}
func (*stubMirrorHistory) UnwatchAll(uint64)                                 {}

// FuzzMirrorFrames: whatever an owner's Mirror frame holds, a holder
// applying it never panics, keeps only events of the account the push
// names (fresh exactly when unused: a replay the owner sends stays one),
// and hands the history only pushes of accounts it mirrors;
// whatever a holder's frame holds, the owner's checks of its watches and
// observations never panic.
func FuzzMirrorFrames(f *testing.F) {
	ev := &storage.DeviceEvent{Account: "acct_1", Created: testNow, Signals: []byte("{}"), VisitorID: "visitor-1"}
	me, err := proto.Marshal(&MirrorEvent{Id: make([]byte, storage.EventIDLen), Resolved: &ResolveReply{Version: version, Found: true, Event: storage.MarshalEvent(nil, ev)}})
	if err != nil {
		f.Fatal(err)
	}
	replay, err := proto.Marshal(&MirrorEvent{Id: append(make([]byte, storage.EventIDLen-1), 1), Resolved: &ResolveReply{Version: version, Found: true, Replayed: true, Event: storage.MarshalEvent(nil, ev)}})
	if err != nil {
		f.Fatal(err)
	}
	down, err := proto.Marshal(&MirrorDown{Version: version, Pushes: []*MirrorPush{{Customer: "acct_1", Records: [][]byte{{1, 2}}, Absent: []bool{true}, Event: me}, {Customer: "acct_1", Event: replay}, {Customer: "acct_2", Reset_: true}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(down)
	up, err := proto.Marshal(&MirrorUp{Version: version, Node: "b", Watches: []*MirrorWatch{{Customer: "acct_1", DeviceId: "d", AccountId: "u", Ip: []byte{1, 2, 3, 4}}},
		Ops: []*MirrorOp{{Customer: "acct_1", Observation: &Observation{EventId: "e", DeviceId: "d"}, UseEvent: make([]byte, storage.EventIDLen)}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(up)
	f.Fuzz(func(t *testing.T, b []byte) {
		h := &stubMirrorHistory{}
		q := &Quota{cfg: QuotaConfig{Owners: &fakeOwners{self: "b"}}, log: quietLog}
		m := &mirrors{q: q, hist: h, subs: map[string]*mirrorSub{}, events: map[mirrorEventKey]mirrorEvent{}, outWake: make(chan struct{}, 1)}
		st := &mirrorStream{m: m}
		m.subs["acct_1"] = &mirrorSub{st: st}
		var d MirrorDown
		if proto.Unmarshal(b, &d) == nil {
			for _, p := range d.GetPushes() {
				m.apply(st, p)
			}
			for _, fn := range m.out {
				fn()
			}
			for k, e := range m.events {
				if k.account != "acct_1" || e.r.Event.Account != "acct_1" || e.fresh == e.r.Replayed {
					t.Fatalf("kept %+v for %q", e, k.account)
				}
			}
			for _, p := range h.applied {
				if p.Customer != "acct_1" {
					t.Fatalf("applied a push of %q", p.Customer)
				}
			}
		}
		var u MirrorUp
		if proto.Unmarshal(b, &u) == nil {
			for _, w := range u.GetWatches() {
				mirrorKeysOf(w)
			}
			for _, op := range u.GetOps() {
				observationOf(op.GetObservation(), op.GetCustomer())
			}
		}
	})
}
