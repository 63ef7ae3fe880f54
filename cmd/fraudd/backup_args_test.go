package main

import (
	"bytes"
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
