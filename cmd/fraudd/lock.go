package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// lockFile is the data dir's instance lock; it holds the owner's pid.
const lockFile = "fraudd.lock"

// errDataDirInUse is wrapped by lockDataDir when another process holds the lock.
var errDataDirInUse = errors.New("data dir is in use by another fraudd")

// lockDataDir takes an exclusive flock on <dir>/fraudd.lock and writes our
// pid into it, so a second fraudd on the same data dir stops at once with the
// first one's pid instead of failing later on Pebble's own lock with an
// errno. The kernel drops the lock when the process dies, so a crash never
// leaves a stale lock behind; the file itself stays.
func lockDataDir(dir string) (release func(), err error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			b, _ := os.ReadFile(path)
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil && pid > 0 {
				return nil, fmt.Errorf("%w (pid %d): %s", errDataDirInUse, pid, dir)
			}
			return nil, fmt.Errorf("%w: %s", errDataDirInUse, dir)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return func() {
		// Empty the pid first: a reader that wins the race for the lock
		// next must not report our pid as its rival.
		_ = f.Truncate(0)
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}
