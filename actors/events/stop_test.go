package events

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/storage"
)

// logRecorder is a slog.Handler that keeps every record's message and
// attributes as one line.
type logRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	b.WriteString(rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.String())
		return true
	})
	r.mu.Lock()
	r.lines = append(r.lines, b.String())
	r.mu.Unlock()
	return nil
}
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }

func (r *logRecorder) find(sub string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, l := range r.lines {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return out
}

// stuckSightingsStore holds LoadSightings of visitor "stuck" at a gate: a
// store stall that keeps a shard's handler busy past the shards' stop
// timeout.
type stuckSightingsStore struct {
	*storage.DB
	gate    chan struct{}
	entered chan struct{}
}

func (s *stuckSightingsStore) LoadSightings(visitor string, now time.Time) (storage.Sightings, bool, error) {
	if visitor == "stuck" {
		close(s.entered)
		<-s.gate
	}
	return s.DB.LoadSightings(visitor, now)
}

// TestStopAfterAStuckShard: a shard still stuck in a handler when Stop
// gives up on it (actors.StopTimeout) goes on after Stop has closed the
// group committer, and handles the flush queued behind it. That flush must
// not panic on the closed committer: its write is dropped (logged once) and
// the shard keeps the entries, as after a failed write.
func TestStopAfterAStuckShard(t *testing.T) {
	old := actors.StopTimeout
	actors.StopTimeout = 100 * time.Millisecond
	defer func() { actors.StopTimeout = old }()

	db, err := storage.Open("d", storage.Options{FS: vfs.NewMem(), SyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st := &stuckSightingsStore{DB: db, gate: make(chan struct{}), entered: make(chan struct{})}
	release := sync.OnceFunc(func() { close(st.gate) })
	defer release()
	rec := &logRecorder{}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	defer sys.Shutdown()
	c := New(sys.Root, Config{Shards: 1, Store: st, Timeout: 200 * time.Millisecond, Logger: slog.New(rec)})

	// The record may run inline on the sender's goroutine: send it from
	// one of its own.
	go c.Record(event("acc_a", "stuck", t0))
	<-st.entered
	// The flush hook's request, queued behind the stuck record (the hook
	// gives up on it after Timeout).
	flushed := make(chan struct{})
	go func() { c.flush(); close(flushed) }()
	deadline := time.Now().Add(5 * time.Second)
	for depth := 0; depth == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the flush request never reached the stuck shard's mailbox")
		}
		time.Sleep(time.Millisecond)
		actors.KindsOf(sys).Depths(func(_ string, d int) { depth += d })
	}
	<-flushed

	if err := c.Stop(); err == nil {
		t.Fatal("Stop with a stuck shard: no error; want ErrStopTimeout")
	}
	release()
	// The shard finishes the record, then handles the flush request.
	deadline = time.Now().Add(5 * time.Second)
	for len(rec.find("panic"))+len(rec.find("outlived Stop")) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the stuck shard never handled its flush request")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // a second line, if any, comes now
	if p := rec.find("panic"); len(p) > 0 {
		t.Errorf("panics after Stop: %q", p)
	}
	if l := rec.find("outlived Stop"); len(l) != 1 {
		t.Errorf("logged about the shard that outlived Stop: %q; want one line", l)
	}
}
