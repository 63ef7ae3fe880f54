package storage

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// journalEntries counts the journal's entries (what no fold covered yet).
func journalEntries(t *testing.T, db *DB) int {
	t.Helper()
	it, err := db.newIter([]byte{prefixHistLog}, []byte{prefixHistLog + 1})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	if err := it.Err("count"); err != nil {
		t.Fatal(err)
	}
	return n
}

func putHist(t *testing.T, db *DB, r HistRecord, prev HistStored) HistStored {
	t.Helper()
	var w HistWrite
	st, err := w.Put(r, prev)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.WriteHist([]*HistWrite{&w}); err != nil {
		t.Fatal(err)
	}
	return st
}

func deleteHist(t *testing.T, db *DB, r HistRecord, prev HistStored) {
	t.Helper()
	var w HistWrite
	w.Delete(r, prev)
	if err := db.WriteHist([]*HistWrite{&w}); err != nil {
		t.Fatal(err)
	}
}

func loadVisits(t *testing.T, db *DB, device string) (int64, bool) {
	t.Helper()
	r := &HistCustomerDevice{Customer: "acc_1", Device: device}
	_, ok, err := db.LoadHist(r)
	if err != nil {
		t.Fatal(err)
	}
	return r.LastSeen, ok
}

// TestHistJournalWritesRepeatsOnce: a key's first change in a window is
// written in place; its further changes go into the journal (one key per
// WriteHist), LoadHist reads the newest from the overlay, and the fold
// writes each journalled key once and empties the journal. The next window
// starts in place again.
func TestHistJournalWritesRepeatsOnce(t *testing.T) {
	db := openHist(t, vfs.NewMem())
	defer db.Close()
	cd := testCustomerDevice()
	var st HistStored
	before := db.WriteStats()
	for i := range 20 {
		cd.LastSeen = histT0 + int64(i)
		st = putHist(t, db, cd, st)
	}
	ac := testAccount()
	var w HistWrite
	if _, err := w.Put(ac, HistStored{}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Put(testAddress(), HistStored{}); err != nil {
		t.Fatal(err)
	}
	if err := db.WriteHist([]*HistWrite{&w}); err != nil {
		t.Fatal(err)
	}
	// In place: the device's record, expiry and recent entries at first
	// (3), then each new recent entry (19), and the account's and address's
	// records and expiry entries (4). Journalled: each later write's record
	// and the delete of its previous recent entry, one entry per write (19).
	if d := db.WriteStats().Keys - before.Keys; d != 3+19+4+19 {
		t.Fatalf("the writes put %d keys", d)
	}
	if n := journalEntries(t, db); n != 19 {
		t.Fatalf("%d journal entries, want 19", n)
	}
	if seen, ok := loadVisits(t, db, cd.Device); !ok || seen != histT0+19 {
		t.Fatalf("before the fold: last seen %d (found %v), want the newest", seen, ok)
	}
	before = db.WriteStats()
	// HistKeys folds first: 3 records, 3 expiry entries, one recent entry.
	if r, e, n, err := db.HistKeys(); err != nil || r != 3 || e != 3 || n != 1 {
		t.Fatalf("after the fold: %d records, %d expiry, %d recent, %v", r, e, n, err)
	}
	// The fold: the device record once, the 19 recent entries' deletes,
	// and the range delete of the journal.
	if d := db.WriteStats().Keys - before.Keys; d != 1+19+1 {
		t.Fatalf("the fold wrote %d keys", d)
	}
	if s := db.WriteStats(); s.HistChanges != 3+19*3+4 || s.HistJournalled != 19*2 || s.HistFolded != 1+19 {
		t.Fatalf("changes %d, journalled %d, folded %d", s.HistChanges, s.HistJournalled, s.HistFolded)
	}
	if n := journalEntries(t, db); n != 0 {
		t.Fatalf("%d journal entries after the fold", n)
	}
	if seen, ok := loadVisits(t, db, cd.Device); !ok || seen != histT0+19 {
		t.Fatalf("after the fold: last seen %d (found %v)", seen, ok)
	}
	got := &HistAccount{Customer: ac.Customer, Hash: ac.Hash}
	if _, ok, err := db.LoadHist(got); err != nil || !ok || !reflect.DeepEqual(got, ac) {
		t.Fatalf("account after the fold: %v %v %+v", err, ok, got)
	}
	// A new window: in place again.
	before = db.WriteStats()
	cd.LastSeen++
	putHist(t, db, cd, st)
	if d := db.WriteStats().Keys - before.Keys; d != 3 || journalEntries(t, db) != 0 {
		t.Fatalf("first change of a new window: %d keys, %d journal entries", d, journalEntries(t, db))
	}
}

// TestHistJournalCrash: what a crash image holds of the journal is folded
// at the next open, before anything reads: changes after the last fold
// (sets and deletes alike) survive once synced, over an older fold.
func TestHistJournalCrash(t *testing.T) {
	fs := vfs.NewCrashableMem()
	db, err := Open("h", Options{FS: fs, SyncInterval: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	a, b := testCustomerDevice(), testCustomerDevice()
	b.Device = "second"
	a.LastSeen = histT0
	sa := putHist(t, db, a, HistStored{})
	sb := putHist(t, db, b, HistStored{})
	if err := db.settleHist(); err != nil {
		t.Fatal(err)
	}
	if err := db.Sync(); err != nil {
		t.Fatal(err)
	}
	a.LastSeen = histT0 + 100
	putHist(t, db, a, sa)
	deleteHist(t, db, b, sb)

	// Not synced yet: the image holds the fold only.
	img := fs.CrashClone(vfs.CrashCloneCfg{})
	db2 := openHist(t, img)
	if seen, ok := loadVisits(t, db2, a.Device); !ok || seen != histT0 {
		t.Fatalf("unsynced: a last seen %d (found %v), want the folded %d", seen, ok, histT0)
	}
	if _, ok := loadVisits(t, db2, b.Device); !ok {
		t.Fatal("unsynced: the delete of b survived")
	}
	_ = db2.Close()

	if err := db.Sync(); err != nil {
		t.Fatal(err)
	}
	img = fs.CrashClone(vfs.CrashCloneCfg{})
	db2 = openHist(t, img)
	defer db2.Close()
	if n := journalEntries(t, db2); n != 0 {
		t.Fatalf("open left %d journal entries", n)
	}
	if seen, ok := loadVisits(t, db2, a.Device); !ok || seen != histT0+100 {
		t.Fatalf("synced: a last seen %d (found %v), want %d", seen, ok, histT0+100)
	}
	if _, ok := loadVisits(t, db2, b.Device); ok {
		t.Fatal("synced: b came back")
	}
	if r, e, n, err := db2.HistKeys(); err != nil || r != 1 || e != 1 || n != 1 {
		t.Fatalf("synced: %d records, %d expiry, %d recent, %v", r, e, n, err)
	}
}

// TestHistJournalCorruptRefusesStart: a journal entry that does not parse
// stops Open with ErrCorrupt instead of dropping the changes it holds.
func TestHistJournalCorruptRefusesStart(t *testing.T) {
	fs := vfs.NewMem()
	db := openHist(t, fs)
	b := db.newBatch()
	_ = b.Set(histLogKey(1), []byte{histLogVersion, histLogSet, 3, prefixHist, 1}, nil)
	if err := db.commit(b); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := Open("h", Options{FS: fs, Logger: slog.New(slog.DiscardHandler)})
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("open over a corrupt journal: %v", err)
	}
}

// TestHistJournalConcurrent: writers, readers and folds at once (run with
// -race) leave every record at its newest version, in memory and after a
// reopen.
func TestHistJournalConcurrent(t *testing.T) {
	fs := vfs.NewMem()
	db := openHist(t, fs)
	const devices, rounds = 8, 300
	var wg sync.WaitGroup
	for d := range devices {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &HistCustomerDevice{Customer: "acc_1", Device: fmt.Sprintf("dev%d", d)}
			var st HistStored
			for i := range rounds {
				r.LastSeen = histT0 + int64(i)
				var w HistWrite
				var err error
				if st, err = w.Put(r, st); err != nil {
					t.Error(err)
					return
				}
				if err := db.WriteHist([]*HistWrite{&w}); err != nil {
					t.Error(err)
					return
				}
				back := &HistCustomerDevice{Customer: "acc_1", Device: r.Device}
				if _, ok, err := db.LoadHist(back); err != nil || !ok || back.LastSeen != r.LastSeen {
					t.Errorf("%s round %d: read %d (found %v, %v)", r.Device, i, back.LastSeen, ok, err)
					return
				}
				if i%50 == 0 {
					if err := db.settleHist(); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openHist(t, fs)
	defer db.Close()
	for d := range devices {
		if seen, ok := loadVisits(t, db, fmt.Sprintf("dev%d", d)); !ok || seen != histT0+rounds-1 {
			t.Fatalf("dev%d after reopen: %d (found %v)", d, seen, ok)
		}
	}
	if _, _, n, err := db.HistKeys(); err != nil || n != devices {
		t.Fatalf("%d recent entries, want %d (%v)", n, devices, err)
	}
}

// TestHistLogRoundTrip: random changes survive appendHistLog and
// parseHistLog in order.
func TestHistLogRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		var w HistWrite
		type change struct {
			k, v []byte
			del  bool
		}
		var want []change
		for range r.IntN(10) {
			k := append([]byte{prefixHist}, make([]byte, 1+r.IntN(40))...)
			for i := 1; i < len(k); i++ {
				k[i] = byte(r.Uint32())
			}
			k0 := len(w.buf)
			w.buf = append(w.buf, k...)
			if r.IntN(3) == 0 {
				w.delFrom(k0)
				want = append(want, change{k: k, del: true})
				continue
			}
			v := make([]byte, r.IntN(100))
			for i := range v {
				v[i] = byte(r.Uint32())
			}
			v0 := len(w.buf)
			w.buf = append(w.buf, v...)
			w.setFrom(k0, v0)
			want = append(want, change{k: k, v: v})
		}
		var got []change
		if err := parseHistLog(appendHistLog(nil, []*HistWrite{&w}), func(k, v []byte, del bool) {
			got = append(got, change{k: bytes.Clone(k), v: bytes.Clone(v), del: del})
		}); err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("%d changes back, want %d", len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i].k, want[i].k) || got[i].del != want[i].del || !bytes.Equal(got[i].v, want[i].v) && len(want[i].v) > 0 {
				t.Fatalf("change %d: %+v, want %+v", i, got[i], want[i])
			}
		}
	}
}

// FuzzHistLog: a journal value never panics the parser, and what parses
// encodes back to the same bytes.
func FuzzHistLog(f *testing.F) {
	var w HistWrite
	if _, err := w.Put(testCustomerDevice(), HistStored{}); err != nil {
		f.Fatal(err)
	}
	w.Delete(testAddress(), HistStored{OK: true, Day: 3})
	f.Add(appendHistLog(nil, []*HistWrite{&w}))
	f.Add([]byte{histLogVersion})
	f.Add([]byte{histLogVersion, histLogDelete, 2, prefixHistRecent, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var back HistWrite
		err := parseHistLog(b, func(k, v []byte, del bool) {
			k0 := len(back.buf)
			back.buf = append(back.buf, k...)
			if del {
				back.delFrom(k0)
				return
			}
			v0 := len(back.buf)
			back.buf = append(back.buf, v...)
			back.setFrom(k0, v0)
		})
		if err != nil {
			return
		}
		if again := appendHistLog(nil, []*HistWrite{&back}); !bytes.Equal(again, b) {
			t.Fatalf("%x parsed and encoded back as %x", b, again)
		}
	})
}

// TestHistJournalModel: random writes and deletes of a few records, with
// folds and synced crashes at random, always read back as a map that saw
// the same changes says.
func TestHistJournalModel(t *testing.T) {
	for seed := range uint64(10) {
		r := rand.New(rand.NewPCG(seed, 9))
		fs := vfs.NewCrashableMem()
		open := func(fs vfs.FS) *DB {
			db, err := Open("h", Options{FS: fs, SyncInterval: time.Hour, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			return db
		}
		db := open(fs)
		addr := func(i int) *HistAddress {
			return &HistAddress{Customer: "acc_1", Addr: netipAddr(i)}
		}
		model := map[int]int64{} // record → its one account's Last
		stored := map[int]HistStored{}
		for step := range 400 {
			switch op := r.IntN(20); {
			case op < 12:
				i, last := r.IntN(12), histT0+int64(step)
				rec := addr(i)
				rec.Accounts = []SeenAccount{{Hash: testAccountHash(byte(i)), Last: last}}
				stored[i] = putHist(t, db, rec, stored[i])
				model[i] = last
			case op < 15:
				i := r.IntN(12)
				deleteHist(t, db, addr(i), stored[i])
				delete(model, i)
				delete(stored, i)
			case op < 18:
				if err := db.settleHist(); err != nil {
					t.Fatal(err)
				}
			default:
				if err := db.Sync(); err != nil {
					t.Fatal(err)
				}
				img := fs.CrashClone(vfs.CrashCloneCfg{})
				_ = db.Close()
				fs = img
				db = open(fs)
			}
			for i := range 12 {
				back := addr(i)
				_, ok, err := db.LoadHist(back)
				want, exists := model[i]
				if err != nil || ok != exists || ok && back.Accounts[0].Last != want {
					t.Fatalf("seed %d step %d: record %d read %v %+v, want %v %d", seed, step, i, ok, back.Accounts, exists, want)
				}
			}
		}
		if recs, _, _, err := db.HistKeys(); err != nil || recs != len(model) {
			t.Fatalf("seed %d: %d records stored, want %d (%v)", seed, recs, len(model), err)
		}
		_ = db.Close()
	}
}

func netipAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{203, 0, 113, byte(i + 1)}) }

// TestHistJournalReplayServesNewest: while a replay writes the journal in
// place, LoadHist reads the journal's values, never the older ones in place.
func TestHistJournalReplayServesNewest(t *testing.T) {
	db := openHist(t, vfs.NewMem())
	defer db.Close()
	const n = 8000
	sts := make([]HistStored, n)
	for round := range 2 { // in place, then journalled
		var ws []*HistWrite
		for i := range n {
			var w HistWrite
			r := &HistCustomerDevice{Customer: "acc_1", Device: fmt.Sprintf("dev%06d", i), LastSeen: histT0 + int64(round)}
			sts[i], _ = w.Put(r, sts[i])
			ws = append(ws, &w)
		}
		if err := db.WriteHist(ws); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	stale := 0
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if seen, ok := loadVisits(t, db, fmt.Sprintf("dev%06d", i%n)); !ok || seen != histT0+1 {
				stale++
			}
		}
	}()
	err := db.replayHistJournal(db.h.Load())
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if stale > 0 {
		t.Fatalf("LoadHist read an older value %d times during the replay", stale)
	}
}

