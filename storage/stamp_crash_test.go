package storage

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// snapFS takes a crash clone of a crashable MemFS before each mutating
// operation, while armed.
type snapFS struct {
	vfs.FS
	mem   *vfs.MemFS
	mu    sync.Mutex
	armed bool
	kill  []*vfs.MemFS // kill -9: everything written so far kept
	power []*vfs.MemFS // power loss: only what was synced
	ops   []string
}

func (s *snapFS) snap(op string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.armed {
		return
	}
	s.kill = append(s.kill, s.mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: rand.New(rand.NewPCG(1, 2))}))
	s.power = append(s.power, s.mem.CrashClone(vfs.CrashCloneCfg{}))
	s.ops = append(s.ops, op)
}

type snapFile struct {
	vfs.File
	s    *snapFS
	name string
}

func (f snapFile) Sync() error     { f.s.snap("sync " + f.name); return f.File.Sync() }
func (f snapFile) SyncData() error { f.s.snap("syncdata " + f.name); return f.File.SyncData() }
func (f snapFile) Close() error    { f.s.snap("close " + f.name); return f.File.Close() }

func (s *snapFS) Create(n string, c vfs.DiskWriteCategory) (vfs.File, error) {
	s.snap("create " + n)
	f, err := s.FS.Create(n, c)
	if err != nil {
		return nil, err
	}
	return snapFile{f, s, n}, nil
}
func (s *snapFS) Remove(n string) error    { s.snap("remove " + n); return s.FS.Remove(n) }
func (s *snapFS) RemoveAll(n string) error { s.snap("removeall " + n); return s.FS.RemoveAll(n) }
func (s *snapFS) Rename(a, b string) error { s.snap("rename " + a + " " + b); return s.FS.Rename(a, b) }
func (s *snapFS) Link(a, b string) error   { s.snap("link " + a + " " + b); return s.FS.Link(a, b) }
func (s *snapFS) ReuseForWrite(a, b string, c vfs.DiskWriteCategory) (vfs.File, error) {
	s.snap("reuse " + a + " " + b)
	f, err := s.FS.ReuseForWrite(a, b, c)
	if err != nil {
		return nil, err
	}
	return snapFile{f, s, b}, nil
}

func crashOpts(fs vfs.FS) Options {
	return Options{FS: fs, StampFile: "/data/" + StampFileName, StampEvery: time.Hour,
		CacheBytes: 8 << 20, MemTableBytes: 1 << 20, Logger: quietLog()}
}

// TestStampCrashAnywhere: a crash (kill -9, or a power loss that keeps only
// what was synced) at any file operation of three open/write/close cycles
// leaves a store that starts: the stamp never refuses a healthy store.
func TestStampCrashAnywhere(t *testing.T) {
	mem := vfs.NewCrashableMem()
	_ = mem.MkdirAll("/data", 0o700)
	s := &snapFS{FS: mem, mem: mem}
	s.armed = true
	for cycle := range 3 {
		db, err := Open("/data/pebble", crashOpts(s))
		if err != nil {
			t.Fatalf("cycle %d: %v", cycle, err)
		}
		for i := range 5 {
			if err := db.PutRules(fmt.Sprintf("acc_%d_%d", cycle, i), []Rule{{Signal: "vpn", Action: "block"}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	s.armed = false
	t.Logf("%d crash points", len(s.ops))
	fails := 0
	for i, op := range s.ops {
		for kind, fs := range map[string]*vfs.MemFS{"kill-9": s.kill[i], "power-loss": s.power[i]} {
			db, err := Open("/data/pebble", crashOpts(fs))
			if err == nil {
				_ = db.Close()
				continue
			}
			if errors.Is(err, ErrStoreBehind) || errors.Is(err, ErrStoreLost) || errors.Is(err, ErrCorrupt) {
				fails++
				if fails <= 8 {
					t.Errorf("%s at op %d (%s): %v", kind, i, op, err)
				}
			}
		}
	}
	if fails > 0 {
		t.Errorf("%d crash points refuse a healthy store", fails)
	}
}

// TestStampBehindRefusedEveryStart: a store behind its stamp file is refused at
// every start, not only the first (the failed open must not heal it).
func TestStampBehindRefusedEveryStart(t *testing.T) {
	d := stampedDir{t.TempDir()}
	db := d.mustOpen(t)
	_ = db.Close()
	old := t.TempDir() + "/old"
	copyTree(t, d.store(), old)
	db = d.mustOpen(t)
	_ = db.PutRules("acc_00", []Rule{{Signal: "vpn", Action: "block"}})
	_ = db.Close()
	_ = os.RemoveAll(d.store())
	copyTree(t, old, d.store())
	if _, err := d.open(t); !errors.Is(err, ErrStoreBehind) {
		t.Fatalf("first start: %v, want ErrStoreBehind", err)
	}
	db, err := d.open(t)
	if err == nil {
		_ = db.Close()
	}
	t.Logf("second start: %v", err)
	if !errors.Is(err, ErrStoreBehind) {
		t.Fatalf("second start: %v, want ErrStoreBehind again (the refused start accepted the older copy)", err)
	}
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestStampRollbackThenForward: a clean stop, one run of the previous
// release (which opens the store without a stamp file, as Open without
// StampFile does), then this release again: the store is healthy and
// its stamp is not behind, yet the start is refused.
func TestStampRollbackThenForward(t *testing.T) {
	d := stampedDir{t.TempDir()}
	db := d.mustOpen(t)
	_ = db.PutRules("acc_00", []Rule{{Signal: "vpn", Action: "block"}})
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	old, err := Open(d.store(), Options{}) // the previous release
	if err != nil {
		t.Fatal(err)
	}
	_ = old.PutRules("acc_01", []Rule{{Signal: "vpn", Action: "block"}})
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = d.open(t)
	if err != nil {
		t.Fatalf("start after a rollback and forward: %v", err)
	}
	_ = db.Close()
}

// TestStampWriteFailsAtStart: the stamp file cannot be written at a
// start (disk full): the start fails, as it may. Once there is room again,
// the next start must not call the healthy store an incomplete copy.
func TestStampWriteFailsAtStart(t *testing.T) {
	d := stampedDir{t.TempDir()}
	db := d.mustOpen(t)
	_ = db.PutRules("acc_00", []Rule{{Signal: "vpn", Action: "block"}})
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	full := &fullStampFS{FS: vfs.Default, full: true}
	if db, err := Open(d.store(), Options{FS: full, StampFile: d.file(), StampEvery: time.Hour}); err == nil {
		_ = db.Close()
		t.Fatal("opened with the stamp file unwritable")
	} else {
		t.Logf("start on a full disk: %v", err)
	}
	db, err := d.open(t)
	if err != nil {
		t.Fatalf("start once there is room: %v", err)
	}
	_ = db.Close()
}

// fullStampFS fails writing the stamp file, as a full disk would.
type fullStampFS struct {
	vfs.FS
	full bool
}

func (f *fullStampFS) Create(n string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if f.full && filepath.Base(n) == StampFileName+".tmp" {
		return nil, fmt.Errorf("create %s: %w", n, syscall.ENOSPC)
	}
	return f.FS.Create(n, c)
}
