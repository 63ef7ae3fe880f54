package e2e

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCorruptTableStopsStartWithOneLine: a flipped byte in a table of a
// stopped server's store (in a data block the start reads, or in the
// table's metadata) makes the next start exit non-zero with one error line
// naming the file, not a Go stack trace.
func TestCorruptTableStopsStartWithOneLine(t *testing.T) {
	for _, c := range []struct {
		name string
		at   func(size int) int
	}{
		{"data block", func(int) int { return 40 }},
		{"metadata", func(size int) int { return size - 60 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			s := StartServer(t, &Server{Bin: bin, DataDir: dir})
			s.CreateAccount(t, map[string]any{"email": "corrupt@example.com"})
			if err := s.Stop(); err != nil {
				t.Fatalf("stop: %v", err)
			}
			ssts, _ := filepath.Glob(filepath.Join(dir, "pebble", "*.sst"))
			if len(ssts) == 0 {
				t.Fatal("no table after a clean stop")
			}
			sst := ssts[len(ssts)-1]
			b, err := os.ReadFile(sst)
			if err != nil {
				t.Fatal(err)
			}
			b[c.at(len(b))] ^= 0xff
			if err := os.WriteFile(sst, b, 0o600); err != nil {
				t.Fatal(err)
			}
			out := startFails(t, dir, []string{"FRAUDD_SECRET=e2e-master-secret"})
			if strings.Contains(out, "panic") {
				t.Fatalf("start panicked:\n%s", out)
			}
			var errs []string
			for _, l := range strings.Split(out, "\n") {
				if strings.Contains(l, "level=ERROR") {
					errs = append(errs, l)
				}
			}
			if len(errs) != 1 || !strings.Contains(errs[0], "corrupt") || !strings.Contains(errs[0], "file="+sst) {
				t.Fatalf("want one error line naming %s as corrupt, got %d:\n%s", sst, len(errs), out)
			}
		})
	}
}

// TestDataDirTightened: a data dir that already existed with loose modes
// is reported at WARN and tightened; everything under it ends 0700 for
// directories and 0600 for files, Pebble's files and the secrets included.
func TestDataDirTightened(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(filepath.Join(dir, "feeds"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "feeds", "old.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := StartServer(t, &Server{Bin: bin, DataDir: dir, Bare: true})
	if !strings.Contains(s.Logs(), `level=WARN msg="data dir was readable or writable by group or others`) {
		t.Fatalf("no WARN about the loose data dir:\n%s", s.Logs())
	}
	if err := s.Stop(); err != nil { // a clean stop writes a table
		t.Fatalf("stop: %v", err)
	}
	files := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		} else {
			files++
		}
		if got := info.Mode().Perm(); got != want {
			t.Errorf("%s: mode %04o, want %04o", path, got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"master-secret", "admin-token"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	if ssts, _ := filepath.Glob(filepath.Join(dir, "pebble", "*.sst")); len(ssts) == 0 || files < 5 {
		t.Fatalf("too few files to check (%d, tables %v)", files, ssts)
	}
}
