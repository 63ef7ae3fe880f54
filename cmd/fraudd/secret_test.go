package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/internal/secrets"
	"github.com/fraudd/fraudd/storage"
)

// TestSecretIsTrimmed: --secret/FRAUDD_SECRET is read as the master-secret
// file is, surrounding whitespace trimmed, so the file's content given as
// the variable (a Kubernetes secret mounted from the file keeps its
// newline) opens the store the file opened. Before, "hex\n" was another
// secret and the start was refused as "not the one the store was written
// with", and a value of only whitespace became a new store's secret.
func TestSecretIsTrimmed(t *testing.T) {
	for _, c := range []struct {
		env  envVars
		args []string
	}{
		{env: envVars{"FRAUDD_SECRET": "s3cret\n"}},
		{env: envVars{"FRAUDD_SECRET": " \ts3cret \r\n"}},
		{args: []string{"--secret", "s3cret\n"}},
		{args: []string{"--secret=  s3cret"}},
	} {
		cfg, err := parseServe(c.args, c.env)
		if err != nil || cfg.secret != "s3cret" {
			t.Errorf("serve %q %q: err %v; want the secret trimmed", c.env, c.args, err)
		}
	}
	if cfg, err := parseServe(nil, envVars{"FRAUDD_SECRET": ""}); err != nil || cfg.secret != "" {
		t.Errorf("FRAUDD_SECRET empty: err %v; want the default (the file)", err)
	}
	for _, c := range []struct {
		env  envVars
		args []string
		want string
	}{
		{env: envVars{"FRAUDD_SECRET": "  \n"}, want: "FRAUDD_SECRET is not valid (only whitespace)"},
		{args: []string{"--secret", " "}, want: "--secret is not valid (only whitespace)"},
	} {
		_, err := parseServe(c.args, c.env)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("serve %q %q: %v; want one line with %q", c.env, c.args, err, c.want)
		}
	}

	// The store a master-secret file opened ("hex\n", read trimmed) opens
	// with that file's content as FRAUDD_SECRET.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "master-secret"), []byte("0123abcd\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := storage.Open("d", storage.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	fileCfg := &serveConfig{dataDir: dir}
	if _, err := loadMaster(fileCfg, log, db); err != nil {
		t.Fatalf("first start from the file: %v", err)
	}
	envCfg, err := parseServe([]string{"--data-dir", dir}, envVars{"FRAUDD_SECRET": "0123abcd\n"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loadMaster(envCfg, log, db); err != nil {
		t.Errorf("FRAUDD_SECRET holding the file's content with its newline: %v", err)
	}
}

// TestSecretUntrimmedStoreStillOpens: a store an earlier build first
// started with FRAUDD_SECRET ending in a newline was written under the
// newline; the same value still opens it (not refused after an upgrade),
// and another value is still refused.
func TestSecretUntrimmedStoreStillOpens(t *testing.T) {
	db, err := storage.Open("d", storage.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.VerifyKeyCheck(secrets.FromBytes([]byte("old-secret\n")).KeyCheck()); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg, err := parseServe([]string{"--data-dir", t.TempDir()}, envVars{"FRAUDD_SECRET": "old-secret\n"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := loadMaster(cfg, log, db)
	if err != nil {
		t.Fatalf("store written under the untrimmed secret: %v", err)
	}
	if string(m.KeyCheck()) != string(secrets.FromBytes([]byte("old-secret\n")).KeyCheck()) {
		t.Error("opened with another secret than the store's")
	}
	cfg, err = parseServe([]string{"--data-dir", t.TempDir()}, envVars{"FRAUDD_SECRET": "other\n"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loadMaster(cfg, log, db); err == nil || !strings.Contains(err.Error(), "is not the one the store") {
		t.Errorf("another secret: %v; want refused", err)
	}
}
