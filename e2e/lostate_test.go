package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// startFails runs `fraudd serve` on dir and expects it to exit non-zero
// before listening; it returns the log.
func startFails(t *testing.T, dir string, env []string, extra ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := append([]string{"serve", "--addr", "127.0.0.1:0", "--data-dir", dir, "--test-clock", "--admin-token", AdminToken}, extra...)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("fraudd started and exited 0, want a refusal:\n%s", out)
	}
	if ctx.Err() != nil {
		t.Fatalf("fraudd did not exit within 60 s (it should refuse to start):\n%s", out)
	}
	if strings.Contains(string(out), "fraudd listening") {
		t.Fatalf("fraudd listened before refusing:\n%s", out)
	}
	if strings.Contains(string(out), "goroutine ") {
		t.Fatalf("refusal printed a stack trace:\n%s", out)
	}
	return string(out)
}

// TestLostManifestMarkerRefusesToStart: a restore that dropped Pebble's
// 0-byte marker.manifest.* files must not start an empty store over the old
// tables (Pebble would delete them); putting the marker back brings
// everything back.
func TestLostManifestMarkerRefusesToStart(t *testing.T) {
	dir := t.TempDir()
	s := StartServer(t, &Server{Bin: bin, DataDir: dir})
	a := s.CreateAccount(t, map[string]any{"email": "marker@example.com"})
	if err := s.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	store := filepath.Join(dir, "pebble")
	markers, _ := filepath.Glob(filepath.Join(store, "marker.manifest.*"))
	if len(markers) == 0 {
		t.Fatalf("no manifest marker in %s", store)
	}
	aside := t.TempDir()
	for _, m := range markers {
		if err := os.Rename(m, filepath.Join(aside, filepath.Base(m))); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := os.ReadDir(store)

	out := startFails(t, dir, []string{"FRAUDD_SECRET=e2e-master-secret"})
	if !strings.Contains(out, "no manifest marker") || !strings.Contains(out, store) {
		t.Fatalf("refusal does not name the problem and the store:\n%s", out)
	}
	if n := strings.Count(out, "level=ERROR"); n != 1 {
		t.Fatalf("want one error line, got %d:\n%s", n, out)
	}
	after, _ := os.ReadDir(store)
	if len(after) < len(before) {
		t.Fatalf("refused start removed files: %d before, %d after", len(before), len(after))
	}

	for _, m := range markers {
		if err := os.Rename(filepath.Join(aside, filepath.Base(m)), m); err != nil {
			t.Fatal(err)
		}
	}
	s.start()
	if r := s.Admin(t, "GET", "/admin/v1/accounts/"+a.ID, nil); r.Status != 200 {
		t.Fatalf("account lost after restoring the marker: %d %s", r.Status, r.Body)
	}
	if r := s.Do(t, Req{Path: "/v1/usage", Bearer: a.LiveKey}); r.Status != 200 {
		t.Fatalf("live key lost after restoring the marker: %d %s", r.Status, r.Body)
	}
}

// TestLostMasterSecretRefusesToStart: a data dir whose master-secret file is
// gone, or a different --secret, must not start with a fresh secret (every
// key would answer 401 while status said operational).
func TestLostMasterSecretRefusesToStart(t *testing.T) {
	dir := t.TempDir()
	s := StartServer(t, &Server{Bin: bin, DataDir: dir, Bare: true})
	tok, _ := os.ReadFile(filepath.Join(dir, "admin-token"))
	r := s.Do(t, Req{Method: "POST", Path: "/admin/v1/accounts", Bearer: strings.TrimSpace(string(tok)), Body: map[string]any{"email": "secret@example.com"}})
	if r.Status != 201 && r.Status != 200 {
		t.Fatalf("create account: %d %s", r.Status, r.Body)
	}
	live := r.JSON(t)["live_key"].(string)
	if err := s.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	secretPath := filepath.Join(dir, "master-secret")
	orig, err := os.ReadFile(secretPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(secretPath); err != nil {
		t.Fatal(err)
	}
	out := startFails(t, dir, nil)
	if !strings.Contains(out, "master secret "+secretPath+" is missing") {
		t.Fatalf("refusal does not say the secret is missing:\n%s", out)
	}
	if _, err := os.Stat(secretPath); err == nil {
		t.Fatal("a refused start wrote a new master-secret")
	}

	// A different secret, from the environment or the file, is refused too.
	out = startFails(t, dir, []string{"FRAUDD_SECRET=not-the-original"})
	if !strings.Contains(out, "is not the one the store") || !strings.Contains(out, "--secret/FRAUDD_SECRET") {
		t.Fatalf("refusal does not say the secret differs:\n%s", out)
	}
	if err := os.WriteFile(secretPath, []byte("0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out = startFails(t, dir, nil)
	if !strings.Contains(out, "is not the one the store") || !strings.Contains(out, secretPath) {
		t.Fatalf("refusal does not name the secret file:\n%s", out)
	}

	// The original secret brings every key back.
	if err := os.WriteFile(secretPath, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	s.start()
	if r := s.Do(t, Req{Path: "/v1/usage", Bearer: live}); r.Status != 200 {
		t.Fatalf("live key with the restored secret: %d %s", r.Status, r.Body)
	}
}

// TestLostStoreRefusesToStart: a data dir that was started before (its
// master-secret is there) whose pebble directory is gone or emptied must not
// come up as a new service with an empty store under the old secret.
func TestLostStoreRefusesToStart(t *testing.T) {
	dir := t.TempDir()
	s := StartServer(t, &Server{Bin: bin, DataDir: dir, Bare: true})
	if err := s.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	store := filepath.Join(dir, "pebble")
	if err := os.RemoveAll(store); err != nil {
		t.Fatal(err)
	}
	out := startFails(t, dir, nil)
	if !strings.Contains(out, "the store "+store+" is missing or empty") || !strings.Contains(out, "restore the data dir from a backup") {
		t.Fatalf("refusal does not say the store is lost:\n%s", out)
	}
	if _, err := os.Stat(store); err == nil {
		t.Fatal("a refused start created a new store")
	}
	// An emptied directory is refused the same way.
	if err := os.Mkdir(store, 0o700); err != nil {
		t.Fatal(err)
	}
	if out := startFails(t, dir, nil); !strings.Contains(out, "is missing or empty") {
		t.Fatalf("an empty store directory was not refused:\n%s", out)
	}
}

// TestLostStoreWithSecretFromEnvRefusesToStart: with the master secret
// given by FRAUDD_SECRET there is no master-secret file to mark an earlier
// start; the store's stamp file marks it, and a lost store is refused.
func TestLostStoreWithSecretFromEnvRefusesToStart(t *testing.T) {
	dir := t.TempDir()
	env := []string{"FRAUDD_SECRET=e2e-lost-store-secret"}
	s := StartServer(t, &Server{Bin: bin, DataDir: dir, Bare: true, Env: env})
	if err := s.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "master-secret")); err == nil {
		t.Fatal("a master-secret file was written though the secret came from the environment")
	}
	if err := os.RemoveAll(filepath.Join(dir, "pebble")); err != nil {
		t.Fatal(err)
	}
	out := startFails(t, dir, env)
	if !strings.Contains(out, "is missing or empty but "+filepath.Join(dir, "store-stamp")+" says it was written") {
		t.Fatalf("refusal does not say the store is lost:\n%s", out)
	}
}

// TestBackupWithoutWALRefusesToStart: a backup restored without its WAL
// (a copy tool that skipped *.log) lost every record acknowledged since the
// store's last flush; its start is refused, where Pebble alone would open
// it without them.
func TestBackupWithoutWALRefusesToStart(t *testing.T) {
	data := t.TempDir()
	s := StartServer(t, &Server{Bin: bin, DataDir: data, Bare: true})
	tok := readToken(t, data)
	if r := s.Do(t, Req{Method: "POST", Path: "/admin/v1/accounts", Bearer: tok, Body: map[string]any{"email": "wal@example.com"}}); r.Status != 201 {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	bk := filepath.Join(t.TempDir(), "bk")
	if r := s.Do(t, Req{Method: "POST", Path: "/admin/v1/backup", Bearer: tok, Body: map[string]any{"dir": bk}}); r.Status != 200 || !strings.Contains(string(r.Body), "store-stamp") {
		t.Fatalf("backup: %d %s", r.Status, r.Body)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	logs, _ := filepath.Glob(filepath.Join(bk, "pebble", "*.log"))
	if len(logs) == 0 {
		t.Fatal("the backup has no WAL to lose")
	}
	for _, l := range logs {
		if err := os.Remove(l); err != nil {
			t.Fatal(err)
		}
	}
	out := startFails(t, bk, nil)
	if !strings.Contains(out, "store is older than its stamp file") {
		t.Fatalf("refusal does not say the store lost writes:\n%s", out)
	}
}

// TestBackupWithWALCutShortRefusesToStart: a restore whose copy of the
// backup's WAL was cut short (an interrupted cp) started on what was left:
// Pebble read the cut as a torn tail, and the counted calls after it were
// gone without a word. The backup lists its files as a clean stop does, so
// the start is refused naming the file.
func TestBackupWithWALCutShortRefusesToStart(t *testing.T) {
	data := t.TempDir()
	s := StartServer(t, &Server{Bin: bin, DataDir: data, Bare: true})
	tok := readToken(t, data)
	r := s.Do(t, Req{Method: "POST", Path: "/admin/v1/accounts", Bearer: tok, Body: map[string]any{"email": "cut-backup@example.com", "plan": "starter"}})
	if r.Status != 201 {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	live := r.JSON(t)["live_key"].(string)
	for i := range 40 {
		if r := s.Do(t, Req{Path: fmt.Sprintf("/v1/lookup/185.220.101.%d", i+1), Bearer: live}); r.Status != 200 {
			t.Fatalf("lookup %d: %d %s", i, r.Status, r.Body)
		}
	}
	bk := filepath.Join(t.TempDir(), "bk")
	if r := s.Do(t, Req{Method: "POST", Path: "/admin/v1/backup", Bearer: tok, Body: map[string]any{"dir": bk}}); r.Status != 200 {
		t.Fatalf("backup: %d %s", r.Status, r.Body)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	logs, _ := filepath.Glob(filepath.Join(bk, "pebble", "*.log"))
	if len(logs) == 0 {
		t.Fatal("the backup has no WAL")
	}
	w := logs[len(logs)-1]
	st, err := os.Stat(w)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(w, st.Size()*3/4); err != nil {
		t.Fatal(err)
	}
	out := startFails(t, bk, nil)
	if !strings.Contains(out, "is not as it was closed: "+filepath.Base(w)) {
		t.Fatalf("refusal does not name the WAL cut short:\n%s", out)
	}
}

// TestOfflineBackupKeepsALostStoreLost: `fraudd backup` with no server
// running, on a data dir whose store was emptied, refuses and writes
// nothing there, so the next start still refuses.
func TestOfflineBackupKeepsALostStoreLost(t *testing.T) {
	dir := t.TempDir()
	s := StartServer(t, &Server{Bin: bin, DataDir: dir, Bare: true})
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	store := filepath.Join(dir, "pebble")
	if err := os.RemoveAll(store); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(store, 0o700); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "backup", "--data-dir", dir, "--url", "http://127.0.0.1:1", filepath.Join(t.TempDir(), "bk")).CombinedOutput()
	if err == nil {
		t.Fatalf("backup of a lost store succeeded:\n%s", out)
	}
	if names, _ := os.ReadDir(store); len(names) != 0 {
		t.Fatalf("the backup wrote %d files into the lost store", len(names))
	}
	if out := startFails(t, dir, nil); !strings.Contains(out, "is missing or empty") {
		t.Fatalf("the start after the backup was not refused:\n%s", out)
	}
}

// TestStoppedStoreCutShortRefusesToStart: a stopped store copied
// incompletely (its MANIFEST cut short, as by an interrupted copy) is
// refused before Pebble reads it; Pebble alone took the cut for the end of
// the manifest and opened without the tables the lost edits added.
func TestStoppedStoreCutShortRefusesToStart(t *testing.T) {
	dir := t.TempDir()
	s := StartServer(t, &Server{Bin: bin, DataDir: dir})
	s.CreateAccount(t, map[string]any{"email": "cut@example.com"})
	if err := s.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	manifests, _ := filepath.Glob(filepath.Join(dir, "pebble", "MANIFEST-*"))
	if len(manifests) == 0 {
		t.Fatal("no MANIFEST")
	}
	m := manifests[len(manifests)-1]
	st, err := os.Stat(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(m, st.Size()/2); err != nil {
		t.Fatal(err)
	}
	out := startFails(t, dir, []string{"FRAUDD_SECRET=e2e-master-secret"})
	if !strings.Contains(out, "is not as it was closed: "+filepath.Base(m)) {
		t.Fatalf("refusal does not name the file cut short:\n%s", out)
	}
}

// TestBackupCopiedOverTheDataDirRefusesToStart: a backup copied onto the
// data directory it came from (cp -a BACKUP/. DATA/, which README warns
// against) leaves the old store's newer WALs beside the backup's files. The
// start replayed them over the backup's tables: a store that is neither the
// backup nor the one that stopped. The backup's stamp lists its files, so a
// WAL it does not list is refused, naming it.
func TestBackupCopiedOverTheDataDirRefusesToStart(t *testing.T) {
	data := t.TempDir()
	s := StartServer(t, &Server{Bin: bin, DataDir: data, Bare: true})
	tok := readToken(t, data)
	r := s.Do(t, Req{Method: "POST", Path: "/admin/v1/accounts", Bearer: tok, Body: map[string]any{"email": "overlay@example.com", "plan": "starter"}})
	if r.Status != 201 {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	live := r.JSON(t)["live_key"].(string)
	lookups := func(n int) {
		for i := range n {
			if r := s.Do(t, Req{Path: fmt.Sprintf("/v1/lookup/185.220.101.%d", i+1), Bearer: live}); r.Status != 200 {
				t.Fatalf("lookup %d: %d %s", i, r.Status, r.Body)
			}
		}
	}
	lookups(5)
	bk := filepath.Join(t.TempDir(), "bk")
	if r := s.Do(t, Req{Method: "POST", Path: "/admin/v1/backup", Bearer: tok, Body: map[string]any{"dir": bk}}); r.Status != 200 {
		t.Fatalf("backup: %d %s", r.Status, r.Body)
	}
	lookups(30)
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	var stray []string
	olds, _ := filepath.Glob(filepath.Join(data, "pebble", "*.log"))
	for _, l := range olds {
		if _, err := os.Stat(filepath.Join(bk, "pebble", filepath.Base(l))); os.IsNotExist(err) {
			stray = append(stray, filepath.Base(l))
		}
	}
	if len(stray) == 0 {
		t.Fatal("the stopped store has no WAL the backup lacks: nothing would mix")
	}
	copyFiles(t, bk, data, os.O_TRUNC) // cp -a BACKUP/. DATA/
	out := startFails(t, data, nil)
	if !strings.Contains(out, "does not list") || !strings.Contains(out, stray[0]) {
		t.Fatalf("refusal does not name the stray WAL %v:\n%s", stray, out)
	}
}
