// Package backup writes a restorable copy of a data directory, also while
// the server runs: a checkpoint of the store (a consistent Pebble copy of
// everything acknowledged before it started) and the secret files beside it.
// The backup directory is a data directory, with the store's stamp file
// (storage.StampFileName) when it has one: copy it into place and start
// fraudd on it to restore.
package backup

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"unicode"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/storage"
)

// ErrExists is returned for a target directory that exists and is not empty:
// a backup never overwrites anything.
var ErrExists = errors.New("backup directory exists and is not empty")

// ErrStoreUnavailable is returned when the store could not be copied
// because it is unavailable (storage.ErrUnavailable).
var ErrStoreUnavailable = errors.New("store unavailable")

// ErrInvalid is returned for a target that cannot hold a backup (not
// absolute, inside the data directory, a file).
var ErrInvalid = errors.New("invalid backup directory")

// ErrTargetFull is returned (wrapped) when the backup directory's file
// system ran out of space or quota during the copy: the operator's to
// solve, not the server's failure. What was written is removed.
var ErrTargetFull = errors.New("the backup directory's file system is full")

// Store is the part of the store a backup needs; *storage.DB implements it.
type Store interface {
	// Checkpoint writes a consistent copy of the store into dir, which must
	// not exist.
	Checkpoint(dir string) error
}

// Source is what is backed up.
type Source struct {
	DataDir string
	Store   Store
	// SecretOutside is set when the master secret came from --secret or
	// FRAUDD_SECRET rather than the data dir's master-secret file.
	SecretOutside bool
}

// Report says what a backup holds.
type Report struct {
	Dir   string
	Files []string // relative to Dir; "pebble/" is the store
	Notes []string // what the operator must keep beside the backup
}

// StoreDir is the store's directory inside a data directory.
const StoreDir = "pebble"

// UnfinishedFile marks a backup directory whose Write has not finished: it
// is written (synced) before anything else and removed (the directory
// synced) after everything else. A failed Write removes what it wrote, but
// a kill -9, an OOM kill or a power loss midway leaves a directory that
// looks like a backup, some of whose files are missing or cut short (a
// checkpoint's WAL not yet copied: Pebble would open it as an empty or
// older store, and a missing master-secret would be generated anew), so a
// start on it, as a restore does, must refuse it (CheckFinished).
const UnfinishedFile = "backup-unfinished"

// CheckFinished refuses a data directory that holds UnfinishedFile: a
// backup whose writer stopped midway, restored (or started on) as it is.
func CheckFinished(dataDir string) error {
	path := filepath.Join(dataDir, UnfinishedFile)
	_, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("check for %s: %w", path, err)
	}
	return fmt.Errorf("%w: %s holds %s, so it is a backup that did not finish (its writer was stopped midway) and its store may miss records or be empty: restore a backup that finished, or take a new one (README: Backups and restore)", ErrUnfinished, dataDir, UnfinishedFile)
}

// ErrUnfinished is CheckFinished's error.
var ErrUnfinished = errors.New("unfinished backup")

// writeMu serialises Write (see there).
var writeMu sync.Mutex

// Secret files of a data directory, copied when present.
var secretFiles = []string{"master-secret", "admin-token"}

