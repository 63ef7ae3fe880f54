package rpc

import (
	"context"
	"reflect"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/storage"
)

// warnRecorder is a quota.Notifier that keeps what it is sent.
type warnRecorder struct {
	mu sync.Mutex
	ws []quota.Warning
}

func (r *warnRecorder) Warn(w quota.Warning) {
	r.mu.Lock()
	r.ws = append(r.ws, w)
	r.mu.Unlock()
}

func (r *warnRecorder) kinds() []quota.WarnKind {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []quota.WarnKind
	for _, w := range r.ws {
		out = append(out, w.Kind)
	}
	return out
}

// TestMergeHourWarnedLatest: the hourly warning times in the members'
// totals are not counts: merged, the latest of each wins, however often a
// share is repeated, while the counters still sum per member.
func TestMergeHourWarnedLatest(t *testing.T) {
	a := Share{Node: "a", Totals: storage.Totals{Evaluations: 5, HourWarned: [2]int64{100, 0}}}
	b := Share{Node: "b", Totals: storage.Totals{Evaluations: 3, HourWarned: [2]int64{50, 70}}}
	bOlder := Share{Node: "b", Totals: storage.Totals{Evaluations: 2, HourWarned: [2]int64{40, 0}}}
	c := Share{Node: "c", Totals: storage.Totals{Evaluations: 1}} // an older member: never warned
	_, tot := Merge(a, b, bOlder, c, b)
	if want := (storage.Totals{Evaluations: 9, HourWarned: [2]int64{100, 70}}); tot != want {
		t.Fatalf("merged %+v, want %+v", tot, want)
	}
}

// TestOlderPeerShareNeverWarned: a share from a member of the build before
// the hourly warning times (its messages lack fields 9–10 of OriginShare,
// 11–12 of SharesReply) reads as never warned; the fields are added ones,
// which such a member skips as unknown.
func TestOlderPeerShareNeverWarned(t *testing.T) {
	old, err := proto.Marshal(&OriginShare{Node: "c", Account: "acct_1", Month: 202611, Used: 5, Evaluations: 9, LimitHits: 2})
	if err != nil {
		t.Fatal(err)
	}
	var m OriginShare
	if err := proto.Unmarshal(old, &m); err != nil {
		t.Fatal(err)
	}
	s, err := originShareOf(&m)
	if err != nil || s.Totals != (storage.Totals{Evaluations: 9, LimitHits: 2}) {
		t.Fatalf("older member's share: %+v %v", s, err)
	}
	var r SharesReply
	if err := proto.Unmarshal([]byte{0x08, 0x01, 0x12, 0x01, 0x62, 0x38, 0x04}, &r); err != nil || r.GetHourWarnedEighty() != 0 || r.GetHourWarnedCap() != 0 || r.Evaluations != 4 {
		t.Fatalf("older member's reply: %v %v", &r, err)
	}
}

// TestHourlyWarningTimeTravelsWithTheShares: hourly warnings are decided by
// the account's owner. When the account's shard moves, the new owner loads
// the members' shares, and the time the previous owner sent a warning
// travels in its share (SharesReply): the new owner does not send it again
// within 24 hours, and sends the one not sent yet.
func TestHourlyWarningTimeTravelsWithTheShares(t *testing.T) {
	ids := []string{"a", "b", "c"}
	nodes := settledNodes(t, nil, ids...)
	a, b := nodes[0], nodes[1]
	account := accountOwnedBy("a", ids)
	month := storage.MonthOf(testNow)
	// b owned the account an hour ago and sent its 80% warning then.
	sent := testNow.Add(-time.Hour).UnixNano()
	if err := b.db.ApplyUsage([]storage.UsageDelta{{Account: account, Month: month,
		Totals: storage.Totals{Evaluations: 8, HourWarned: [2]int64{sent, 0}}}}); err != nil {
		t.Fatal(err)
	}
	ch := quota.Charge{Account: account, Kind: quota.Evaluate, Hourly: true, Total: true, Now: testNow,
		Limits: quota.LimitsFor(quota.PlanCustom, limit(10), nil, testNow, testNow)}
	for range 10 {
		if res, err := a.q.Charge(ch); err != nil || !res.Allowed {
			t.Fatalf("charge: %+v %v", res, err)
		}
	}
	if got, want := a.warns.kinds(), []quota.WarnKind{quota.WarnHourlyCap}; !reflect.DeepEqual(got, want) {
		t.Fatalf("the new owner sent %v, want %v (b sent the 80%% one an hour ago)", got, want)
	}
	// a's share now holds the cap's time, b's the 80% one's; a member
	// asked for the account's shares answers both.
	eventually(t, "a's cap warning stored", func() bool {
		_, tot, err := a.db.LoadUsage(account, month)
		return err == nil && tot.HourWarned == [2]int64{0, testNow.UnixNano()}
	})
	shares, missing := b.q.Shares(context.Background(), account, month, 0)
	if len(missing) != 0 {
		t.Fatalf("missing %v", missing)
	}
	_, own, err := b.db.LoadUsage(account, month)
	if err != nil {
		t.Fatal(err)
	}
	_, tot := Merge(append(shares, Share{Node: "b", Totals: own})...)
	if tot.HourWarned != [2]int64{sent, testNow.UnixNano()} || tot.Evaluations != 18 {
		t.Fatalf("merged totals %+v", tot)
	}
}
