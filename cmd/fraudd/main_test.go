package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestFlagsWithoutCommandServe: flags without a command are serve's, as
// `fraudd -h` ("the default when no command is given") and the README say;
// `fraudd --addr 127.0.0.1:0 --data-dir DIR` failed with unknown command
// "--addr". The values here do not parse, so serve refuses them by name
// instead of starting; the help and version flags keep their meaning.
func TestFlagsWithoutCommandServe(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--addr", "junk", "--data-dir", t.TempDir()}, `fraudd serve: --addr="junk" is not valid (not host:port)`},
		{[]string{"-addr=junk"}, `fraudd serve: --addr="junk" is not valid`},
		{[]string{"--no-such-flag"}, "fraudd serve: flag provided but not defined: -no-such-flag"},
	} {
		var out, errb bytes.Buffer
		code := run(c.args, &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), c.want) || strings.Contains(errb.String(), "unknown command") {
			t.Errorf("fraudd %s: exit %d, stderr %q; want 2 with %q", strings.Join(c.args, " "), code, errb.String(), c.want)
		}
	}
	for _, args := range [][]string{{"-h"}, {"--help"}, {"-help"}, {"help"}} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 0 || !strings.Contains(out.String(), "commands:") {
			t.Errorf("fraudd %s: exit %d, stdout %q", args[0], code, out.String())
		}
	}
	for _, args := range [][]string{{"--version"}, {"-version"}, {"version"}} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 0 || strings.TrimSpace(out.String()) != version {
			t.Errorf("fraudd %s: exit %d, stdout %q", args[0], code, out.String())
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"frobnicate"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), `unknown command "frobnicate"`) {
		t.Errorf("unknown command: exit %d, stderr %q", code, errb.String())
	}
}

// TestVersionTakesNoArguments: `fraudd version --bogus` printed the version
// and exited 0, the flag ignored without a word; every other command
// refuses an argument it does not know with one line and exit 2.
func TestVersionTakesNoArguments(t *testing.T) {
	for _, args := range [][]string{{"version", "--bogus"}, {"--version", "extra"}, {"version", "-h"}} {
		var out, errb bytes.Buffer
		code := run(args, &out, &errb)
		if code != 2 || out.Len() != 0 || !strings.Contains(errb.String(), "fraudd version: unexpected argument "+`"`+args[1]+`"`) || strings.Count(errb.String(), "\n") != 1 {
			t.Errorf("fraudd %s: exit %d, stdout %q, stderr %q; want 2 and one line", strings.Join(args, " "), code, out.String(), errb.String())
		}
	}
}