// journalledDevice writes a device record in place (last seen histT0)
// and then, in the same window, into the journal (histT0+1).
func journalledDevice(t *testing.T, db *DB) (*HistCustomerDevice, HistStored) {
	t.Helper()
	cd := testCustomerDevice()
	cd.LastSeen = histT0
	st := putHist(t, db, cd, HistStored{})
	cd.LastSeen = histT0 + 1
	return cd, putHist(t, db, cd, st)
}

// TestHistJournalReopen: a reopen after a fatal write error replays what
// the journal kept before anything is written or read: an entry whose fold
// the WAL lost comes back, and a change made after the reopen stays over it.
func TestHistJournalReopen(t *testing.T) {
	db := openHist(t, vfs.NewMem())
	defer db.Close()
	cd, st := journalledDevice(t, db) // journal entry 1
	var w HistWrite
	if _, err := w.Put(cd, HistStored{}); err != nil {
		t.Fatal(err)
	}
	entry := appendHistLog(nil, []*HistWrite{&w})
	if err := db.settleHist(); err != nil {
		t.Fatal(err)
	}
	// The fold's batch lost with the WAL's tail: its entry is back, and the
	// record in place is the first value.
	b := db.newBatch()
	_ = b.Set(histLogKey(1), entry, nil)
	first := *cd
	first.LastSeen = histT0
	var w0 HistWrite
	if _, err := w0.Put(&first, HistStored{}); err != nil {
		t.Fatal(err)
	}
	_ = b.Set(w0.buf[w0.ops[0].k0:w0.ops[0].k1], w0.buf[w0.ops[0].v0:w0.ops[0].v1], nil)
	if err := db.commit(b); err != nil {
		t.Fatal(err)
	}
	db.h.Load().breakDown()
	if err := db.Probe(); err != nil {
		t.Fatal(err)
	}
	if seen, ok := loadVisits(t, db, cd.Device); !ok || seen != histT0+1 {
		t.Fatalf("after the reopen: last seen %d (found %v), want the journal's %d", seen, ok, histT0+1)
	}
	if n := journalEntries(t, db); n != 0 {
		t.Fatalf("%d journal entries after the reopen", n)
	}
	cd.LastSeen = histT0 + 2
	putHist(t, db, cd, st)
	if err := db.settleHist(); err != nil {
		t.Fatal(err)
	}
	if seen, _ := loadVisits(t, db, cd.Device); seen != histT0+2 {
		t.Fatalf("a change after the reopen: last seen %d, want %d", seen, histT0+2)
	}
}

// TestHistJournalFoldFailure: a fold that fails leaves its window's
// changes to the next one, which writes them all.
func TestHistJournalFoldFailure(t *testing.T) {
	db := openHist(t, vfs.NewMem())
	defer db.Close()
	cd, st := journalledDevice(t, db)
	h := db.h.Load()
	h.broken.Store(true) // the fold's commit is refused
	if err := db.settleHist(); err == nil {
		t.Fatal("the fold did not fail")
	}
	h.broken.Store(false)
	for i := range 4 {
		cd.Events = append(cd.Events, uint64(100+i)) // the record alone changes
		st = putHist(t, db, cd, st)
	}
	if _, _, n, err := db.HistKeys(); err != nil || n != 1 {
		t.Fatalf("%d recent-index entries after the next fold, want 1 (%v)", n, err)
	}
	if n := journalEntries(t, db); n != 0 {
		t.Fatalf("%d journal entries after the next fold", n)
	}
	v, err := db.get(appendRecordKey(nil, cd))
	back := &HistCustomerDevice{}
	if err != nil || back.Unmarshal(v) != nil || len(back.Events) != len(cd.Events) {
		t.Fatalf("in place after the next fold: %d events, want %d (%v)", len(back.Events), len(cd.Events), err)
	}
}
