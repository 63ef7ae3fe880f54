package accounts

import (
	"bytes"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/internal/clock"
	"github.com/fraudd/fraudd/internal/secrets"
	"github.com/fraudd/fraudd/storage"
)

// oldOrigins are origins as versions before the canonical form stored them:
// a default port kept, a Unicode host kept, and one no version could read
// as an origin (a hand-edited record), which must survive as it is.
var (
	oldOrigins   = []string{"https://shop.example:443", "https://bücher.example", "http://shop.example:8080", "https://bücher_shop.example"}
	canonOrigins = []string{"https://shop.example", "https://xn--bcher-kva.example", "http://shop.example:8080", "https://bücher_shop.example"}
)

// TestStoredOriginsAreReadCanonical: an account whose origins were stored
// before they were canonicalised on input matches the Origin a browser
// sends once loaded, without the operator setting them again; the stored
// record itself is left as it was.
func TestStoredOriginsAreReadCanonical(t *testing.T) {
	clk := clock.NewOffset()
	fs := vfs.NewMem()
	s, db := start(t, fs, clk)
	c, err := s.Create(NewAccount{Email: "a@b.co", Plan: "free"})
	if err != nil {
		t.Fatal(err)
	}
	// The service stores what it is given (the admin API canonicalises
	// before): this is how an older version left the record.
	if _, err := s.Update(c.View.ID, Patch{Origins: &oldOrigins}); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	db.Close()

	if db, err = storage.Open("d", storage.Options{FS: fs}); err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}))
	s, err = Start(sys.Root, Config{DB: db, Master: secrets.FromBytes([]byte("unit")), Clock: clk,
		Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Stop(); db.Close() }()
	v := s.Get(c.View.ID)
	if v == nil {
		t.Fatal("account not loaded")
	}
	if !slices.Equal(v.Origins, canonOrigins) {
		t.Fatalf("loaded origins %q, want %q", v.Origins, canonOrigins)
	}
	if !strings.Contains(logged.String(), `origin=https://bücher_shop.example`) {
		t.Fatalf("the origin kept as stored was not logged: %q", logged.String())
	}
	stored, err := db.GetAccount(c.View.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(stored.Origins, oldOrigins) {
		t.Fatalf("loading rewrote the stored origins: %q", stored.Origins)
	}

	// Installed records (cluster mode's path) are read the same way.
	a := v.Account
	a.Origins = []string{"HTTPS://Bücher.Example:443"}
	if err := s.Install([]Records{{Account: &a, Rules: v.Rules, Pins: v.Pins}}, nil); err != nil {
		t.Fatal(err)
	}
	if got := s.Get(a.ID).Origins; !slices.Equal(got, []string{"https://xn--bcher-kva.example"}) {
		t.Fatalf("installed origins %q", got)
	}
}
