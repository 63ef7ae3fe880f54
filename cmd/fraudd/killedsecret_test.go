package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fraudd/fraudd/storage"
)

// serveOnce starts serve on dataDir with a cancelled context (a start that
// is not refused stops at once) and returns its error.
func serveOnce(t *testing.T, dataDir string, args ...string) error {
	t.Helper()
	cfg, err := parseServe(append([]string{"--addr", "127.0.0.1:0", "--data-dir", dataDir}, args...), envVars{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return serve(ctx, nil, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// TestKilledFirstStartEmptySecretFiles: a first start killed between
// creating admin-token or master-secret (O_EXCL) and writing it leaves the
// file empty; every later start stopped on "… is empty", a refusal no
// operator could act on without reading the code. Nothing depends on an
// empty file (a token that was never usable, a secret the store was never
// written with): the next start writes it anew.
func TestKilledFirstStartEmptySecretFiles(t *testing.T) {
	t.Run("admin-token", func(t *testing.T) {
		dir := dataDirWith(t)
		if err := os.WriteFile(filepath.Join(dir, "admin-token"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := serveOnce(t, dir, "--secret", "s3cret"); err != nil {
			t.Fatalf("start after a first start killed while writing admin-token: %v", err)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "admin-token")); !strings.HasPrefix(string(b), "adm_") {
			t.Fatalf("admin-token now holds %q", b)
		}
	})
	t.Run("master-secret", func(t *testing.T) {
		dir := dataDirWith(t)
		// What the killed start left: its store opened and stamped, no
		// key check written yet, the secret file created but empty.
		db, err := storage.Open(filepath.Join(dir, "pebble"), storage.Options{StampFile: filepath.Join(dir, storage.StampFileName)})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		secret := filepath.Join(dir, "master-secret")
		if err := os.WriteFile(secret, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := serveOnce(t, dir, "--admin-token", "adm_killed"); err != nil {
			t.Fatalf("start after a first start killed while writing master-secret: %v", err)
		}
		b, _ := os.ReadFile(secret)
		if len(strings.TrimSpace(string(b))) != 64 {
			t.Fatalf("master-secret now holds %q", b)
		}
		// Emptied once the store was written with it, it is refused.
		if err := os.WriteFile(secret, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := serveOnce(t, dir, "--admin-token", "adm_killed"); err == nil || !strings.Contains(err.Error(), "is empty") {
			t.Fatalf("start on an emptied secret of a written store: %v", err)
		}
	})
}
