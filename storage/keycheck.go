package storage

import (
	"crypto/subtle"
	"errors"
	"fmt"
)

// keyCheckKey holds a value derived from the master secret (never the secret
// itself), so a start with a lost or different secret is refused instead of
// silently answering 401 to every key and failing to unseal what it sealed.
var keyCheckKey = []byte{prefixMeta, 'k', 'e', 'y', 'c', 'h', 'e', 'c', 'k'}

// HasKeyCheck reports whether the store records which master secret wrote it.
func (d *DB) HasKeyCheck() (bool, error) {
	_, err := d.get(keyCheckKey)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read key check: %w", err)
	}
	return true, nil
}

// VerifyKeyCheck compares check with the value stored on the first start and
// stores it (synced) when there is none yet: a new store, or one written
// before key checks existed. It returns ErrKeyCheckMismatch when they differ.
func (d *DB) VerifyKeyCheck(check []byte) error {
	if len(check) == 0 {
		return errors.New("empty key check")
	}
	stored, err := d.get(keyCheckKey)
	switch {
	case errors.Is(err, ErrNotFound):
		b := d.newBatch()
		if err := b.Set(keyCheckKey, check, nil); err != nil {
			_ = b.Close()
			return fmt.Errorf("stage key check: %w", err)
		}
		if err := d.commit(b); err != nil {
			return fmt.Errorf("store key check: %w", err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("read key check: %w", err)
	}
	if subtle.ConstantTimeCompare(stored, check) != 1 {
		return ErrKeyCheckMismatch
	}
	return nil
}
