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

// TestServerURLRefusedAsRead: the --url of admin, backup and health (and
// FRAUDD_URL) was taken as any string, so one without its scheme
// (`--url 127.0.0.1:8081`, the form --addr takes), empty or misspelt
// failed only when the call was made, exit 1, on Go's "first path segment
// in URL cannot contain colon" or "unsupported protocol scheme", naming
// neither the flag nor what it takes. It is a usage error naming the flag
// or variable, before any call; a base URL with a path prefix serves.
func TestServerURLRefusedAsRead(t *testing.T) {
	for _, c := range []struct {
		url  string
		want string
	}{
		{"127.0.0.1:8081", `--url="127.0.0.1:8081" is not valid (no http:// or https:// in front); accepted: http(s)://host[:port]`},
		{"", `--url="" is not valid (empty)`},
		{"ftp://x", `--url="ftp://x" is not valid (not http:// or https://)`},
		{"http://:8080", `(no host)`},
		{"http://x:99999", `(bad port)`},
		{"http://x/?a=1", `(a user, query or fragment`},
	} {
		for _, cmd := range [][]string{{"admin", "--admin-token", "t", "--url", c.url, "mail"}, {"health", "--url", c.url}, {"backup", "--url", c.url, t.TempDir() + "/b"}} {
			var out, errb bytes.Buffer
			code := run(cmd, &out, &errb)
			if e := errb.String(); code != 2 || !strings.HasPrefix(e, "fraudd "+cmd[0]+": ") || !strings.Contains(e, c.want) {
				t.Errorf("%q: exit %d, stderr %q; want 2 with %q", cmd, code, errb.String(), c.want)
			}
		}
	}
	t.Setenv("FRAUDD_URL", "localhost:8080")
	var out, errb bytes.Buffer
	if code := run([]string{"health"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), `FRAUDD_URL="localhost:8080" is not valid`) {
		t.Errorf("FRAUDD_URL without a scheme: exit %d, stderr %q", code, errb.String())
	}
	for _, ok := range []string{"http://127.0.0.1:8080", "https://ops.example/fraudd/", "http://[::1]:8081", "http://localhost"} {
		if err := (serverURL{new(string)}).Set(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
}
