package storage

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// setRaw writes key=val (nil val deletes) into the closed store at dir as
// another build would.
func setRaw(t *testing.T, fs vfs.FS, dir string, key, val []byte) {
	t.Helper()
	p, err := pebble.Open(dir, &pebble.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	if val == nil {
		err = p.Delete(key, pebble.Sync)
	} else {
		err = p.Set(key, val, pebble.Sync)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestStoreOfANewerFormatIsRefused: a store a build of a newer store format
// wrote stops Open with ErrStoreNewer naming both formats, before anything
// is written to it (its stamp and format stay as they were); a store no
// build stamped with a format (an earlier release's) opens and is stamped
// with this build's. Before, nothing in the store said which build wrote
// it, so a downgrade went on serving and failed record by record.
func TestStoreOfANewerFormatIsRefused(t *testing.T) {
	fs := vfs.NewMem()
	o := Options{FS: fs, StampFile: "store-stamp"}
	db, err := Open("d", o)
	if err != nil {
		t.Fatal(err)
	}
	if f, err := db.storeFormat(); err != nil || f != StoreFormat {
		t.Fatalf("a new store's format: %d %v; want %d", f, err, StoreFormat)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// An earlier release's store: no format record.
	setRaw(t, fs, "d", formatKey, nil)
	if db, err = Open("d", o); err != nil {
		t.Fatalf("a store without a format: %v", err)
	}
	if f, err := db.storeFormat(); err != nil || f != StoreFormat {
		t.Fatalf("format after opening an earlier release's store: %d %v", f, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// A newer build's store.
	setRaw(t, fs, "d", formatKey, binary.AppendUvarint(nil, StoreFormat+1))
	stampBefore, _, err := ReadStampFile(fs, "store-stamp")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open("d", o)
	if !errors.Is(err, ErrStoreNewer) || !strings.Contains(err.Error(), "store format 2 and this build reads up to 1") {
		t.Fatalf("a newer build's store: %v", err)
	}
	if n, _, _ := ReadStampFile(fs, "store-stamp"); n != stampBefore {
		t.Fatalf("the refused open moved the stamp file from %d to %d", stampBefore, n)
	}
	p, err := pebble.Open("d", &pebble.Options{FS: fs, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	v, closer, err := p.Get(formatKey)
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := binary.Uvarint(v); f != StoreFormat+1 {
		t.Fatalf("the refused open rewrote the format: %d", f)
	}
	closer.Close()
	p.Close()

	// A format record that does not parse is a corrupt store.
	setRaw(t, fs, "d", formatKey, []byte{0x80})
	if _, err := Open("d", o); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a garbled format record: %v", err)
	}
}

// TestStoreFormatCoversRecordVersions pins the record versions this store
// format holds. A record's version that changes fails it: an earlier build
// cannot read the new version, so StoreFormat must be bumped with it (and
// this table and the format noted beside it updated), so that a downgrade
// is refused at the start instead of failing record by record.
func TestStoreFormatCoversRecordVersions(t *testing.T) {
	const format = 1
	got := map[string]int{
		"account": accountVersion, "rules and pins": policyVersion, "gpu sample": gpuSampleVersion,
		"day usage": dayUsageVersion, "delivery": deliveryVersion, "device history": histVersion,
		"event": eventVersion, "health": healthVersion, "history journal": int(histLogVersion),
		"pending hook": pendingHookVersion, "mail": mailVersion, "evaluation": evaluationVersion,
		"sightings": sightingsVersion, "traffic": trafficVersion, "month counts": monthCountsVersion,
		"totals": totalsVersion,
	}
	want := map[string]int{
		"account": 1, "rules and pins": 1, "gpu sample": 2, "day usage": 1, "delivery": 1,
		"device history": 1, "event": 2, "health": 2, "history journal": 1, "pending hook": 1,
		"mail": 1, "evaluation": 1, "sightings": 1, "traffic": 1, "month counts": 1, "totals": 2,
	}
	for name, v := range got {
		if want[name] != v || StoreFormat != format {
			t.Errorf("%s record version %d, store format %d: the table holds version %d for format %d; a version an earlier build cannot read needs StoreFormat bumped (then update this table)",
				name, v, StoreFormat, want[name], format)
		}
	}
}
