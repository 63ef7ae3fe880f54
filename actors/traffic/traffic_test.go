package traffic

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/internal/clock"
	"github.com/fraudd/fraudd/storage"
)

func quiet() *actor.ActorSystem {
	return actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}))
}

func TestRollingWindowsAndRestart(t *testing.T) {
	fs := vfs.NewMem()
	db, err := storage.Open("d", storage.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	// The service clock, not the wall clock, decides which week is loaded:
	// without it this test failed once the wall clock passed 2026-11-26.
	at := clock.Fixed{T: now}
	c, err := New(quiet().Root, Config{Store: db, Clock: at})
	if err != nil {
		t.Fatal(err)
	}
	// 3 days ago: counts in the week only. 2 hours ago and now: today too.
	c.Record(Record{Now: now.Add(-72 * time.Hour), Threat: true})
	c.Record(Record{Now: now.Add(-2 * time.Hour), VPN: true, Threat: true})
	c.Record(Record{Now: now, DCH: true})
	c.Record(Record{Now: now.Add(-8 * 24 * time.Hour)}) // older than a week: never counted
	f, err := c.Feed(now)
	if err != nil {
		t.Fatal(err)
	}
	if f.Today.Total != 2 || f.Today.Threats != 1 || f.Today.VPN != 1 || f.Today.DCH != 1 || f.WeekTotal != 3 || f.WeekThreats != 2 {
		t.Fatalf("feed: %+v", f)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	c2, err := New(quiet().Root, Config{Store: db, Clock: at})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Stop()
	if f2, _ := c2.Feed(now); f2 != f {
		t.Fatalf("after restart: %+v, want %+v", f2, f)
	}
	// A day later only the week remembers.
	if f3, _ := c2.Feed(now.Add(25 * time.Hour)); f3.Today.Total != 0 || f3.WeekTotal != 3 {
		t.Fatalf("a day later: %+v", f3)
	}
}

// Records spread over more buckets than the tally holds are handed to the
// actor early; concurrent records are all counted, none twice.
func TestTallyHandsOffAndCountsEveryRecord(t *testing.T) {
	c, err := New(quiet().Root, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	// 3 × maxPendingBuckets distinct buckets inside the last day.
	n := 3 * maxPendingBuckets
	for i := 0; i < n; i++ {
		c.Record(Record{Now: now.Add(-time.Duration(i) * Bucket / 2), Threat: i%2 == 0})
	}
	done := make(chan struct{})
	for g := 0; g < 4; g++ {
		go func() {
			for i := 0; i < 500; i++ {
				c.Record(Record{Now: now, VPN: true})
			}
			done <- struct{}{}
		}()
	}
	for g := 0; g < 4; g++ {
		<-done
	}
	f, err := c.Feed(now)
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(n + 2000); f.Today.Total != want || f.WeekTotal != want || f.Today.VPN != 2000 || f.Today.Threats != uint64(n/2) {
		t.Fatalf("feed %+v, want %d calls, 2000 VPN, %d threats", f, want, n/2)
	}
}
