package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestHealthRefusesNonPositiveTimeout: --timeout 0 or below would give the
// probe no timeout at all (http.Client reads it as none), so a HEALTHCHECK
// against a hung server would hang with it; it is a usage error instead,
// and what the flag accepts says so: it said "(0 = off)", and a refused
// FRAUDD_TIMEOUT was reported as --timeout.
func TestHealthRefusesNonPositiveTimeout(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  string
		want string
	}{
		{args: []string{"--timeout", "0"}, want: `--timeout="0" is not valid (not above 0); accepted: a Go duration above 0`},
		{args: []string{"--timeout", "-1s"}, want: `--timeout="-1s" is not valid (not above 0)`},
		{args: []string{"--timeout", "soon"}, want: `--timeout="soon" is not valid`},
		{env: "0", want: `FRAUDD_TIMEOUT="0" is not valid (not above 0); accepted: a Go duration above 0`},
	} {
		t.Run(strings.Join(c.args, " ")+c.env, func(t *testing.T) {
			if c.env != "" {
				t.Setenv("FRAUDD_TIMEOUT", c.env)
			}
			var out, errb bytes.Buffer
			code := run(append([]string{"health", "--url", "http://127.0.0.1:1"}, c.args...), &out, &errb)
			if code != 2 || !strings.Contains(errb.String(), c.want) || strings.Contains(errb.String(), "0 = off") {
				t.Errorf("exit %d, stderr %q; want 2 with %q", code, errb.String(), c.want)
			}
		})
	}
	var out, errb bytes.Buffer
	if code := run([]string{"health", "-h"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "(above 0)") || strings.Contains(out.String(), "0 = off") {
		t.Errorf("health -h: exit %d\n%s", code, out.String())
	}
}

// TestFeedsUpdateRefusesNonPositiveTimeout: fraudd feeds update --timeout 0
// is refused as health's is; it started an update whose every download
// failed at once with "context deadline exceeded".
func TestFeedsUpdateRefusesNonPositiveTimeout(t *testing.T) {
	for _, v := range []string{"0", "-5m"} {
		code, _, errOut := runFeedsT("update", "--only", "tor", "--data-dir", t.TempDir(), "--timeout", v)
		if code != 2 || !strings.Contains(errOut, "-timeout: not above 0") {
			t.Errorf("--timeout %s: exit %d, stderr %q", v, code, errOut)
		}
	}
}
