package storage

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// stampedDir is a data directory's layout: the store and its stamp file.
type stampedDir struct{ root string }

func (s stampedDir) store() string { return filepath.Join(s.root, "pebble") }
func (s stampedDir) file() string  { return filepath.Join(s.root, StampFileName) }

func (s stampedDir) open(t *testing.T) (*DB, error) {
	t.Helper()
	return Open(s.store(), Options{StampFile: s.file(), StampEvery: time.Hour})
}

func (s stampedDir) mustOpen(t *testing.T) *DB {
	t.Helper()
	db, err := s.open(t)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func stampOf(t *testing.T, path string) uint64 {
	t.Helper()
	n, ok, err := ReadStampFile(vfs.Default, path)
	if err != nil || !ok {
		t.Fatalf("stamp file %s: %d %v %v", path, n, ok, err)
	}
	return n
}

func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o700)
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(dst)
		if err != nil {
			return err
		}
		defer out.Close()
		_, err = io.Copy(out, in)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// backupStamp gives a backup the stamp as internal/backup does: the
// counter alone, read before the checkpoint.
func backupStamp(t *testing.T, from, to stampedDir) {
	t.Helper()
	if err := WriteStampFile(vfs.Default, to.file(), stampOf(t, from.file())); err != nil {
		t.Fatal(err)
	}
}

