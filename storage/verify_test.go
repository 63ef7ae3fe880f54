package storage

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestVerifyTablesFindsDamagedMetadata: a table whose footer or index is
// damaged is reported at start, naming the file, before any read needs it.
func TestVerifyTablesFindsDamagedMetadata(t *testing.T) {
	fs := vfs.NewMem()
	db, err := Open("d", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if err := db.PutAccount(&Account{ID: fmt.Sprintf("acc_%03d", i), Email: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil { // flushes: the records are in a table
		t.Fatal(err)
	}
	if err := func() error {
		db, err := Open("d", Options{FS: fs})
		defer db.Close()
		return firstErr(err, db.VerifyTables())
	}(); err != nil {
		t.Fatalf("healthy store: %v", err)
	}
	names, _ := fs.List("d")
	sst := ""
	for _, n := range names {
		if strings.HasSuffix(n, ".sst") {
			sst = "d/" + n
		}
	}
	if sst == "" {
		t.Fatalf("no table after close: %v", names)
	}
	b := readFile(t, fs, sst)
	b[len(b)-60] ^= 0xff // in the footer / meta index
	writeFile(t, fs, sst, b)
	db, err = Open("d", Options{FS: fs})
	if err == nil {
		err = db.VerifyTables()
		defer db.Close()
	}
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), sst) {
		t.Fatalf("damaged table: %v, want ErrCorrupt naming %s", err, sst)
	}
	if p, ok := CorruptFile(err); !ok || p != sst {
		t.Fatalf("CorruptFile = %q %v", p, ok)
	}
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
