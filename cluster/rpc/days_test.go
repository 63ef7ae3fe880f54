package rpc

import (
	"testing"

	"github.com/fraudd/fraudd/storage"
)

// TestDailyUsageSumsMembers: each member stored the calls it charged per
// day; the daily usage read through any member is their sum.
func TestDailyUsageSumsMembers(t *testing.T) {
	ids := []string{"a", "b", "c"}
	nodes := settledNodes(t, nil, ids...)
	account := accountOwnedBy("a", ids)
	today := storage.DayOf(testNow)
	for i, n := range nodes {
		err := n.db.ApplyUsage([]storage.UsageDelta{
			{Account: account, Month: storage.MonthOf(testNow), Day: today, Counts: storage.MonthCounts{Used: int64(i + 1), Lookups: 10}},
			{Account: account, Month: storage.MonthOf(testNow), Day: today - 1, Counts: storage.MonthCounts{Used: 100}},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	days, err := nodes[1].local.Daily(account, testNow, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(days) != 3 || days[0].Used != 0 || days[1].Used != 300 || days[2].Used != 6 || days[2].Lookups != 30 {
		t.Fatalf("daily usage through b: %+v; want 0, 300, 6 (30 lookups)", days)
	}
}
