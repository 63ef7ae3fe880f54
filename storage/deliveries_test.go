package storage

import (
	"encoding/hex"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func deliveriesDB(t *testing.T) *DB {
	t.Helper()
	db, err := Open("d", Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func deliveryIDs(ds []*Delivery) string {
	s := ""
	for _, d := range ds {
		s += fmt.Sprintf("%s/%d ", d.EventID, d.Attempt)
	}
	return s
}

func TestDeliveriesPerAccountNewestFirst(t *testing.T) {
	db := deliveriesDB(t)
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < 6; i++ {
		for _, acc := range []string{"acc_a", "acc_b", "acc_a0"} {
			d := &Delivery{Account: acc, EventID: fmt.Sprintf("e%d", i), Event: "threat.detected", Attempt: 1 + i%3,
				EventAt: base, At: base.Add(time.Duration(i) * time.Minute), StatusCode: 500}
			if err := db.PutDelivery(d); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, err := db.Deliveries("acc_a", time.Time{}, 4)
	if err != nil || deliveryIDs(got) != "e5/3 e4/2 e3/1 e2/3 " {
		t.Fatalf("newest first: %s %v", deliveryIDs(got), err)
	}
	for _, d := range got {
		if d.Account != "acc_a" {
			t.Fatalf("another account's record: %+v", d)
		}
	}
	got, _ = db.Deliveries("acc_a", base.Add(4*time.Minute), 25)
	if deliveryIDs(got) != "e5/3 e4/2 " {
		t.Fatalf("since: %s", deliveryIDs(got))
	}
	if got, _ := db.Deliveries("acc_none", time.Time{}, 25); got == nil || len(got) != 0 {
		t.Fatalf("unknown account: %v", got)
	}

	if err := db.TrimDeliveries("acc_a", 2); err != nil {
		t.Fatal(err)
	}
	got, _ = db.Deliveries("acc_a", time.Time{}, 25)
	if deliveryIDs(got) != "e5/3 e4/2 " {
		t.Fatalf("after trim: %s", deliveryIDs(got))
	}
	if got, _ := db.Deliveries("acc_a0", time.Time{}, 25); len(got) != 6 {
		t.Fatalf("trim touched a neighbour: %d", len(got))
	}
	if err := db.TrimDeliveries("acc_a", 25); err != nil {
		t.Fatal(err)
	}
	if got, _ := db.Deliveries("acc_a", time.Time{}, 25); len(got) != 2 {
		t.Fatalf("trim under the cap deleted: %d", len(got))
	}

	// Retention: one range delete per account.
	if err := db.PruneDeliveries(base.Add(3 * time.Minute)); err != nil {
		t.Fatal(err)
	}
	for acc, want := range map[string]string{"acc_a": "e5/3 e4/2 ", "acc_b": "e5/3 e4/2 e3/1 ", "acc_a0": "e5/3 e4/2 e3/1 "} {
		if got, _ := db.Deliveries(acc, time.Time{}, 25); deliveryIDs(got) != want {
			t.Errorf("%s after prune: %s", acc, deliveryIDs(got))
		}
	}
	if err := db.PruneDeliveries(base.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	for _, acc := range []string{"acc_a", "acc_b", "acc_a0"} {
		if got, _ := db.Deliveries(acc, time.Time{}, 25); len(got) != 0 {
			t.Errorf("%s after full prune: %s", acc, deliveryIDs(got))
		}
	}
	if err := db.PruneDeliveries(base.Add(time.Hour)); err != nil {
		t.Fatalf("prune of nothing: %v", err)
	}
}

func TestDeliveryFormatPinned(t *testing.T) {
	d := &Delivery{Account: "a", EventID: "e", Event: "test", Attempt: 2, At: time.Unix(1, 0).UTC(),
		Duration: 3, StatusCode: 502, Error: "x"}
	const want = "01" + "0161" + "0165" + "0474657374" + "02" + "00" + "8194ebdc03" + "03" + "00" + "f603" + "0178" + "00"
	if got := hex.EncodeToString(MarshalDelivery(nil, d)); got != want {
		t.Fatalf("delivery format changed: %s", got)
	}
	back, err := UnmarshalDelivery(MarshalDelivery(nil, d))
	if err != nil || !reflect.DeepEqual(back, d) {
		t.Fatalf("round trip: %+v %v", back, err)
	}
	if _, err := UnmarshalDelivery([]byte{9}); err == nil {
		t.Fatal("unknown version decoded")
	}
	if _, err := UnmarshalDelivery(MarshalDelivery(nil, d)[:5]); err == nil {
		t.Fatal("truncated record decoded")
	}
}

// TestDeliveryCoveredByGroupSync: a delivery record, committed without a
// sync, is made durable by the group sync loop within its interval like
// every other write-behind record, not left in the WAL buffer until some
// unrelated synced write happens to come by.
func TestDeliveryCoveredByGroupSync(t *testing.T) {
	fs := vfs.NewCrashableMem()
	db, err := Open("c", Options{FS: fs, SyncInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	if err := db.PutDelivery(&Delivery{Account: "acc_a", EventID: "e1", Event: "test", Attempt: 1, EventAt: at, At: at, StatusCode: 200}); err != nil {
		t.Fatal(err)
	}
	crashed := func() int {
		t.Helper()
		cp, err := Open("c", Options{FS: fs.CrashClone(vfs.CrashCloneCfg{})})
		if err != nil {
			t.Fatal(err)
		}
		defer cp.Close()
		got, err := cp.Deliveries("acc_a", time.Time{}, 25)
		if err != nil {
			t.Fatal(err)
		}
		return len(got)
	}
	// Polled, as in TestSyncLoopBoundsLoss: a busy machine only makes it slower.
	for deadline := time.Now().Add(2 * time.Second); crashed() != 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the group sync never made the delivery record durable")
		}
	}
}
