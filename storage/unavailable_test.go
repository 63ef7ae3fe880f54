package storage

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// diskFull fails every write-side file operation with ENOSPC while on is set.
func diskFull(on *atomic.Bool) errorfs.Injector {
	return errorfs.InjectorFunc(func(op errorfs.Op) error {
		if on.Load() && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			return syscall.ENOSPC
		}
		return nil
	})
}

// TestFullDiskRecovers fills the disk under concurrent writers of every
// durability class, then frees it: no writer may hang or panic, the store
// must say it is unavailable while full and come back by itself at the next
// probe, and every write acknowledged as synced must be there afterwards,
// also after a crash that drops whatever was not synced.
func TestFullDiskRecovers(t *testing.T) {
	mem := vfs.NewCrashableMem()
	var full atomic.Bool
	db, err := Open("d", Options{FS: errorfs.Wrap(mem, diskFull(&full)), CloseWait: 500 * time.Millisecond, SyncInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var acked []string
	ack := func(id string) { mu.Lock(); acked = append(acked, id); mu.Unlock() }

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("g%d-%d", g, n)
				var err error
				switch g % 3 {
				case 0: // synced
					if err = db.PutRules(id, []Rule{{Signal: "vpn", Action: id}}); err == nil {
						ack(id)
					}
				case 1: // write-behind
					err = db.WriteDevice(DeviceWrite{Sightings: []*Sightings{{Visitor: id, LastSeen: time.Unix(1e9, 0), TimesSeen: 1}}})
				case 2: // no sync
					err = db.PutDelivery(&Delivery{Account: id, EventID: "e", Attempt: 1, At: time.Unix(1e9, 0)})
				}
				if err != nil && !errors.Is(err, ErrUnavailable) {
					t.Errorf("write %s: %v, want ErrUnavailable", id, err)
				}
			}
		}()
	}
	// Fill the disk once some synced writes were acknowledged.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		if n >= 20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d synced writes in 10s", n)
		}
	}
	full.Store(true)
	time.Sleep(100 * time.Millisecond)
	if err := db.Probe(); !errors.Is(err, ErrUnavailable) || db.Available() {
		t.Fatalf("full disk: probe %v, available %v", err, db.Available())
	}
	if err := db.PutRules("while-full", nil); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("write on a full disk: %v", err)
	}
	close(stop)
	waitDone(t, &wg, "writers on a full disk")

	// Still full: the probe's reopen fails and the store stays unavailable.
	if err := db.Probe(); err == nil || db.Available() {
		t.Fatal("probe succeeded on a full disk")
	}
	full.Store(false)
	if err := db.Probe(); err != nil || !db.Available() {
		t.Fatalf("the store did not recover once space was back: %v", err)
	}
	checkAcked(t, db, acked)
	if err := db.PutRules("after", []Rule{{Signal: "tor", Action: "block"}}); err != nil {
		t.Fatalf("write after recovery: %v", err)
	}
	acked = append(acked, "after")

	// A crash now drops nothing that was acknowledged.
	crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	if err := db.Close(); err != nil {
		t.Fatalf("close after recovery: %v", err)
	}
	db2, err := Open("d", Options{FS: crashed})
	if err != nil {
		t.Fatalf("open after crash: %v", err)
	}
	defer db2.Close()
	checkAcked(t, db2, acked)
}

func checkAcked(t *testing.T, db *DB, ids []string) {
	t.Helper()
	for _, id := range ids {
		rules, err := db.GetRules(id)
		if err != nil || len(rules) != 1 || rules[0].Action != id && id != "after" {
			t.Fatalf("acknowledged write %s: %+v %v", id, rules, err)
		}
	}
}

func waitDone(t *testing.T, wg *sync.WaitGroup, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s hung", what)
	}
}

