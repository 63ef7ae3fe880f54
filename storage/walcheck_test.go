package storage

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// walStore writes n synced records and crashes, leaving them in the WAL
// only.
func walStore(t *testing.T, n int) (vfs.FS, string) {
	t.Helper()
	mem := vfs.NewCrashableMem()
	db, err := Open("d", Options{FS: mem})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := db.PutRules(fmt.Sprintf("acc_%02d", i), []Rule{{Signal: "vpn", Action: "block"}}); err != nil {
			t.Fatal(err)
		}
	}
	fs := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	_ = db.Close()
	names, _ := fs.List("d")
	wal := ""
	for _, n := range names {
		if strings.HasSuffix(n, ".log") && "d/"+n > wal {
			wal = "d/" + n
		}
	}
	if wal == "" {
		t.Fatalf("no WAL among %v", names)
	}
	return fs, wal
}

func countRules(t *testing.T, db *DB, n int) int {
	t.Helper()
	found := 0
	for i := range n {
		if r, err := db.GetRules(fmt.Sprintf("acc_%02d", i)); err == nil && len(r) == 1 {
			found++
		}
	}
	return found
}

// TestCorruptWALRecordIsLogged: a flipped byte in the newest WAL makes
// Pebble drop every record after it without a word; the store says so.
func TestCorruptWALRecordIsLogged(t *testing.T) {
	fs, wal := walStore(t, 20)
	b := readFile(t, fs, wal)
	b[len(b)/3] ^= 0x10
	writeFile(t, fs, wal, b)
	var logs bytes.Buffer
	db, err := Open("d", Options{FS: fs, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got := countRules(t, db, 20); got == 20 {
		t.Fatalf("all records replayed; the flip did not reach a record")
	}
	out := logs.String()
	if !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "WAL has a corrupt record") || !strings.Contains(out, wal) {
		t.Fatalf("dropped WAL records not logged at ERROR with the file:\n%s", out)
	}
}

// TestCleanOrTornWALIsNotReported: a WAL as a crash leaves it, whole or
// with its last write cut short, drops nothing acknowledged: no alarm.
func TestCleanOrTornWALIsNotReported(t *testing.T) {
	for _, c := range []struct {
		name string
		cut  func([]byte) []byte
		want int
	}{
		{"whole", func(b []byte) []byte { return b }, 20},
		{"torn tail", func(b []byte) []byte { return b[:len(b)-10] }, 19},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs, wal := walStore(t, 20)
			writeFile(t, fs, wal, c.cut(readFile(t, fs, wal)))
			var logs bytes.Buffer
			db, err := Open("d", Options{FS: fs, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if got := countRules(t, db, 20); got != c.want {
				t.Fatalf("%d records replayed, want %d", got, c.want)
			}
			if strings.Contains(logs.String(), "WAL has a corrupt record") {
				t.Fatalf("false alarm:\n%s", logs.String())
			}
		})
	}
}
