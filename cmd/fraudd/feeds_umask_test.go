//go:build unix

package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestFeedsUpdateRestrictsUmask: `fraudd feeds update` runs with the umask
// serve and backup run with (077), and the data dir and feeds/ it creates
// are 0700, as the README says of everything under the data dir; they were
// 0755 and the next start warned of a readable data dir. The update itself
// fails at once here (a 1ns timeout): the directories come first.
func TestFeedsUpdateRestrictsUmask(t *testing.T) {
	defer syscall.Umask(syscall.Umask(0o022))
	data := filepath.Join(t.TempDir(), "data")
	runFeedsT("update", "--only", "tor", "--timeout", "1ns", "--data-dir", data)
	for _, dir := range []string{data, filepath.Join(data, "feeds")} {
		st, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode().Perm(); got != 0o700 {
			t.Errorf("%s: mode %04o, want 0700", dir, got)
		}
	}
	if got := syscall.Umask(0o022); got != 0o077 {
		t.Errorf("umask after feeds update %04o, want 0077", got)
	}
}
