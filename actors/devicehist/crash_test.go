package devicehist

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestAcknowledgedHistorySurvivesACrash: per-customer device history is
// written behind the answer and synced within storage's group sync
// interval. Once that bound has passed, a crash (a clone of the disk that
// keeps only what was synced, plus a random part of the rest) loses no
// acknowledged visit or account link: the next observation of each device
// after the restart counts on from what was answered before.
func TestAcknowledgedHistorySurvivesACrash(t *testing.T) {
	mem := vfs.NewCrashableMem()
	db := openDBWith(t, mem, 20*time.Millisecond)
	defer db.Close()
	c := newClient(t, Config{Shards: 4, Store: db})

	type ack struct{ visits, linked int }
	acked := map[string]ack{}
	at := t0
	for round := range 3 {
		for d := range 5 {
			dev := fmt.Sprintf("dev-%d", d)
			f := observe(t, c, Observation{Customer: "acc_1", EventID: fmt.Sprintf("ev-%d-%d", d, round), DeviceID: dev,
				AccountID: fmt.Sprintf("user-%d", round), IP: ip1, Now: at})
			if f.History.Visits != round+1 {
				t.Fatalf("%s round %d: %d visits", dev, round, f.History.Visits)
			}
			acked[dev] = ack{f.History.Visits, f.LinkedAccounts}
			at = at.Add(time.Minute)
		}
	}

	rng := rand.New(rand.NewPCG(3, 3))
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		missing := func() string {
			db2 := openDB(t, mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 30, RNG: rng}))
			defer db2.Close()
			c2 := newClient(t, Config{Shards: 4, Store: db2})
			defer c2.Stop()
			for dev, a := range acked {
				f, err := c2.Observe(Observation{Customer: "acc_1", EventID: "after-" + dev, DeviceID: dev, AccountID: "user-0", IP: ip1, Now: at})
				if err != nil {
					t.Fatal(err)
				}
				if f.History.Visits != a.visits+1 || f.LinkedAccounts != a.linked {
					return fmt.Sprintf("%s: %d visits and %d linked accounts after the crash, want %d and %d", dev, f.History.Visits, f.LinkedAccounts, a.visits+1, a.linked)
				}
			}
			return ""
		}()
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("acknowledged history not durable 5 s after the answers: %s", missing)
		}
	}
}

// TestTakenRecordsStayGoneAfterACrash: records Take returned travel to
// another node, which merges them; a crash of this node afterwards (a
// clone of the disk that keeps only what was synced) must not bring them
// back, or the node would send them again when it returns and they would
// count twice. The group sync never runs in this test (an hour's
// interval): Take itself makes its deletes durable.
func TestTakenRecordsStayGoneAfterACrash(t *testing.T) {
	mem := vfs.NewCrashableMem()
	db := openDBWith(t, mem, time.Hour)
	defer db.Close()
	c := newClient(t, Config{Shards: 4, Store: db})
	for d := range 5 {
		observe(t, c, Observation{Customer: "acc_1", EventID: fmt.Sprint("ev", d), DeviceID: fmt.Sprint("dev-", d), AccountID: "user", IP: ip1, Now: t0})
	}
	if err := db.Sync(); err != nil { // the observations are durable
		t.Fatal(err)
	}
	if recs := take(t, c, all, t0); len(recs) != 5+1+1 {
		t.Fatalf("took %d records, want 5 devices, 1 account, 1 address", len(recs))
	}

	db2 := openDB(t, mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0}))
	defer db2.Close()
	c2 := newClient(t, Config{Shards: 4, Store: db2})
	if recs := take(t, c2, all, t0); len(recs) != 0 {
		t.Fatalf("after a crash the node holds %d of the records it took again: %v", len(recs), normalized(recs))
	}
}