// TestErrorInjectionNeverPanics fails reads, writes and syncs at random
// under every store operation: each failure must come back as ErrUnavailable
// (or a clean result), never a panic, and the store must recover once the
// errors stop.
func TestErrorInjectionNeverPanics(t *testing.T) {
	for _, c := range []struct {
		name  string
		kinds []errorfs.OpKind
	}{
		{"reads", []errorfs.OpKind{errorfs.OpFileRead, errorfs.OpFileReadAt, errorfs.OpOpen, errorfs.OpStat, errorfs.OpFileStat}},
		{"writes", []errorfs.OpKind{errorfs.OpFileWrite, errorfs.OpFileWriteAt, errorfs.OpCreate, errorfs.OpReuseForWrite, errorfs.OpRename, errorfs.OpLink}},
		{"syncs", []errorfs.OpKind{errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var on atomic.Bool
			rng := rand.New(rand.NewPCG(1, uint64(len(c.name))))
			var rngMu sync.Mutex
			inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
				if !on.Load() {
					return nil
				}
				for _, k := range c.kinds {
					if op.Kind == k {
						rngMu.Lock()
						fail := rng.IntN(3) == 0
						rngMu.Unlock()
						if fail {
							return errorfs.ErrInjected
						}
					}
				}
				return nil
			})
			mem := vfs.NewMem()
			db, err := Open("d", Options{FS: errorfs.Wrap(mem, inj), CacheBytes: 1 << 10, CloseWait: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 50 {
				if err := db.PutAccount(&Account{ID: fmt.Sprintf("acc_%02d", i), Email: fmt.Sprintf("%d@x", i)}); err != nil {
					t.Fatal(err)
				}
			}
			// Tables on disk and a cold cache, so reads go to the files.
			if err := db.h.Load().db.Flush(); err != nil {
				t.Fatal(err)
			}
			on.Store(true)
			failures := 0
			for i := range 200 {
				id := fmt.Sprintf("acc_%02d", i%50)
				var err error
				switch i % 6 {
				case 0:
					_, err = db.GetAccount(id)
				case 1:
					err = db.Accounts(func(*Account) error { return nil })
				case 2:
					err = db.PutRules(id, []Rule{{Signal: "vpn", Action: "block"}})
				case 3:
					err = db.WriteDevice(DeviceWrite{Sightings: []*Sightings{{Visitor: id, LastSeen: time.Unix(1e9, 0), TimesSeen: 1}}})
				case 4:
					err = db.Sync()
				case 5:
					_, err = db.Deliveries(id, time.Time{}, 10)
				}
				if err != nil {
					if !errors.Is(err, ErrUnavailable) {
						t.Fatalf("op %d: %v, want ErrUnavailable", i, err)
					}
					failures++
				}
				if i%20 == 19 {
					_ = db.Probe()
				}
			}
			if failures == 0 {
				t.Fatal("no injected error reached a caller")
			}
			on.Store(false)
			if err := db.Probe(); err != nil {
				t.Fatalf("no recovery once the errors stopped: %v", err)
			}
			if _, err := db.GetAccount("acc_07"); err != nil {
				t.Fatalf("read after recovery: %v", err)
			}
			_ = db.Close()
		})
	}
}

// TestCorruptTableIsAnErrorNotAPanic flips bytes all over a table file: no
// open, read or scan may panic; a read that meets the damage reports the
// file, and the store stays unavailable (a corrupt file does not heal).
func TestCorruptTableIsAnErrorNotAPanic(t *testing.T) {
	base := vfs.NewMem()
	db, err := Open("d", Options{FS: base})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		if err := db.PutAccount(&Account{ID: fmt.Sprintf("acc_%03d", i), Email: strings.Repeat("x", 40)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.h.Load().db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	sst := ""
	names, _ := base.List("d")
	for _, n := range names {
		if strings.HasSuffix(n, ".sst") {
			sst = "d/" + n
		}
	}
	orig := readFile(t, base, sst)
	reported := 0
	for off := 0; off < len(orig); off += max(1, len(orig)/97) {
		fs := vfs.NewMem()
		copyDir(t, base, fs, "d")
		b := append([]byte(nil), orig...)
		b[off] ^= 0x5a
		writeFile(t, fs, sst, b)
		db, err := Open("d", Options{FS: fs, CacheBytes: 1 << 10})
		if err != nil {
			if _, ok := CorruptFile(err); !ok && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("flip at %d: open: %v", off, err)
			}
			reported++
			continue
		}
		err = db.Accounts(func(*Account) error { return nil })
		if err == nil {
			_, err = db.GetAccount("acc_150")
		}
		if err != nil {
			if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), sst) {
				t.Fatalf("flip at %d: %v, want ErrUnavailable naming %s", off, err, sst)
			}
			if db.Available() {
				t.Fatalf("flip at %d: store still available after reading a corrupt table", off)
			}
			if perr := db.Probe(); !errors.Is(perr, ErrCorrupt) || db.Available() {
				t.Fatalf("flip at %d: probe %v: a corrupt store must stay unavailable", off, perr)
			}
			reported++
		}
		_ = db.Close()
	}
	if reported == 0 {
		t.Fatal("no flipped byte was noticed")
	}
}

