package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNestedDataDirIsRefused: a data dir with a backup inside it (`cp -a
// BACKUP /var/lib/fraudd` onto an existing /var/lib/fraudd, as the README
// used to say) stops the start with one line naming the nested copy, before
// anything is written; fraudd started on the old state (here: a new empty
// store) without a word.
func TestNestedDataDirIsRefused(t *testing.T) {
	dir := dataDirWith(t, "fraudd-2026-11-22/pebble/", "fraudd-2026-11-22/store-stamp", "fraudd-2026-11-22/master-secret")
	cfg, err := parseServe([]string{"--addr", "127.0.0.1:0", "--data-dir", dir, "--admin-token", "adm_nested"}, envVars{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a start that is not refused stops at once
	err = serve(ctx, nil, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	nested := filepath.Join(dir, "fraudd-2026-11-22")
	if err == nil || !strings.Contains(err.Error(), "holds another data dir, "+nested+" (pebble/ and store-stamp)") ||
		!strings.Contains(err.Error(), "Backups and restore") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("serve on a data dir holding a backup: %v", err)
	}
	for _, f := range []string{"pebble", "store-stamp", "master-secret"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			t.Errorf("the refused start wrote %s", f)
		}
	}
}

// TestNestedDataDirNeedsBoth: only a direct subdirectory with both pebble/
// and the store-stamp file counts as a data dir: the data dir's own store,
// feeds/, an embedded etcd member, a half of one, or one deeper down do not.
func TestNestedDataDirNeedsBoth(t *testing.T) {
	for _, paths := range [][]string{
		nil,
		{"pebble/", "store-stamp", "master-secret", "feeds/", "etcd/member/"},
		{"old/pebble/"},
		{"old/store-stamp"},
		{"old/store-stamp/", "old/pebble/"},
		{"old/pebble", "old/store-stamp"},
		{"a/b/pebble/", "a/b/store-stamp"},
	} {
		if err := nestedDataDir(dataDirWith(t, paths...)); err != nil {
			t.Errorf("%q: refused: %v", paths, err)
		}
	}
	if err := nestedDataDir(dataDirWith(t, "x/pebble/", "x/store-stamp")); err == nil {
		t.Error("a data dir inside the data dir: not refused")
	}
}

// dataDirWith makes a temp dir holding paths: directories when they end in
// a slash, small files otherwise.
func dataDirWith(t *testing.T, paths ...string) string {
	dir := t.TempDir()
	for _, p := range paths {
		full := filepath.Join(dir, p)
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o700); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte("1\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
