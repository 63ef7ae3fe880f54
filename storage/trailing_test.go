package storage

import (
	"testing"
	"time"
)

// TestBytesPastTheLastFieldRefused: a record of a version its decoder knows
// that holds bytes past its last field is corrupt, not that version read as
// far as it goes. A new field only ever comes with a new version byte
// (codec.go), so such bytes are damage, or a build that broke that rule,
// whose field a decoder reading the prefix would silently drop, and lose
// for good when it rewrites the record. Every record's decoder is listed.
func TestBytesPastTheLastFieldRefused(t *testing.T) {
	at := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	lim := int64(5)
	records := map[string]struct {
		b   []byte
		dec func([]byte) error
	}{
		"account": {MarshalAccount(nil, &Account{ID: "acc_1", Email: "a@b.co", CreatedAt: at, HourlyLimit: &lim, Live: KeyRecord{Prefix: "sk_live_"}, Test: KeyRecord{Prefix: "sk_test_"}}),
			func(b []byte) error { _, err := UnmarshalAccount(b); return err }},
		"rules": {MarshalRules(nil, []Rule{{Signal: "vpn", Action: "block"}}), func(b []byte) error { _, err := UnmarshalRules(b); return err }},
		"pins":  {MarshalPins(nil, []Pin{{IP: "203.0.113.7/32", Action: "allow"}}), func(b []byte) error { _, err := UnmarshalPins(b); return err }},
		"month counts": {MarshalMonthCounts(nil, MonthCounts{Used: 3, Lookups: 2, Warned: 1}),
			func(b []byte) error { _, err := UnmarshalMonthCounts(b); return err }},
		"totals version 1": {MarshalTotals(nil, Totals{Evaluations: 9, LimitHits: 1}), func(b []byte) error { _, err := UnmarshalTotals(b); return err }},
		"totals version 2": {MarshalTotals(nil, Totals{Evaluations: 9, HourWarned: [2]int64{at.UnixNano(), 0}}),
			func(b []byte) error { _, err := UnmarshalTotals(b); return err }},
		"day usage": {MarshalDayUsage(nil, DayUsage{Used: 4, Lookups: 1}), func(b []byte) error { _, err := UnmarshalDayUsage(b); return err }},
		"delivery": {MarshalDelivery(nil, &Delivery{Account: "acc_1", EventID: "e", Event: "test", Attempt: 1, EventAt: at, At: at, URL: "https://h.example/x", StatusCode: 200}),
			func(b []byte) error { _, err := UnmarshalDelivery(b); return err }},
		"pending hook": {MarshalPendingHook(nil, &PendingHook{Account: "acc_1", EventID: "e", Event: "test", Attempts: 1, Due: at, EventAt: at}),
			func(b []byte) error { _, err := UnmarshalPendingHook(b); return err }},
		"mail": {MarshalMail(nil, &Mail{ID: "m", At: at, Account: "acc_1", To: "a@b.co", Kind: "k", Subject: "s", Body: "b", Status: "sent"}),
			func(b []byte) error { _, err := UnmarshalMail(b); return err }},
		"evaluation": {MarshalEvaluation(nil, &Evaluation{At: at, RequestID: "req_1", Decision: "allow", Risk: 10}),
			func(b []byte) error { _, err := UnmarshalEvaluation(b); return err }},
		"sightings": {MarshalSightings(nil, &Sightings{FirstSeen: at, LastSeen: at, TimesSeen: 2}),
			func(b []byte) error { _, err := UnmarshalSightings("v", b); return err }},
		"traffic":          {MarshalTraffic(nil, TrafficCounts{Total: 5, Threats: 1}), func(b []byte) error { _, err := UnmarshalTraffic(b); return err }},
		"health version 1": {MarshalHealth(nil, &HealthDay{Samples: 10, APIOK: 10, StorageOK: 10, AuthOK: 10, FeedsOK: 10, AllOK: 10}), func(b []byte) error { _, err := UnmarshalHealth(b); return err }},
		"health version 2": {MarshalHealth(nil, &HealthDay{Samples: 10, APIOK: 9, StorageOK: 9, AuthOK: 10, FeedsOK: 10, AllOK: 8}), func(b []byte) error { _, err := UnmarshalHealth(b); return err }},
	}
	for name, r := range records {
		if err := r.dec(r.b); err != nil {
			t.Errorf("%s: the record as written does not decode: %v", name, err)
			continue
		}
		long := append(append([]byte(nil), r.b...), 0x01)
		if err := r.dec(long); err == nil {
			t.Errorf("%s: a byte past the last field was accepted", name)
		}
	}
}
