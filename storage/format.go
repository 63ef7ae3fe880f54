package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// StoreFormat is the store format this build writes, and the newest it
// reads. Each record carries its own version byte and a build refuses a
// version it does not know, but most records are read only when an account
// or device is next used, so a start on a store a newer build wrote would
// go on serving and fail (or, where a loader skips what it cannot read,
// forget) piece by piece. The format lets the start refuse such a store at
// once, with one line.
//
// Bump it with any change an earlier build cannot read: a new record
// version (TestStoreFormatCoversRecordVersions lists them), a new key
// layout under an existing prefix. A new prefix an earlier build never
// reads needs no bump. Builds before the format was stored do not check it.
const StoreFormat = 1

// formatKey holds the highest StoreFormat of the builds that opened the
// store, as a uvarint.
var formatKey = []byte{prefixMeta, 'f', 'o', 'r', 'm', 'a', 't'}

// ErrStoreNewer is returned by Open when the store was written by a build of
// a newer store format than this one.
var ErrStoreNewer = errors.New("store was written by a newer fraudd")

// storeFormat reads the stored format, 0 when there is none (a new store, or
// one only builds before the format was stored have opened).
func (d *DB) storeFormat() (uint64, error) {
	v, err := d.get(formatKey)
	if errors.Is(err, ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read the store's format: %w", err)
	}
	f, n := binary.Uvarint(v)
	if n <= 0 || n != len(v) || f == 0 {
		return 0, fmt.Errorf("%w: the store's format record is %x", ErrCorrupt, v)
	}
	return f, nil
}

// checkFormat refuses a store of a newer format, before anything at open
// writes to it; it returns the stored format.
func (d *DB) checkFormat() (uint64, error) {
	f, err := d.storeFormat()
	if err != nil {
		return 0, err
	}
	if f > StoreFormat {
		return 0, fmt.Errorf("%w: the store in %s is of store format %d and this build reads up to %d: run the release that wrote it (or a later one), or restore a backup taken before the upgrade (README: Upgrades and downgrades)",
			ErrStoreNewer, d.dir, f, StoreFormat)
	}
	return f, nil
}

// putFormat stores this build's format (synced).
func (d *DB) putFormat() error {
	b := d.newBatch()
	if err := b.Set(formatKey, binary.AppendUvarint(nil, StoreFormat), nil); err != nil {
		_ = b.Close()
		return fmt.Errorf("stage the store's format: %w", err)
	}
	if err := d.commit(b); err != nil {
		return fmt.Errorf("store the store's format: %w", err)
	}
	return nil
}
