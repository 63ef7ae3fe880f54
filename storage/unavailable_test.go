package storage

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestProbeMarksUnavailable injects write failures under Pebble and checks
// that the store reports itself unavailable (so authenticated endpoints answer
// 503) and recovers when the disk does.
func TestProbeMarksUnavailable(t *testing.T) {
	var failing atomic.Bool
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		if failing.Load() && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			return errorfs.ErrInjected
		}
		return nil
	}))
	db, err := Open("d", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Probe(); err != nil || !db.Available() {
		t.Fatalf("healthy probe: %v", err)
	}
	failing.Store(true)
	err = db.Probe()
	if !errors.Is(err, ErrUnavailable) || db.Available() {
		t.Fatalf("failing disk: err=%v available=%v", err, db.Available())
	}
	if err := db.PutRules("a", nil); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("write on failing disk: %v", err)
	}
	if _, err := db.GetAccount("a"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("read on broken store: %v", err)
	}
	// Pebble's commit pipeline does not recover from a failed WAL write, so
	// neither does the store: it stays unavailable until restart.
	failing.Store(false)
	if err := db.Probe(); err == nil || db.Available() {
		t.Fatal("a broken store must stay unavailable")
	}
}