func readFile(t *testing.T, fs vfs.FS, name string) []byte {
	t.Helper()
	f, err := fs.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	b := make([]byte, st.Size())
	if n, err := f.ReadAt(b, 0); n != len(b) {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, fs vfs.FS, name string, b []byte) {
	t.Helper()
	f, err := fs.Create(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func copyDir(t *testing.T, from, to vfs.FS, dir string) {
	t.Helper()
	if err := to.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	names, err := from.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		p := from.PathJoin(dir, n)
		writeFile(t, to, p, readFile(t, from, p))
	}
}

// fullWrites fails file writes (not creates, renames or syncs) with ENOSPC
// while full is set: what a disk that filled up does to a store that opens.
func fullWrites(full *atomic.Bool) errorfs.Injector {
	return errorfs.InjectorFunc(func(op errorfs.Op) error {
		switch op.Kind {
		case errorfs.OpFileWrite, errorfs.OpFileWriteAt, errorfs.OpFilePreallocate:
			if full.Load() {
				return syscall.ENOSPC
			}
		}
		return nil
	})
}

// TestFullDiskAtStartNamesTheCause: a store that cannot open because the
// disk is full says so in the error the start-up code reports in its one
// line, not only in a DEBUG line of its own.
func TestFullDiskAtStartNamesTheCause(t *testing.T) {
	mem := vfs.NewMem()
	db, err := Open("d", Options{FS: mem})
	if err != nil {
		t.Fatal(err)
	}
	_ = db.PutRules("acc_1", []Rule{{Signal: "vpn", Action: "block"}})
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	var full atomic.Bool
	full.Store(true)
	db, err = Open("d", Options{FS: errorfs.Wrap(mem, fullWrites(&full)), CloseWait: 500 * time.Millisecond})
	if err == nil {
		_ = db.Close()
		t.Fatal("opened on a full disk")
	}
	if !strings.Contains(err.Error(), "no space left on device") || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("the start-up error does not name the cause: %v", err)
	}
	// Space back: the store opens with what it held.
	full.Store(false)
	db, err = Open("d", Options{FS: mem})
	if err != nil {
		t.Fatalf("open once space is back: %v", err)
	}
	defer db.Close()
	if rules, err := db.GetRules("acc_1"); err != nil || len(rules) != 1 {
		t.Fatalf("rules after the failed start: %+v %v", rules, err)
	}
}

// TestFullDiskAtStartProbeNamesTheCause: the start-up probe (serve stops the
// start on its error) names the full disk, and does not promise a reopen at
// the next health probe, which a stopped start never runs; once serving, it
// does.
func TestFullDiskAtStartProbeNamesTheCause(t *testing.T) {
	var full atomic.Bool
	db, err := Open("d", Options{FS: errorfs.Wrap(vfs.NewMem(), fullWrites(&full)), CloseWait: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	full.Store(true)
	err = db.Probe()
	if err == nil {
		t.Fatal("probe succeeded on a full disk")
	}
	if !strings.Contains(err.Error(), "no space left on device") || !errors.Is(err, syscall.ENOSPC) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("the start-up probe error does not name the cause: %v", err)
	}
	if strings.Contains(err.Error(), "next health probe") {
		t.Fatalf("the start-up probe error promises a probe that never runs: %v", err)
	}
	db.Serving()
	err = db.PutRules("while-full", nil)
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "reopens at the next health probe") {
		t.Fatalf("a write to the broken store while serving: %v", err)
	}
}
