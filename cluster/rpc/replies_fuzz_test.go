package rpc

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/fraudd/fraudd/actors/checks"
	"github.com/fraudd/fraudd/actors/devicehist"
	"github.com/fraudd/fraudd/actors/events"
	"github.com/fraudd/fraudd/actors/iplimit"
	"github.com/fraudd/fraudd/actors/quota"
)

// FuzzPeerMessages: the converters FuzzChargeRequest and its neighbours do
// not reach, fed whatever a peer sends: a Usage request, and the replies to
// Charge, Usage, Collect, ReportAddrs and Evaluate, and a member's part of
// the operator lists (RecentEvaluations, Deliveries, Mail). None panics;
// what passes converts back to the same message, or keeps the bounds its
// check claims.
func FuzzPeerMessages(f *testing.F) {
	for _, m := range []proto.Message{
		chargeReply(&quota.ChargeResult{Allowed: true, Capped: true, Limit: 100, Remaining: 3, Reset: 1_790_000_000}, 7),
		usageMsg(&quota.Usage{Account: "acct_1", Bucket: quota.Test, Limits: capped.Limits, Now: testNow}, 3),
		&AddrReply{Version: version, Node: "b", Sums: []*AddrSum{{Key: &AddrKey{Hi: 1, Kind: uint32(iplimit.Collect)}, StartUnixNano: 5, Others: 2}}, Locks: []*AddrLock{{Hi: 1, UntilUnixNano: testNow.UnixNano()}}},
		&EvaluateReply{Version: version, Charge: chargeReply(&quota.ChargeResult{Allowed: true}, 1), Facts: &Facts{Device: true, Visits: 3}, Resolved: &ResolveReply{Version: version}},
		&CollectReply{Version: version, Allowed: true},
		&EvaluationsReply{Version: version, Node: "b", Evaluations: []*EvaluationLine{{AtUnixNano: 2, RequestId: "r1", Decision: "block", Risk: 90, Reasons: []string{"vpn"}}, {AtUnixNano: 1, Ip: "unknown"}}},
		&DeliveriesReply{Version: version, Node: "b", Deliveries: []*DeliveryLine{{EventId: "evt_1", Event: "test", Attempt: 1, AtUnixNano: 2, StatusCode: 200}}},
		&MailReply{Version: version, Node: "b", Mail: []*MailLine{{Id: "m1", AtUnixNano: 2, Account: "acct_1", Body: "b"}, {Id: "m0", AtUnixNano: 1, Account: "acct_1"}}},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var cr ChargeReply
		if proto.Unmarshal(b, &cr) == nil {
			if res, err := chargeResultOf(&cr); err == nil {
				back := chargeReply(&res, cr.Token)
				back.Version = cr.Version
				cr.ProtoReflect().SetUnknown(nil)
				if !proto.Equal(back, &cr) {
					t.Fatalf("%v converts back to %v", &cr, back)
				}
			}
		}
		var ur UsageRequest
		if proto.Unmarshal(b, &ur) == nil {
			if u, err := usageOf(&ur); err == nil {
				back := usageMsg(&u, ur.Token)
				back.Version = ur.Version
				ur.ProtoReflect().SetUnknown(nil)
				ur.Limits.ProtoReflect().SetUnknown(nil)
				if !proto.Equal(back, &ur) {
					t.Fatalf("%v converts back to %v", &ur, back)
				}
			}
		}
		var uv UsageReply
		if proto.Unmarshal(b, &uv) == nil {
			_ = usageViewOf(&uv)
		}
		var col CollectReply
		if proto.Unmarshal(b, &col) == nil {
			if res, err := collectResultOf(&col); err == nil && res.Allowed == (res.RetryAfter > 0) {
				t.Fatalf("%v passed as %+v", &col, res)
			}
		}
		var ar AddrReply
		if proto.Unmarshal(b, &ar) == nil {
			now := testNow.UnixNano()
			if sums, locks, err := answerOf(&ar, ar.Node, now); err == nil {
				for _, s := range sums {
					if s.Others < 0 || s.Others > maxAddrN {
						t.Fatalf("%v passed a sum %+v", &ar, s)
					}
				}
				for _, l := range locks {
					if l.Until > now+int64(24*time.Hour) {
						t.Fatalf("%v passed a lock %+v", &ar, l)
					}
				}
			}
		}
		var evs EvaluationsReply
		if proto.Unmarshal(b, &evs) == nil {
			if list, err := evaluationsOf(&evs, "b", "acct_1", 2); err == nil {
				for i, e := range list {
					if len(list) > 2 || e.At.IsZero() || (i > 0 && e.At.After(list[i-1].At)) || e.Risk < 0 || e.Risk > 100 || !wordsOK(e.Reasons) || !wordsOK(e.RuleMatched) {
						t.Fatalf("%v passed as %+v", &evs, list)
					}
				}
			}
		}
		var ds DeliveriesReply
		if proto.Unmarshal(b, &ds) == nil {
			if list, err := deliveriesOf(&ds, "b", "acct_1", 2); err == nil {
				for i, d := range list {
					if len(list) > 2 || d.At.IsZero() || (i > 0 && d.At.After(list[i-1].At)) || d.Attempt < 1 || d.StatusCode < 0 || d.Duration < 0 || d.EventID == "" || len(d.URL) > maxListText {
						t.Fatalf("%v passed as %+v", &ds, list)
					}
				}
			}
		}
		var ms MailReply
		if proto.Unmarshal(b, &ms) == nil {
			for _, account := range []string{"", "acct_1"} {
				list, err := mailOf(&ms, "b", account, 2)
				if err != nil {
					continue
				}
				for i, m := range list {
					if len(list) > 2 || m.At.IsZero() || (i > 0 && m.At.After(list[i-1].At)) || (account != "" && m.Account != account) || len(m.Body) > maxListBody {
						t.Fatalf("%v passed as %+v", &ms, list)
					}
				}
			}
		}
		var er EvaluateReply
		if proto.Unmarshal(b, &er) == nil {
			var id events.EventID
			w := checks.OwnerWork{Resolve: &events.Resolve{ID: id, Account: "acct_1"}, Observe: &devicehist.Observation{Customer: "acct_1"}}
			if res, err := ownerResultOf(&er, w); err == nil && res.Charge.Allowed && res.HistErr == nil {
				f := res.Facts
				for _, n := range []int{f.History.Visits, f.History.Accounts, f.Visits24h, f.LinkedAccounts, f.DeviceAccounts24h, f.AccountDevices24h, f.IPAccounts24h, f.RelatedAccounts90d} {
					if n < 0 {
						t.Fatalf("%v passed facts %+v", &er, f)
					}
				}
			}
		}
	})
}
