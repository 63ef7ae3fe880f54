package main

import (
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
)

// Modes of everything under the data directory: the store, the secrets and
// the refreshed feeds are the operator's alone.
const (
	dataFileMode = 0o600
	dataDirMode  = 0o700
)

// secureDataDir creates the data directory or tightens an existing one:
// every directory 0700, every file 0600. A directory that group or others
// could read is reported at WARN before it is tightened, since its contents
// may have been copied meanwhile. New files get the same modes from the
// process umask (see restrictUmask), whatever mode their creator asks for:
// Pebble creates its files 0666 and directories 0755.
func secureDataDir(dir string, log *slog.Logger) error {
	restrictUmask()
	st, err := os.Stat(dir)
	switch {
	case os.IsNotExist(err):
		// A link whose target is gone (under the shipped unit
		// /var/lib/fraudd is systemd's link to /var/lib/private/fraudd,
		// README Backups and restore) failed on "mkdir DIR: file exists",
		// which named neither the link nor its target.
		if target, lerr := os.Readlink(dir); lerr == nil {
			return fmt.Errorf("data dir %s is a symbolic link to %s, which does not exist: restore the directory it names (README: Backups and restore) or remove the link", dir, target)
		}
		if err := os.MkdirAll(dir, dataDirMode); err != nil {
			return fmt.Errorf("create data dir: %w", err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("data dir: %w", err)
	case !st.IsDir():
		return fmt.Errorf("data dir %s is not a directory", dir)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		log.Warn("data dir was readable or writable by group or others; setting it to 0700 and its files to 0600 (rotate the secrets if others may have read them)",
			"data_dir", dir, "mode", fmt.Sprintf("%04o", perm))
	}
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil // a link's target is not ours to change
		}
		want := os.FileMode(dataFileMode)
		if d.IsDir() {
			want = dataDirMode
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Mode().Perm() != want {
			if err := os.Chmod(path, want); err != nil {
				return fmt.Errorf("tighten %s: %w", path, err)
			}
		}
		return nil
	})
}