// TestStampRestarts: every open bumps the stamp, and a store closed and
// opened again is never behind it.
func TestStampRestarts(t *testing.T) {
	d := stampedDir{t.TempDir()}
	var last uint64
	for i := 1; i <= 3; i++ {
		db := d.mustOpen(t)
		got := stampOf(t, d.file())
		if got <= last {
			t.Fatalf("open %d: stamp %d after %d", i, got, last)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if closed := stampOf(t, d.file()); closed <= got {
			t.Fatalf("close %d: stamp %d after %d", i, closed, got)
		}
		last = got
	}
}

// TestStampLostStore: a store that is gone, or emptied, while its stamp file
// is there is refused, not started empty.
func TestStampLostStore(t *testing.T) {
	d := stampedDir{t.TempDir()}
	db := d.mustOpen(t)
	if err := db.PutRules("acc_00", []Rule{{Signal: "vpn", Action: "block"}}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(d.store()); err != nil {
		t.Fatal(err)
	}
	if _, err := d.open(t); !errors.Is(err, ErrStoreLost) {
		t.Fatalf("missing store: %v, want ErrStoreLost", err)
	}
	if err := os.Mkdir(d.store(), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := d.open(t); !errors.Is(err, ErrStoreLost) {
		t.Fatalf("empty store: %v, want ErrStoreLost", err)
	}
	if names, _ := os.ReadDir(d.store()); len(names) != 0 {
		t.Fatalf("the refused open wrote %d files into the lost store", len(names))
	}
}

// TestStampWALLost: a copy of the store (a backup) that lost its WAL, where
// every record since the last flush lived, is refused: the newest stamp
// was in that WAL too. Unstamped, Pebble opens it holding none of them.
func TestStampWALLost(t *testing.T) {
	d := stampedDir{t.TempDir()}
	db := d.mustOpen(t)
	for i := range 20 {
		if err := db.PutRules(fmt.Sprintf("acc_%02d", i), []Rule{{Signal: "vpn", Action: "block"}}); err != nil {
			t.Fatal(err)
		}
	}
	bk := stampedDir{t.TempDir()}
	backupStamp(t, d, bk)
	if err := db.Checkpoint(bk.store()); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	logs, _ := filepath.Glob(filepath.Join(bk.store(), "*.log"))
	if len(logs) == 0 {
		t.Fatal("the checkpoint has no WAL to lose")
	}
	for _, l := range logs {
		if err := os.Remove(l); err != nil {
			t.Fatal(err)
		}
	}
	// Refused at every start: a refused start must not move the store's
	// stamp up to its file's.
	for start := 1; start <= 2; start++ {
		if db, err := bk.open(t); !errors.Is(err, ErrStoreBehind) {
			if err == nil {
				t.Errorf("holds %d of 20 records", countRules(t, db, 20))
				_ = db.Close()
			}
			t.Fatalf("start %d of the store without its WAL: %v, want ErrStoreBehind", start, err)
		}
	}
	// The backup as taken opens, with every record.
	_ = os.RemoveAll(bk.store())
	db = d.mustOpen(t)
	backupStamp(t, d, bk)
	if err := db.Checkpoint(bk.store()); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	r := bk.mustOpen(t)
	defer r.Close()
	if got := countRules(t, r, 20); got != 20 {
		t.Fatalf("the whole backup holds %d of 20 records", got)
	}
}

// TestStampOlderCopyRefused: an older copy of the store put back under a
// newer stamp file is refused; removing the file accepts it.
func TestStampOlderCopyRefused(t *testing.T) {
	d := stampedDir{t.TempDir()}
	db := d.mustOpen(t)
	_ = db.Close()
	old := filepath.Join(t.TempDir(), "old")
	copyTree(t, d.store(), old)
	db = d.mustOpen(t)
	if err := db.PutRules("acc_00", []Rule{{Signal: "vpn", Action: "block"}}); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	_ = os.RemoveAll(d.store())
	copyTree(t, old, d.store())
	_, err := d.open(t)
	if !errors.Is(err, ErrStoreBehind) || !strings.Contains(err.Error(), "remove "+d.file()) {
		t.Fatalf("older copy: %v, want ErrStoreBehind naming the way out", err)
	}
	if err := os.Remove(d.file()); err != nil {
		t.Fatal(err)
	}
	db = d.mustOpen(t)
	_ = db.Close()
}

// TestStampFileDamaged: a stamp file that does not read as one stops the
// open: the store cannot be vouched for.
func TestStampFileDamaged(t *testing.T) {
	d := stampedDir{t.TempDir()}
	db := d.mustOpen(t)
	_ = db.Close()
	for _, body := range []string{"", "fraudd store stamp 7", "fraudd store stamp x\n", "fraudd store stamp 0\n", "garbage\n"} {
		if err := os.WriteFile(d.file(), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := d.open(t); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("stamp file %q: %v, want ErrCorrupt", body, err)
		}
	}
}

// TestStampBumpsWhileOpen: an open store moves its stamp on every
// StampEvery, so the newest stamp rides in the newest WAL.
func TestStampBumpsWhileOpen(t *testing.T) {
	d := stampedDir{t.TempDir()}
	db, err := Open(d.store(), Options{StampFile: d.file(), StampEvery: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	deadline := time.Now().Add(10 * time.Second)
	for stampOf(t, d.file()) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("stamp still %d", stampOf(t, d.file()))
		}
		time.Sleep(5 * time.Millisecond)
	}
	have, err := db.storeStamp()
	if err != nil || have < stampOf(t, d.file()) {
		t.Fatalf("store stamp %d (%v) behind its file's %d", have, err, stampOf(t, d.file()))
	}
}

// TestMustExist: a tool that reads a store never creates one.
func TestMustExist(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pebble")
	if _, err := Open(dir, Options{MustExist: true}); !errors.Is(err, ErrNoStore) {
		t.Fatalf("absent: %v", err)
	}
	if names, _ := os.ReadDir(dir); len(names) != 0 {
		t.Fatalf("wrote %d files", len(names))
	}
}

// FuzzParseStamp: any stamp file's bytes read without panicking; what reads
// writes back as the same stamp.
func FuzzParseStamp(f *testing.F) {
	f.Add([]byte("fraudd store stamp 12\n"))
	f.Add([]byte("fraudd store stamp 18446744073709551615\n"))
	f.Add([]byte("fraudd store stamp 3\nfile MANIFEST-000001 558\nfile 000005.sst 812\n"))
	f.Add([]byte("fraudd store stamp 3\nfile a/b 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := parseStamp(b)
		if err != nil {
			return
		}
		back, err := parseStamp(st.encode())
		if st.n == 0 || err != nil || !reflect.DeepEqual(back, st) {
			t.Fatalf("%q read as %+v, written back read as %+v (%v)", b, st, back, err)
		}
	})
}

// TestStampManifestCutShort: a copy of a cleanly closed store whose MANIFEST
// lost its tail (a copy tool cut it short) would drop the tables its last
// edits added; cut anywhere, it is refused before Pebble reads it, as not the
// store that was closed. Pebble alone opened such a copy holding the records
// of the first flushes only.
func TestStampManifestCutShort(t *testing.T) {
	d := stampedDir{t.TempDir()}
	db := d.mustOpen(t)
	for round := range 6 {
		for i := range 10 {
			if err := db.PutRules(fmt.Sprintf("acc_%d_%02d", round, i), []Rule{{Signal: "vpn", Action: "block"}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.h.Load().db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	manifests, _ := filepath.Glob(filepath.Join(d.store(), "MANIFEST-*"))
	if len(manifests) == 0 {
		t.Fatal("no MANIFEST")
	}
	name := filepath.Base(manifests[len(manifests)-1])
	st, err := os.Stat(filepath.Join(d.store(), name))
	if err != nil {
		t.Fatal(err)
	}
	for cut := int64(1); cut < st.Size(); cut += max(1, st.Size()/60) {
		c := stampedDir{t.TempDir()}
		copyTree(t, d.root, c.root)
		if err := os.Truncate(filepath.Join(c.store(), name), cut); err != nil {
			t.Fatal(err)
		}
		db, err := c.open(t)
		if err == nil {
			got := countRules(t, db, 0)
			for round := range 6 {
				for i := range 10 {
					if r, err := db.GetRules(fmt.Sprintf("acc_%d_%02d", round, i)); err == nil && len(r) == 1 {
						got++
					}
				}
			}
			_ = db.Close()
			if got != 60 {
				t.Fatalf("cut at %d of %d bytes: opened holding %d of 60 records", cut, st.Size(), got)
			}
			continue
		}
		if !errors.Is(err, ErrStoreBehind) {
			t.Fatalf("cut at %d of %d bytes: %v, want ErrStoreBehind", cut, st.Size(), err)
		}
	}
}

// TestStampBackupCopiedOverItsStore: a copy of a closed store put back over
// the store it came from, after that store was opened and written again,
// leaves the newer store's WALs and its newer manifest marker beside the
// copy's files. Pebble took the newer marker (the restore silently did not
// happen) or replayed the newer WALs over the copy's tables; the start is
// refused, naming the stray file.
func TestStampBackupCopiedOverItsStore(t *testing.T) {
	d := stampedDir{t.TempDir()}
	db := d.mustOpen(t)
	if err := db.PutRules("acc_before", []Rule{{Signal: "vpn", Action: "block"}}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	bk := stampedDir{t.TempDir()}
	copyTree(t, d.root, bk.root)
	for round := range 2 {
		db = d.mustOpen(t)
		if err := db.PutRules(fmt.Sprintf("acc_after_%d", round), []Rule{{Signal: "tor", Action: "block"}}); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	copyTree(t, bk.root, d.root)
	db, err := d.open(t)
	if err == nil {
		_, errAfter := db.GetRules("acc_after_1")
		_ = db.Close()
		t.Fatalf("a store mixed with its copy opened (a later record readable: %v)", errAfter == nil)
	}
	if !errors.Is(err, ErrStoreMixed) {
		t.Fatalf("err = %v, want ErrStoreMixed", err)
	}
	// The copy alone, in an empty directory, opens and holds what it held.
	r := stampedDir{t.TempDir()}
	copyTree(t, bk.root, r.root)
	db = r.mustOpen(t)
	defer db.Close()
	if rules, err := db.GetRules("acc_before"); err != nil || len(rules) != 1 {
		t.Fatalf("the copy restored alone: %v %v", rules, err)
	}
}
