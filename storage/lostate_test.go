package storage

import (
	"errors"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestOpenRefusesStoreWithoutManifestMarker(t *testing.T) {
	fs := vfs.NewMem()
	// A first start on an empty (or absent) directory creates the store.
	db, err := Open("d", Options{FS: fs})
	if err != nil {
		t.Fatalf("first open: %v", err)
	}
	if err := db.PutAccount(&Account{ID: "acct_1", Email: "a@example.com"}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	names, _ := fs.List("d")
	removed := 0
	for _, n := range names {
		if strings.HasPrefix(n, "marker.manifest.") {
			if err := fs.Remove("d/" + n); err != nil {
				t.Fatal(err)
			}
			removed++
		}
	}
	if removed == 0 {
		t.Fatalf("no manifest marker among %v", names)
	}
	_, err = Open("d", Options{FS: fs})
	if !errors.Is(err, ErrManifestMissing) {
		t.Fatalf("open without marker: %v, want ErrManifestMissing", err)
	}
	left, _ := fs.List("d")
	if len(left) < len(names)-removed {
		t.Fatalf("the refused open removed files: %v → %v", names, left)
	}
}

func TestOpenCreatesOnlyInEmptyDir(t *testing.T) {
	fs := vfs.NewMem()
	if err := fs.MkdirAll("d", 0o700); err != nil {
		t.Fatal(err)
	}
	// A LOCK alone (an interrupted first open) still counts as empty.
	f, err := fs.Create("d/LOCK", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	db, err := Open("d", Options{FS: fs})
	if err != nil {
		t.Fatalf("open of a dir holding only LOCK: %v", err)
	}
	db.Close()
	// Reopening an initialised store works.
	db, err = Open("d", Options{FS: fs})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	db.Close()
}

func TestKeyCheck(t *testing.T) {
	fs := vfs.NewMem()
	db, err := Open("d", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	if has, err := db.HasKeyCheck(); err != nil || has {
		t.Fatalf("new store has a key check: %v %v", has, err)
	}
	if err := db.VerifyKeyCheck([]byte("check-a")); err != nil {
		t.Fatalf("first verify stores: %v", err)
	}
	db.Close()
	db, err = Open("d", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if has, _ := db.HasKeyCheck(); !has {
		t.Fatal("key check not kept across reopen")
	}
	if err := db.VerifyKeyCheck([]byte("check-a")); err != nil {
		t.Fatalf("same secret: %v", err)
	}
	if err := db.VerifyKeyCheck([]byte("check-b")); !errors.Is(err, ErrKeyCheckMismatch) {
		t.Fatalf("other secret: %v, want ErrKeyCheckMismatch", err)
	}
}
