package accounts

import (
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/internal/clock"
	"github.com/fraudd/fraudd/internal/secrets"
	"github.com/fraudd/fraudd/storage"
)

func start(t testing.TB, fs vfs.FS, clk clock.Clock) (*Service, *storage.DB) {
	t.Helper()
	db, err := storage.Open("d", storage.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}))
	s, err := Start(sys.Root, Config{DB: db, Master: secrets.FromBytes([]byte("unit")), Clock: clk,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return s, db
}

func TestKeysRotationAndTokens(t *testing.T) {
	clk := clock.NewOffset()
	fs := vfs.NewMem()
	s, db := start(t, fs, clk)
	c, err := s.Create(NewAccount{Email: "a@b.co", Plan: "free"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(NewAccount{Email: "A@B.CO", Plan: "free"}); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate email: %v", err)
	}
	now := clk.Now()
	if a, ok := s.Authenticate(c.LiveKey, now); !ok || a.Kind != KeyLive || a.Generation != 1 {
		t.Fatalf("live key: %+v %v", a, ok)
	}
	if _, ok := s.Authenticate(c.PublishableKey, now); ok {
		t.Fatal("a publishable key authenticated as a secret key")
	}
	if v := s.ByPublishableKey(c.PublishableKey); v == nil || v.ID != c.View.ID {
		t.Fatal("publishable key lookup")
	}
	rot, err := s.RotateLive(c.View.ID)
	if d := rot.PreviousValidUntil.Sub(now); err != nil || d < Grace-time.Second || d > Grace+time.Second {
		t.Fatalf("rotate: %+v %v", rot, err)
	}
	if a, ok := s.Authenticate(c.LiveKey, clk.Now()); !ok || a.Kind != KeyLivePrev {
		t.Fatalf("previous key in grace: %+v %v", a, ok)
	}
	if _, ok := s.ResolveToken(c.View.ID, false, 1, clk.Now()); !ok {
		t.Fatal("a token of the key in grace must work")
	}
	if _, ok := s.ResolveToken(c.View.ID, false, 2, clk.Now()); !ok {
		t.Fatal("a token of the current key must work")
	}
	clk.Advance(Grace + time.Second)
	if _, ok := s.Authenticate(c.LiveKey, clk.Now()); ok {
		t.Fatal("previous key after its grace")
	}
	if _, ok := s.ResolveToken(c.View.ID, false, 1, clk.Now()); ok {
		t.Fatal("token of an expired previous key")
	}
	test2, _ := s.RotateTest(c.View.ID)
	if _, ok := s.Authenticate(c.TestKey, clk.Now()); ok {
		t.Fatal("old test key after rotation")
	}
	if a, ok := s.Authenticate(test2, clk.Now()); !ok || a.Kind != KeyTest || a.Generation != 2 {
		t.Fatalf("new test key: %+v", a)
	}
	allow := []string{"198.51.100.0/24"}
	v, err := s.Update(c.View.ID, Patch{Allowlist: &allow})
	if err != nil || !v.Allowed(netip.MustParseAddr("198.51.100.7")) || v.Allowed(netip.MustParseAddr("192.0.2.1")) {
		t.Fatalf("allowlist: %v", err)
	}
	if _, err := s.SetRules(c.View.ID, []storage.Rule{{Signal: "vpn", Action: "block"}, {Signal: "retired_signal", Action: "block"}}); err != nil {
		t.Fatal(err)
	}
	if p := s.Get(c.View.ID).Policy; len(p.Rules) != 1 {
		t.Fatalf("a stored rule that no longer parses must be skipped, got %d rules", len(p.Rules))
	}
	sec, _ := s.RotateWebhookSecret(c.View.ID)
	if got, _ := s.WebhookSecret(s.Get(c.View.ID)); got != sec {
		t.Fatal("webhook secret round trip")
	}
	// Everything comes back from storage after a restart.
	s.Stop()
	db.Close()
	s2, _ := start(t, fs, clk)
	if a, ok := s2.Authenticate(test2, clk.Now()); !ok || a.View.Allowed(netip.MustParseAddr("192.0.2.1")) || len(a.View.Policy.Rules) != 1 {
		t.Fatalf("after restart: %+v %v", a, ok)
	}
}

// TestChangeWaitIsBounded: while the accounts actor is busy with a change
// that never finishes, the next admin change answers actors.ErrUnavailable
// within the timeout instead of hanging its request.
func TestChangeWaitIsBounded(t *testing.T) {
	db, err := storage.Open("d", storage.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}))
	s, err := Start(sys.Root, Config{DB: db, Master: secrets.FromBytes([]byte("unit")), Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	defer close(release)
	busy := make(chan struct{})
	go s.run(func() (any, error) { close(busy); <-release; return nil, nil })
	<-busy
	done := make(chan error, 1)
	go func() {
		_, err := s.Create(NewAccount{Email: "stuck@example.com", Plan: "free"})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, actors.ErrUnavailable) {
			t.Fatalf("want actors.ErrUnavailable, got %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the change waited on a stuck actor without bound")
	}
}
