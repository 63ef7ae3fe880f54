package storage

import (
	"encoding/hex"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestTrafficBuckets(t *testing.T) {
	db, err := Open("d", Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	var bs []TrafficBucket
	for i := 0; i < 5; i++ {
		bs = append(bs, TrafficBucket{Start: t0.Add(time.Duration(i) * time.Hour), Counts: TrafficCounts{Total: uint64(i + 1), Threats: 1}})
	}
	if err := db.PutTraffic(bs, t0.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	// Rewriting with a cut-off drops the two oldest.
	if err := db.PutTraffic(bs[4:], t0.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	got, err := db.Traffic(t0)
	if err != nil || len(got) != 3 || !got[0].Start.Equal(t0.Add(2*time.Hour)) || got[2].Counts.Total != 5 {
		t.Fatalf("traffic: %+v %v", got, err)
	}
	if h := hex.EncodeToString(MarshalTraffic(nil, TrafficCounts{Total: 300, Threats: 2, VPN: 1})); h != "01ac0202010000" {
		t.Fatalf("traffic format changed: %s", h)
	}
}