// Write backs src up into dir. dir must be absolute, outside the data
// directory, and absent or empty; it is created 0700, and every file in it
// is 0600 and synced before Write returns. A failed backup removes what it
// wrote.
func Write(src Source, dir string) (rep *Report, err error) {
	// One backup at a time: an empty directory is a valid target, so a
	// second backup into the directory a first one has just created would
	// be let in, and whichever failed would then remove the other's files
	// with its own while the other reported success.
	writeMu.Lock()
	defer writeMu.Unlock()
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("%w: %q is not an absolute path", ErrInvalid, dir)
	}
	// A blank or newline kept from a script or a file names another
	// directory: the backup was written to "/srv/backups/x\n" beside the
	// one the operator will look in at restore time. Refused, not trimmed,
	// as --data-dir is.
	if strings.TrimSpace(dir) != dir || strings.ContainsFunc(dir, unicode.IsControl) {
		return nil, fmt.Errorf("%w: %q has surrounding whitespace or a control character", ErrInvalid, dir)
	}
	dir = filepath.Clean(dir)
	data, err := filepath.Abs(src.DataDir)
	if err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	if dir == data || strings.HasPrefix(dir, data+string(filepath.Separator)) {
		return nil, fmt.Errorf("%w: %s is inside the data directory %s", ErrInvalid, dir, data)
	}
	created, err := prepare(dir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err == nil {
			return
		}
		if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
			err = fmt.Errorf("%w (%s): %w", ErrTargetFull, dir, err)
		}
		if created {
			_ = os.RemoveAll(dir)
			return
		}
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}()
	if err := markUnfinished(dir); err != nil {
		return nil, err
	}
	rep = &Report{Dir: dir}
	// The stamp file is read before the checkpoint: the store's own stamp
	// moves first, so the checkpoint holds this stamp or a later one, and
	// the restored store is never behind the stamp it comes with.
	stamp, _, err := storage.ReadStampFile(vfs.Default, filepath.Join(src.DataDir, storage.StampFileName))
	if err != nil {
		return nil, err
	}
	if err := src.Store.Checkpoint(filepath.Join(dir, StoreDir)); err != nil {
		if errors.Is(err, storage.ErrUnavailable) {
			return nil, fmt.Errorf("%w: %w", ErrStoreUnavailable, err)
		}
		return nil, fmt.Errorf("checkpoint the store: %w", err)
	}
	if err := tighten(filepath.Join(dir, StoreDir)); err != nil {
		return nil, err
	}
	rep.Files = append(rep.Files, StoreDir+"/")
	for _, name := range secretFiles {
		ok, err := copySecret(filepath.Join(src.DataDir, name), filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		if ok {
			rep.Files = append(rep.Files, name)
		}
	}
	if stamp != 0 {
		// With the checkpoint's files listed, as a clean stop lists its
		// own: a restore copied incompletely is refused at its start.
		if err := storage.WriteClosedStampFile(vfs.Default, filepath.Join(dir, storage.StampFileName), stamp, filepath.Join(dir, StoreDir)); err != nil {
			return nil, err
		}
		if err := os.Chmod(filepath.Join(dir, storage.StampFileName), 0o600); err != nil {
			return nil, fmt.Errorf("tighten the stamp file: %w", err)
		}
		rep.Files = append(rep.Files, storage.StampFileName)
	}
	if src.SecretOutside {
		rep.Notes = append(rep.Notes, "the master secret was given by --secret/FRAUDD_SECRET, not a file: keep it with this backup; a restore needs the same value")
	} else if !contains(rep.Files, "master-secret") {
		rep.Notes = append(rep.Notes, "no master-secret file in the data directory: a restore needs the secret the store was written with")
	}
	// Everything is synced before the mark goes, and its removal is synced
	// too: a backup is finished only once every file of it is on disk.
	if err := SyncDir(dir); err != nil {
		return nil, err
	}
	if err := os.Remove(filepath.Join(dir, UnfinishedFile)); err != nil {
		return nil, fmt.Errorf("mark the backup finished: %w", err)
	}
	if err := SyncDir(dir); err != nil {
		return nil, err
	}
	return rep, nil
}

// markUnfinished writes dir's UnfinishedFile, synced with its name.
func markUnfinished(dir string) error {
	path := filepath.Join(dir, UnfinishedFile)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	_, werr := f.WriteString("fraudd backup in progress; a backup still holding this file did not finish: do not restore it\n")
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("write %s: %w", path, werr)
	}
	return SyncDir(dir)
}

// prepare makes dir an empty directory, refusing one with anything in it.
func prepare(dir string) (created bool, err error) {
	st, err := os.Stat(dir)
	switch {
	case os.IsNotExist(err):
		if err := os.MkdirAll(dir, 0o700); err != nil {
			if unplaceable(err) {
				// The operator named a place this server may not write.
				return false, fmt.Errorf("%w: create %s: %w", ErrInvalid, dir, err)
			}
			return false, fmt.Errorf("create %s: %w", dir, err)
		}
		return true, SyncDir(filepath.Dir(dir))
	case err != nil && unplaceable(err):
		// A file where a parent directory should be, a name too long:
		// the operator's to correct, as a path this server may not write.
		return false, fmt.Errorf("%w: %s: %w", ErrInvalid, dir, err)
	case err != nil:
		return false, fmt.Errorf("backup directory: %w", err)
	case !st.IsDir():
		return false, fmt.Errorf("%w: %s is not a directory", ErrInvalid, dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, fmt.Errorf("backup directory: %w", err)
	}
	if len(entries) > 0 {
		return false, fmt.Errorf("%w: %s", ErrExists, dir)
	}
	return false, nil
}

// unplaceable reports whether creating or reading a target path failed
// because of the path itself (a file among its parents, a parent that
// cannot be made, as under /proc, a name too long, no permission, a
// read-only file system) rather than a fault of this machine's disks.
func unplaceable(err error) bool {
	for _, e := range []error{fs.ErrPermission, fs.ErrNotExist, syscall.EROFS, syscall.ENOTDIR, syscall.ENAMETOOLONG, syscall.ELOOP} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// copySecret copies a secret file 0600 and syncs it; a missing source is
// not an error (the value came from a flag).
func copySecret(from, to string) (bool, error) {
	in, err := os.Open(from)
	if os.IsNotExist(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", from, err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return false, fmt.Errorf("create %s: %w", to, err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return false, fmt.Errorf("copy %s: %w", from, err)
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return false, fmt.Errorf("sync %s: %w", to, err)
	}
	if err := out.Close(); err != nil {
		return false, fmt.Errorf("close %s: %w", to, err)
	}
	return true, nil
}

// tighten makes the checkpoint's directories 0700 and files 0600, whatever
// the process umask let Pebble create them with.
func tighten(root string) error {
	return filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		mode := os.FileMode(0o600)
		if d.IsDir() {
			mode = 0o700
		}
		if err := os.Chmod(path, mode); err != nil {
			return fmt.Errorf("tighten %s: %w", path, err)
		}
		return nil
	})
}

// SyncDir makes the entries of dir durable: a new file's name lives in its
// directory, which a sync of the file alone does not write.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
