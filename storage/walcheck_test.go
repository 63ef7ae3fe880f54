package storage

import (
	"bytes"
	"errors"
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

// TestCorruptWALRecordRefusesToOpen: a flipped byte in a middle record of
// the newest WAL would make Pebble drop every record after it without a
// word, and its open would then delete the WAL. The store refuses to open
// before Pebble touches anything, naming the file, the offset and the two
// ways on; the files stay as they were, and a second start refuses again.
func TestCorruptWALRecordRefusesToOpen(t *testing.T) {
	fs, wal := walStore(t, 20)
	b := readFile(t, fs, wal)
	b[len(b)/2] ^= 0x10
	writeFile(t, fs, wal, bytes.Clone(b)) // MemFS mangles a written buffer in race builds
	before, _ := fs.List("d")
	for range 2 {
		db, err := Open("d", Options{FS: fs})
		if err == nil {
			_ = db.Close()
			t.Fatal("a WAL with intact records after a corrupt one opened")
		}
		if !errors.Is(err, ErrWALCorrupt) || !strings.Contains(err.Error(), wal) || !strings.Contains(err.Error(), "truncate -s ") ||
			strings.Contains(err.Error(), "\n") {
			t.Fatalf("refusal does not name the damage, the file and what to do in one line: %v", err)
		}
		t.Log(err)
		if !bytes.Equal(readFile(t, fs, wal), b) {
			t.Fatal("the refused open changed the WAL")
		}
		if after, _ := fs.List("d"); len(after) != len(before) {
			t.Fatalf("the refused open changed the store's files: %v, then %v", before, after)
		}
	}
}

// TestUnwrittenWALPageIsATornTail: a power loss can leave a page of the
// WAL's unsynced part unwritten (zeros in a preallocated file) with later
// pages written; the records after it were never synced, so the store
// opens with those before it, as after a torn tail, with a warning.
func TestUnwrittenWALPageIsATornTail(t *testing.T) {
	fs, wal := walStore(t, 600)
	b := readFile(t, fs, wal)
	if len(b) < 4*walPage {
		t.Fatalf("WAL of %d bytes: too short for the test", len(b))
	}
	hole := (len(b) / 2) / walPage * walPage
	clear(b[hole : hole+walPage])
	writeFile(t, fs, wal, bytes.Clone(b)) // MemFS mangles a written buffer in race builds
	var logs bytes.Buffer
	db, err := Open("d", Options{FS: fs, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatalf("a WAL with an unwritten page refused: %v", err)
	}
	defer db.Close()
	if n := countRules(t, db, 600); n == 0 || n == 600 {
		t.Errorf("%d of 600 records after the hole's replay; want those before it", n)
	}
	if !strings.Contains(logs.String(), "unwritten page") || strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("want one warning about the unwritten page and no error:\n%s", logs.String())
	}
}

// TestCorruptWALRecordCutAccepted: cutting the WAL at the offset the
// refusal names (its truncate command) accepts the loss: the store opens
// with the records before the damage, and says nothing more.
func TestCorruptWALRecordCutAccepted(t *testing.T) {
	fs, wal := walStore(t, 20)
	b := readFile(t, fs, wal)
	b[len(b)/2] ^= 0x10
	writeFile(t, fs, wal, bytes.Clone(b)) // MemFS mangles a written buffer in race builds
	_, err := Open("d", Options{FS: fs})
	if !errors.Is(err, ErrWALCorrupt) {
		t.Fatalf("open: %v, want ErrWALCorrupt", err)
	}
	var off int
	if _, serr := fmt.Sscanf(err.Error()[strings.Index(err.Error(), "truncate -s "):], "truncate -s %d ", &off); serr != nil || off <= 0 || off >= len(b) {
		t.Fatalf("no offset to cut at in %v (%v)", err, serr)
	}
	writeFile(t, fs, wal, b[:off])
	var logs bytes.Buffer
	db, err := Open("d", Options{FS: fs, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatalf("open after the cut: %v", err)
	}
	defer db.Close()
	if got := countRules(t, db, 20); got == 0 || got == 20 {
		t.Fatalf("%d of 20 records after the cut, want those before the damage", got)
	}
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("an error after the loss was accepted:\n%s", logs.String())
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
			if strings.Contains(logs.String(), "level=ERROR") {
				t.Fatalf("false alarm:\n%s", logs.String())
			}
		})
	}
}
