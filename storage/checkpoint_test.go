package storage

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestCheckpointHoldsEverythingAcknowledged: a checkpoint taken while the
// store is open holds every synced and every write-behind commit made before
// it, and opens as a store of its own.
func TestCheckpointHoldsEverythingAcknowledged(t *testing.T) {
	fs := vfs.NewMem()
	db, err := Open("d", Options{FS: fs, SyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if err := db.PutRules(fmt.Sprintf("acc_%02d", i), []Rule{{Signal: "vpn", Action: "block"}}); err != nil {
			t.Fatal(err)
		}
	}
	// Write-behind, not synced yet (the sync loop waits an hour).
	if err := db.WriteDevice(DeviceWrite{Sightings: []*Sightings{{Visitor: "v1", LastSeen: time.Unix(1e9, 0), TimesSeen: 7}}}); err != nil {
		t.Fatal(err)
	}
	if err := db.Checkpoint("backup"); err != nil {
		t.Fatal(err)
	}
	if err := db.Checkpoint("backup"); err == nil {
		t.Fatal("a checkpoint over an existing directory succeeded")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	check := func(dir string, o Options) {
		t.Helper()
		o.FS = fs
		cp, err := Open(dir, o)
		if err != nil {
			t.Fatalf("open %s: %v", dir, err)
		}
		defer cp.Close()
		if got := countRules(t, cp, 50); got != 50 {
			t.Fatalf("%s holds %d of 50 synced records", dir, got)
		}
		h, ok, err := cp.LoadSightings("v1", time.Unix(1e9, 0))
		if err != nil || !ok || h.TimesSeen != 7 {
			t.Fatalf("%s: write-behind record %+v %v %v", dir, h, ok, err)
		}
	}
	check("backup", Options{})
}

// TestCheckpointFailureLeavesStoreUp: a copy that cannot be written (its
// disk is full) fails the checkpoint, not the store.
func TestCheckpointFailureLeavesStoreUp(t *testing.T) {
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if strings.HasPrefix(op.Path, "bad/") && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			return syscall.ENOSPC
		}
		return nil
	})
	db, err := Open("d", Options{FS: errorfs.Wrap(vfs.NewMem(), inj)})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.PutRules("a", []Rule{{Signal: "vpn", Action: "block"}}); err != nil {
		t.Fatal(err)
	}
	if err := db.Checkpoint("bad"); err == nil {
		t.Fatal("checkpoint onto a full disk succeeded")
	}
	if !db.Available() {
		t.Fatal("a failed checkpoint took the store down")
	}
	if err := db.PutRules("b", nil); err != nil {
		t.Fatalf("write after a failed checkpoint: %v", err)
	}
}
