package events

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/storage"
)

// TestAcknowledgedSightingsSurviveACrash: device events and sightings are
// written behind the answer and synced within storage's group sync
// interval. Once that bound has passed, a crash (a clone of the disk that
// keeps only what was synced, plus a random part of the rest) loses no
// acknowledged event, use or times_seen.
func TestAcknowledgedSightingsSurviveACrash(t *testing.T) {
	const bound = 20 * time.Millisecond
	mem := vfs.NewCrashableMem()
	db, err := storage.Open("d", storage.Options{FS: mem, SyncInterval: bound})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	c := New(sys.Root, Config{Shards: 4, Store: db})
	defer c.Stop()

	type seen struct {
		ids   []EventID
		times int64
	}
	acked := map[string]*seen{}
	at := t0
	for round := range 3 {
		for v := range 6 {
			visitor := fmt.Sprintf("visitor-%d", v)
			e := event("acc_a", visitor, at)
			c.Record(e)
			r, err := c.Resolve(Resolve{ID: e.ID, Account: "acc_a", Now: at})
			if err != nil || !r.Found || r.Sightings.TimesSeen != int64(round+1) {
				t.Fatalf("resolve %s round %d: %v %+v", visitor, round, err, r)
			}
			if acked[visitor] == nil {
				acked[visitor] = &seen{}
			}
			acked[visitor].ids = append(acked[visitor].ids, e.ID)
			acked[visitor].times = r.Sightings.TimesSeen
			at = at.Add(time.Minute)
		}
	}

	// The bound is a sync interval, not a promise to a busy scheduler: give
	// it up to 5 s of wall time before calling the writes lost.
	rng := rand.New(rand.NewPCG(9, 9))
	var missing string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(bound) {
		missing = crashAndFind(t, mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 30, RNG: rng}), at, func(db *storage.DB) string {
			for visitor, w := range acked {
				h, ok, err := db.LoadSightings(visitor, at)
				if err != nil || !ok || h.TimesSeen != w.times {
					return fmt.Sprintf("sightings of %s: %+v %v %v, want times_seen %d", visitor, h, ok, err, w.times)
				}
				for _, id := range w.ids {
					if e, err := db.GetEvent(id); err != nil || e.Uses != 1 {
						return fmt.Sprintf("event %s of %s: %+v %v", FormatEventID(id), visitor, e, err)
					}
				}
			}
			return ""
		})
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("acknowledged sightings not durable 5 s after the answers: %s", missing)
		}
	}
}

// crashAndFind opens a crash clone and reports what check finds missing.
func crashAndFind(t *testing.T, fs vfs.FS, now time.Time, check func(*storage.DB) string) string {
	t.Helper()
	db, err := storage.Open("d", storage.Options{FS: fs})
	if err != nil {
		t.Fatalf("open after crash: %v", err)
	}
	defer db.Close()
	return check(db)
}
