package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBackupArgsSaysWhatIsWrong: a wrong count of arguments printed the
// usage alone (exit 2) without saying what was wrong, so `fraudd backup
// DIR --data-dir D` (flags after DIR, as the admin commands take them)
// left the operator to guess why no backup was taken. Each case now says
// it in one line; -h prints the help on stdout, exit 0, as serve's does.
func TestBackupArgsSaysWhatIsWrong(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "fraudd backup: want one argument, DIR"},
		{[]string{dir + "/b", "--data-dir", dir}, `fraudd backup: "--data-dir" after DIR: flags go before it`},
		{[]string{dir + "/b", dir + "/c"}, `fraudd backup: unexpected argument "` + dir + `/c" (want one, DIR)`},
	} {
		var out, errb bytes.Buffer
		code := runBackup(c.args, &out, &errb)
		if code != 2 || out.Len() != 0 || !strings.HasPrefix(errb.String(), c.want) {
			t.Errorf("fraudd backup %q: exit %d, stdout %q, stderr %q; want 2 and %q", c.args, code, out.String(), errb.String(), c.want)
		}
	}
	var out, errb bytes.Buffer
	if code := runBackup([]string{"-h"}, &out, &errb); code != 0 || errb.Len() != 0 ||
		!strings.HasPrefix(out.String(), "usage: fraudd backup [flags] DIR") || !strings.Contains(out.String(), "env FRAUDD_DATA_DIR") {
		t.Errorf("fraudd backup -h: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
}

// TestBackupOfNoDataDirSaysSo: a --data-dir that holds no store (a typo)
// was reported by the online attempt alone ("no --admin-token and cannot
// read DIR/admin-token", "connection refused"), which did not say that
// there was no store to back up; the line now says it first.
func TestBackupOfNoDataDirSaysSo(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "dat")
	for _, args := range [][]string{
		{"--data-dir", missing, "--url", "http://127.0.0.1:1"},
		{"--data-dir", missing, "--url", "http://127.0.0.1:1", "--admin-token", "adm_x"},
	} {
		var out, errb bytes.Buffer
		code := runBackup(append(args, filepath.Join(t.TempDir(), "b")), &out, &errb)
		want := "fraudd backup: --data-dir " + missing + " holds no store (" + filepath.Join(missing, "pebble") + "), and no server took the backup either: "
		if code != 1 || !strings.HasPrefix(errb.String(), want) {
			t.Errorf("%q: exit %d, stderr %q; want 1 and %q", args, code, errb.String(), want)
		}
	}
}

// TestBackupDirWithABlankRefused: DIR with surrounding whitespace or a
// control character is refused before anything is written, as --data-dir
// is (internal/backup refuses it too, for the operator API).
func TestBackupDirWithABlankRefused(t *testing.T) {
	base := t.TempDir()
	for _, dir := range []string{base + "/b ", base + "/b\n", " " + base + "/b"} {
		var out, errb bytes.Buffer
		code := runBackup([]string{"--data-dir", t.TempDir(), "--url", "http://127.0.0.1:1", dir}, &out, &errb)
		if code != 2 || !strings.HasPrefix(errb.String(), "fraudd backup: DIR ") || !strings.Contains(errb.String(), "is not valid") {
			t.Errorf("%q: exit %d, stderr %q", dir, code, errb.String())
		}
	}
	if entries, _ := os.ReadDir(base); len(entries) != 0 {
		t.Errorf("created %d entries", len(entries))
	}
}
