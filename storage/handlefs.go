package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// handleFS is what one Pebble instance sees of the store's filesystem.
//
// A write that fails (a full disk, an I/O error, a failed fsync) stops the
// goroutine that made it, for good, after breaking the instance: Pebble does
// not survive write errors in its WAL (v2.1.7 panics with a mutex unlocked
// when closing a WAL that failed during a memtable rotation, a fatal error
// no recover catches) nor in its MANIFEST (Fatalf), so it never sees one.
// The store's callers do not wait on a broken instance (see DB.write), and
// the next Probe opens a new instance that replays what reached the disk.
// A failed fsync is never retried: the kernel may have dropped the pages it
// could not write, and a second fsync would report success without them.
//
// A fenced instance (replaced, or being closed after it broke) is frozen
// the same way: its writes stop before they reach the files the next
// instance uses, and its reads fail.
//
// Files outside the store's directory (a checkpoint's copy) are not the
// store's: their errors are returned as they are.
//
// The directory lock is the store's own, held across instances (see Open).
type handleFS struct {
	vfs.FS
	h   *handle
	dir string
}

// ours reports whether name is inside the store's directory.
func (fs handleFS) ours(name string) bool {
	return name == fs.dir || strings.HasPrefix(name, fs.dir+string(os.PathSeparator)) || strings.HasPrefix(name, fs.dir+"/")
}

var errFenced = errors.New("store instance was replaced after a fatal error")

// stall breaks the instance and parks the calling goroutine forever.
func (h *handle) stall(op string, err error) {
	if !h.fenced.Load() {
		h.setCause(fmt.Errorf("%s: %w", op, err))
	}
	h.breakDown()
	n := h.stalled.Add(1)
	if !h.fenced.Load() && n == 1 {
		msg := "storage: a write failed; this Pebble instance stops"
		if h.store.serving.Load() {
			msg += " and the store reopens at the next health probe"
		}
		h.log.Log(context.Background(), h.store.failLevel(), msg, "op", op, "err", err, "instance", h.gen)
	}
	select {}
}

// beforeWrite parks a fenced instance's writes.
func (fs handleFS) beforeWrite(op string) {
	if fs.h.fenced.Load() {
		fs.h.stall(op, errFenced)
	}
}

// afterWrite parks the goroutine of a failed write to the store's files
// and returns the errors of other files.
func (fs handleFS) afterWrite(name, op string, err error) error {
	if err != nil && fs.ours(name) {
		fs.h.stall(op+" "+name, err)
	}
	return err
}

func (fs handleFS) beforeRead() error {
	if fs.h.fenced.Load() {
		return errFenced
	}
	return nil
}

func (fs handleFS) wrap(f vfs.File, name string) vfs.File {
	return &handleFile{File: f, fs: fs, name: name}
}

func (fs handleFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	fs.beforeWrite("create")
	f, err := fs.FS.Create(name, category)
	if err := fs.afterWrite(name, "create", err); err != nil {
		return nil, err
	}
	return fs.wrap(f, name), nil
}

func (fs handleFS) Link(oldname, newname string) error {
	fs.beforeWrite("link")
	return fs.afterWrite(newname, "link", fs.FS.Link(oldname, newname))
}

func (fs handleFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	if err := fs.beforeRead(); err != nil {
		return nil, err
	}
	f, err := fs.FS.Open(name, opts...)
	if err != nil {
		return nil, err
	}
	return fs.wrap(f, name), nil
}

func (fs handleFS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	fs.beforeWrite("open")
	f, err := fs.FS.OpenReadWrite(name, category, opts...)
	if errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err := fs.afterWrite(name, "open", err); err != nil {
		return nil, err
	}
	return fs.wrap(f, name), nil
}

func (fs handleFS) OpenDir(name string) (vfs.File, error) {
	if err := fs.beforeRead(); err != nil {
		return nil, err
	}
	f, err := fs.FS.OpenDir(name)
	if err != nil {
		return nil, err
	}
	return fs.wrap(f, name), nil
}

func (fs handleFS) Remove(name string) error {
	fs.beforeWrite("remove")
	err := fs.FS.Remove(name)
	if errors.Is(err, os.ErrNotExist) {
		return err
	}
	return fs.afterWrite(name, "remove", err)
}

func (fs handleFS) RemoveAll(name string) error {
	fs.beforeWrite("remove")
	return fs.afterWrite(name, "remove", fs.FS.RemoveAll(name))
}

func (fs handleFS) Rename(oldname, newname string) error {
	fs.beforeWrite("rename")
	return fs.afterWrite(newname, "rename", fs.FS.Rename(oldname, newname))
}

func (fs handleFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	fs.beforeWrite("reuse")
	f, err := fs.FS.ReuseForWrite(oldname, newname, category)
	if err := fs.afterWrite(newname, "reuse", err); err != nil {
		return nil, err
	}
	return fs.wrap(f, newname), nil
}

func (fs handleFS) MkdirAll(dir string, perm os.FileMode) error {
	fs.beforeWrite("mkdir")
	return fs.afterWrite(dir, "mkdir", fs.FS.MkdirAll(dir, perm))
}

func (fs handleFS) Lock(string) (io.Closer, error) { return nopCloser{}, nil }

func (fs handleFS) List(dir string) ([]string, error) {
	if err := fs.beforeRead(); err != nil {
		return nil, err
	}
	return fs.FS.List(dir)
}

func (fs handleFS) Stat(name string) (vfs.FileInfo, error) {
	if err := fs.beforeRead(); err != nil {
		return nil, err
	}
	return fs.FS.Stat(name)
}

func (fs handleFS) Unwrap() vfs.FS { return fs.FS }

type nopCloser struct{}

func (nopCloser) Close() error { return nil }

// handleFile applies handleFS's rules to one open file.
type handleFile struct {
	vfs.File
	fs   handleFS
	name string
}

func (f *handleFile) Read(p []byte) (int, error) {
	if err := f.fs.beforeRead(); err != nil {
		return 0, err
	}
	return f.File.Read(p)
}

func (f *handleFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.fs.beforeRead(); err != nil {
		return 0, err
	}
	return f.File.ReadAt(p, off)
}

func (f *handleFile) Write(p []byte) (int, error) {
	f.fs.beforeWrite("write")
	n, err := f.File.Write(p)
	return n, f.fs.afterWrite(f.name, "write", err)
}

func (f *handleFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.beforeWrite("write")
	n, err := f.File.WriteAt(p, off)
	return n, f.fs.afterWrite(f.name, "write", err)
}

func (f *handleFile) Preallocate(off, n int64) error {
	f.fs.beforeWrite("preallocate")
	return f.fs.afterWrite(f.name, "preallocate", f.File.Preallocate(off, n))
}

func (f *handleFile) Sync() error {
	f.fs.beforeWrite("sync")
	return f.fs.afterWrite(f.name, "sync", f.File.Sync())
}

func (f *handleFile) SyncData() error {
	f.fs.beforeWrite("sync")
	return f.fs.afterWrite(f.name, "sync", f.File.SyncData())
}

func (f *handleFile) SyncTo(length int64) (bool, error) {
	f.fs.beforeWrite("sync")
	full, err := f.File.SyncTo(length)
	return full, f.fs.afterWrite(f.name, "sync", err)
}
