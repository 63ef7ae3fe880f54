package devicehist

import (
	"bytes"
	"errors"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/storage"
)

// lockedBuffer is a log sink the shards may write to at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// putRaw stores records as given, through the store's own write path.
func putRaw(t *testing.T, db *storage.DB, recs ...storage.HistRecord) {
	t.Helper()
	var w storage.HistWrite
	for _, r := range recs {
		if _, err := w.Put(r, storage.HistStored{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.WriteHist([]*storage.HistWrite{&w}); err != nil {
		t.Fatal(err)
	}
}

// TestPruneDeletesUndecodableRecords: a device-history record whose stored
// value does not decode is deleted by the prune that finds it past the
// window — its index entries with it, and the sealed account id it may hold
// — with one log line naming its key and none of its contents; it used to
// be skipped ("expiry not applied") at every prune, forever. Records that
// decode are trimmed or kept as before, and a record still in its window is
// never touched, corrupt or not.
func TestPruneDeletesUndecodableRecords(t *testing.T) {
	db := openDB(t, vfs.NewMem())
	defer db.Close()
	var logs lockedBuffer
	c := newClient(t, Config{Shards: 2, Store: db, Logger: slog.New(slog.NewTextHandler(&logs, nil))})

	old := t0.Unix()
	// A timestamp past what the decoder accepts (2⁶²) stands for any damage
	// the decoder refuses: the value is written, and reads back corrupt.
	const garbled = math.MaxInt64
	sealed := []byte("SEALED-ACCOUNT-ID-BYTES")
	corruptAccount := &storage.HistAccount{Customer: "acc_1", Hash: storage.AccountHash{1, 2, 3}, Sealed: sealed, FirstCheck: garbled, LastCheck: old}
	corruptDevice := &storage.HistCustomerDevice{Customer: "acc_1", Device: "broken-dev", LastSeen: old,
		Days: []storage.DayVisits{{Day: storage.DayOf(t0), N: 1, First: garbled}}}
	fineOld := &storage.HistAccount{Customer: "acc_1", Hash: storage.AccountHash{4}, Sealed: []byte("x"), FirstCheck: old, LastCheck: old}
	// Corrupt but within the window at the prune: not the prune's to delete.
	recent := t0.Add(80 * 24 * time.Hour).Unix()
	corruptRecent := &storage.HistAccount{Customer: "acc_1", Hash: storage.AccountHash{5}, Sealed: sealed, FirstCheck: garbled, LastCheck: recent}
	fineRecent := &storage.HistAccount{Customer: "acc_1", Hash: storage.AccountHash{6}, Sealed: []byte("y"), FirstCheck: recent, LastCheck: recent}
	putRaw(t, db, corruptAccount, corruptDevice, fineOld, corruptRecent, fineRecent)

	for _, r := range []storage.HistRecord{corruptAccount, corruptDevice, corruptRecent} {
		if _, _, err := db.LoadHist(blankOf(r)); err == nil {
			t.Fatalf("%T: the garbled record decodes; the test needs one that does not", r)
		}
	}

	at := t0.Add(90*24*time.Hour + 24*time.Hour)
	if err := c.Prune(at); err != nil {
		t.Fatal(err)
	}
	for _, r := range []storage.HistRecord{corruptAccount, corruptDevice, fineOld} {
		if _, found, err := db.LoadHist(blankOf(r)); found || err != nil {
			t.Errorf("%T (kind %d) past its 90 days: still stored (found=%v err=%v)", r, r.Kind(), found, err)
		}
	}
	if _, _, err := db.LoadHist(blankOf(corruptRecent)); err == nil {
		t.Error("a corrupt record within its window was changed by the prune")
	}
	if _, found, err := db.LoadHist(blankOf(fineRecent)); !found || err != nil {
		t.Errorf("a record within its window: found=%v err=%v", found, err)
	}
	// Only the two records within the window are left: each with its record
	// and expiry entry; the broken device's recent-list entry went too.
	if r, e, n, err := db.HistKeys(); err != nil || r != 2 || e != 2 || n != 0 {
		t.Errorf("keys left (records, expiry, recent): %d %d %d %v; want 2 2 0", r, e, n, err)
	}

	out := logs.String()
	if strings.Contains(out, string(sealed)) {
		t.Errorf("the log holds a record's contents:\n%s", out)
	}
	if n := undecodableLines(out); n != 2 {
		t.Errorf("%d log lines about undecodable records, want 2 (one per deleted record):\n%s", n, out)
	}
	if !strings.Contains(out, "broken-dev") {
		t.Errorf("the log does not name the deleted device record's key:\n%s", out)
	}

	// A second prune finds nothing more to do, and says nothing.
	if err := c.Prune(at.Add(24 * time.Hour)); err != nil {
		t.Fatal(err)
	}
	if n := undecodableLines(logs.String()); n != 2 {
		t.Errorf("after a second prune: %d log lines about undecodable records, want still 2", n)
	}
}

// unreadableStore fails every record read with an error that is not a
// corrupt record (the store unavailable).
type unreadableStore struct{ *storage.DB }

func (unreadableStore) LoadHist(storage.HistRecord) (storage.HistStored, bool, error) {
	return storage.HistStored{}, false, errors.New("injected read failure")
}

// TestPruneKeepsRecordsItCannotRead: a record the store cannot read (an I/O
// failure, not a value that does not decode) is left for the next prune.
func TestPruneKeepsRecordsItCannotRead(t *testing.T) {
	db := openDB(t, vfs.NewMem())
	defer db.Close()
	c := newClient(t, Config{Shards: 2, Store: unreadableStore{db}})
	old := &storage.HistAccount{Customer: "acc_1", Hash: storage.AccountHash{4}, Sealed: []byte("x"), FirstCheck: t0.Unix(), LastCheck: t0.Unix()}
	putRaw(t, db, old)
	if err := c.Prune(t0.Add(92 * 24 * time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, found, err := db.LoadHist(blankOf(old)); !found || err != nil {
		t.Fatalf("a record the store could not read was deleted: found=%v err=%v", found, err)
	}
}

// undecodableLines counts the log lines about a record that does not decode.
func undecodableLines(log string) int {
	n := 0
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "does not decode") {
			n++
		}
	}
	return n
}
