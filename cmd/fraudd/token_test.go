package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAdminTokenIsTrimmed: a token given with surrounding whitespace (the
// admin-token file's newline, copied with it) is the token without it, for
// serve and for the admin and backup commands alike; before, serve started
// with the newline in its token and answered 401 to the token, and `fraudd
// admin` failed with "net/http: invalid header field value".
func TestAdminTokenIsTrimmed(t *testing.T) {
	for _, c := range []struct {
		env  envVars
		args []string
	}{
		{env: envVars{"FRAUDD_ADMIN_TOKEN": "adm_trim\n"}},
		{env: envVars{"FRAUDD_ADMIN_TOKEN": " \tadm_trim \r\n"}},
		{args: []string{"--admin-token", "adm_trim\n"}},
		{args: []string{"--admin-token=  adm_trim"}},
	} {
		cfg, err := parseServe(c.args, c.env)
		if err != nil || cfg.adminToken != "adm_trim" {
			t.Errorf("serve %q %q: token %q, err %v; want adm_trim", c.env, c.args, tokenOf(cfg), err)
		}
	}
	// Empty stays the default: the token in <data-dir>/admin-token.
	if cfg, err := parseServe(nil, envVars{"FRAUDD_ADMIN_TOKEN": ""}); err != nil || cfg.adminToken != "" {
		t.Errorf("FRAUDD_ADMIN_TOKEN empty: %q %v", tokenOf(cfg), err)
	}

	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"mail":[]}`))
	}))
	defer srv.Close()
	var out, errb bytes.Buffer
	if code := run([]string{"admin", "--url", srv.URL, "--admin-token", "adm_trim\n", "mail"}, &out, &errb); code != 0 {
		t.Fatalf("admin --admin-token with a newline: exit %d\n%s", code, errb.String())
	}
	t.Setenv("FRAUDD_ADMIN_TOKEN", "adm_trim\n")
	if code := run([]string{"admin", "--url", srv.URL, "mail"}, &out, &errb); code != 0 {
		t.Fatalf("admin with FRAUDD_ADMIN_TOKEN ending in a newline: exit %d\n%s", code, errb.String())
	}
	if len(got) != 2 || got[0] != "Bearer adm_trim" || got[1] != "Bearer adm_trim" {
		t.Errorf("Authorization sent: %q", got)
	}
}

// TestAdminTokenRefusesWhitespaceInside: a token that was only whitespace,
// or holds whitespace or a control character inside, is refused with one
// line naming the variable or flag and what it accepts, without the value
// (a token must not land in a log).
func TestAdminTokenRefusesWhitespaceInside(t *testing.T) {
	const secret = "adm_se"
	for _, c := range []struct {
		env  envVars
		args []string
		want string
	}{
		{env: envVars{"FRAUDD_ADMIN_TOKEN": "\n"}, want: "FRAUDD_ADMIN_TOKEN is not valid (only whitespace)"},
		{env: envVars{"FRAUDD_ADMIN_TOKEN": secret + " cret"}, want: "FRAUDD_ADMIN_TOKEN is not valid (whitespace or a control character inside)"},
		{env: envVars{"FRAUDD_ADMIN_TOKEN": secret + "\x00cret"}, want: "FRAUDD_ADMIN_TOKEN is not valid"},
		{args: []string{"--admin-token", secret + "\ncret\n"}, want: "--admin-token is not valid (whitespace or a control character inside)"},
		{args: []string{"--admin-token", "  "}, want: "--admin-token is not valid (only whitespace)"},
	} {
		_, err := parseServe(c.args, c.env)
		if err == nil {
			t.Errorf("serve %q %q: accepted", c.env, c.args)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, c.want) || !strings.Contains(msg, "accepted: one word") || strings.Contains(msg, "\n") || strings.Contains(msg, secret) {
			t.Errorf("serve %q %q: %q; want one line with %q and the forms, without the value", c.env, c.args, msg, c.want)
		}
	}
	for _, cmd := range [][]string{
		{"admin", "--admin-token", secret + " cret", "mail"},
		{"backup", "--admin-token", secret + "\tcret", t.TempDir()},
	} {
		var out, errb bytes.Buffer
		code := run(cmd, &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), "--admin-token is not valid") || strings.Contains(errb.String(), secret) {
			t.Errorf("%s: exit %d, stderr %q; want 2 naming --admin-token without the value", cmd[0], code, errb.String())
		}
	}
}

// TestAdminTokenFileEmpty: an empty admin-token file is refused by name
// rather than sent as an empty bearer token.
func TestAdminTokenFileEmpty(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "admin-token"), []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := adminToken("", dir); err == nil || !strings.Contains(err.Error(), "is empty") {
		t.Errorf("empty admin-token file: %v", err)
	}
}

func tokenOf(c *serveConfig) string {
	if c == nil {
		return "<no config>"
	}
	return c.adminToken
}
