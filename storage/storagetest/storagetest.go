// Package storagetest gives the tests of the store's users a file system
// whose writes can be made to fail, to stop a store the way a full or
// failing disk does.
package storagetest

import (
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// FailingWrites is an in-memory file system whose every write fails with
// errorfs.ErrInjected while the returned switch is on.
func FailingWrites() (vfs.FS, *atomic.Bool) {
	var failing atomic.Bool
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		if failing.Load() && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			return errorfs.ErrInjected
		}
		return nil
	}))
	return fs, &failing
}
