package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKilledBackupIsNotStartedOn: a backup whose writer was killed midway
// is refused by a start on it (a restore), with one line saying it did not
// finish, instead of starting an empty store. Pebble's checkpoint copies the
// WAL after the manifest, and the backup copies master-secret and
// store-stamp after the checkpoint, so a kill -9 between them leaves a
// pebble/ without its WAL, no secret and no stamp, plus the mark a backup
// writes first (backup-unfinished). Before, a start there opened the
// store as it was (here, with the account only in the WAL: empty),
// generated a new master secret and served an empty service.
func TestKilledBackupIsNotStartedOn(t *testing.T) {
	s := Start(t, bin)
	a := s.CreateAccount(t, map[string]any{"email": "killed-backup@example.com"})
	full := filepath.Join(t.TempDir(), "full")
	if r := s.Admin(t, "POST", "/admin/v1/backup", map[string]any{"dir": full}); r.Status != 200 {
		t.Fatalf("backup: %d %s", r.Status, r.Body)
	}
	if _, err := os.Stat(filepath.Join(full, "backup-unfinished")); !os.IsNotExist(err) {
		t.Fatalf("a finished backup holds backup-unfinished: %v", err)
	}
	// The directory the kill left: the finished backup's checkpoint
	// without its WAL, and the mark; restored as README says.
	data := filepath.Join(t.TempDir(), "data")
	copyTree(t, filepath.Join(full, "pebble"), filepath.Join(data, "pebble"))
	logs, _ := filepath.Glob(filepath.Join(data, "pebble", "*.log"))
	if len(logs) == 0 {
		t.Fatal("the checkpoint holds no WAL")
	}
	for _, l := range logs {
		if err := os.Remove(l); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(data, "backup-unfinished"), []byte("fraudd backup in progress\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := startFails(t, data, nil)
	if !strings.Contains(out, "backup that did not finish") || !strings.Contains(out, "Backups and restore") ||
		strings.Count(out, "level=ERROR") != 1 {
		t.Fatalf("start on a killed backup of %s: want one ERROR line saying the backup did not finish:\n%s", a.ID, out)
	}
	if _, err := os.Stat(filepath.Join(data, "master-secret")); !os.IsNotExist(err) {
		t.Fatalf("the refused start generated a master secret: %v", err)
	}
}
