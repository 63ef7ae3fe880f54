package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestEmptyDataDirIsRefused: FRAUDD_DATA_DIR set to nothing, or --data-dir
// "", is refused naming the variable or flag and what it accepts, as any
// other bad value; serve stopped on "create data dir: mkdir : no such file
// or directory", naming neither, and feeds read it as ./data.
func TestEmptyDataDirIsRefused(t *testing.T) {
	const forms = "accepted: a directory path"
	if _, err := parseServe(nil, envVars{"FRAUDD_DATA_DIR": ""}); err == nil ||
		!strings.Contains(err.Error(), `FRAUDD_DATA_DIR="" is not valid (empty)`) || !strings.Contains(err.Error(), forms) {
		t.Errorf("serve with FRAUDD_DATA_DIR empty: %v", err)
	}
	if _, err := parseServe([]string{"--data-dir", ""}, envVars{}); err == nil ||
		!strings.Contains(err.Error(), `--data-dir="" is not valid (empty)`) || !strings.Contains(err.Error(), forms) {
		t.Errorf("serve --data-dir '': %v", err)
	}
	// A flag outranks an empty variable, as any other.
	if c, err := parseServe([]string{"--data-dir", "/srv/fraudd"}, envVars{"FRAUDD_DATA_DIR": ""}); err != nil || c.dataDir != "/srv/fraudd" {
		t.Errorf("--data-dir over an empty FRAUDD_DATA_DIR: %v", err)
	}

	t.Setenv("FRAUDD_DATA_DIR", "")
	for _, args := range [][]string{
		{"admin", "--admin-token", "adm_x", "mail"},
		{"backup", t.TempDir()},
		{"feeds", "status"},
		{"feeds", "update", "--only", "tor"},
	} {
		var out, errb bytes.Buffer
		code := run(args, &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), `FRAUDD_DATA_DIR="" is not valid (empty)`) || !strings.Contains(errb.String(), forms) {
			t.Errorf("%s with FRAUDD_DATA_DIR empty: exit %d, stderr %q", strings.Join(args, " "), code, errb.String())
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"feeds", "status", "--data-dir", ""}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "-data-dir") {
		t.Errorf("feeds status --data-dir '': exit %d, stderr %q", code, errb.String())
	}
}
