package health

import (
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/internal/clock"
	"github.com/fraudd/fraudd/storage"
)

func quiet() *actor.ActorSystem {
	return actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}))
}

func TestUptimeAndHistory(t *testing.T) {
	db, err := storage.Open("d", storage.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	t0 := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	clk := clock.NewOffset()
	clk.Set(t0)
	var calls atomic.Int32
	m, err := New(quiet().Root, Config{DB: db, Clock: clk, Interval: time.Hour, Checks: Checks{Storage: func() error {
		if calls.Add(1) == 3 { // the second tick after the start probe
			return errors.New("disk")
		}
		return nil
	}}})
	if err != nil {
		t.Fatal(err)
	}
	// Three more probes today, one of them with the store failing.
	for i := 0; i < 3; i++ {
		m.shards.Send(0, actors.Tick{Now: t0.Add(time.Duration(i+1) * time.Minute)})
	}
	r, err := m.Report(t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	last := r.History[len(r.History)-1]
	if len(r.History) != Days || !last.Day.Equal(time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)) || last.Samples != 4 || *last.Pct != 75 || *last.APIPct != 100 {
		t.Fatalf("today: %+v (pct %v)", last, *last.Pct)
	}
	if r.History[0].Pct != nil || r.Storage.UptimePct != 75 || r.API.UptimePct != 100 || !r.Storage.OK {
		t.Fatalf("report: %+v", r)
	}
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
	// The history survives a restart.
	m2, err := New(quiet().Root, Config{DB: db, Clock: clk, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Stop()
	r2, _ := m2.Report(t0.Add(time.Hour))
	if r2.History[len(r2.History)-1].Samples != 5 {
		t.Fatalf("after restart: %+v", r2.History[len(r2.History)-1])
	}
}
