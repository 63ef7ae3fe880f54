package main

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
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

// TestDataDirWithNewlineIsRefused: FRAUDD_DATA_DIR ending in a newline (a
// value read from a file or a manifest with it) or a blank named another
// directory: serve created "/srv/fraudd\n" and started an empty store beside
// the real one, every key answering 401, and feeds, backup and admin looked
// there too. Each is now refused with one line naming the variable or flag.
func TestDataDirWithNewlineIsRefused(t *testing.T) {
	const forms = "accepted: a directory path"
	for _, c := range []struct{ v, why string }{
		{"/srv/fraudd\n", "surrounding whitespace"},
		{" /srv/fraudd", "surrounding whitespace"},
		{"/srv/fraudd\r\n", "surrounding whitespace"},
		{"/srv/fr\x00audd", "a control character inside"},
		{"/srv/fr\naudd", "a control character inside"},
	} {
		if _, err := parseServe(nil, envVars{"FRAUDD_DATA_DIR": c.v}); err == nil ||
			!strings.Contains(err.Error(), "FRAUDD_DATA_DIR=") || !strings.Contains(err.Error(), "("+c.why+")") || !strings.Contains(err.Error(), forms) {
			t.Errorf("serve with FRAUDD_DATA_DIR=%q: %v", c.v, err)
		}
		if _, err := parseServe([]string{"--data-dir", c.v}, envVars{}); err == nil || !strings.Contains(err.Error(), "("+c.why+")") {
			t.Errorf("serve --data-dir %q: %v", c.v, err)
		}
	}
	// A path with a blank inside is a path.
	if c, err := parseServe([]string{"--data-dir", "/srv/my data"}, envVars{}); err != nil || c.dataDir != "/srv/my data" {
		t.Errorf("--data-dir with a blank inside: %v", err)
	}

	t.Setenv("FRAUDD_DATA_DIR", t.TempDir()+"\n")
	for _, args := range [][]string{
		{"admin", "mail"},
		{"backup", t.TempDir()},
		{"feeds", "status"},
		{"feeds", "update", "--only", "tor"},
	} {
		var out, errb bytes.Buffer
		code := run(args, &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), "(surrounding whitespace)") || !strings.Contains(errb.String(), forms) {
			t.Errorf("%s with FRAUDD_DATA_DIR ending in a newline: exit %d, stderr %q", strings.Join(args, " "), code, errb.String())
		}
	}
}

// TestEtcdDirWithNewlineIsRefused: FRAUDD_CLUSTER_ETCD_DIR ending in a
// newline named another directory, and the embedded etcd member came up
// there as a new one with an empty store beside its own; it is refused as
// FRAUDD_DATA_DIR is. Empty stays the default, <data-dir>/etcd.
func TestEtcdDirWithNewlineIsRefused(t *testing.T) {
	base := envVars{"FRAUDD_CLUSTER_EMBEDDED_ETCD": "true", "FRAUDD_CLUSTER_NODE_ID": "n1", "FRAUDD_DATA_DIR": "/d"}
	with := func(v string) envVars {
		e := envVars{"FRAUDD_CLUSTER_ETCD_DIR": v}
		for k, x := range base {
			e[k] = x
		}
		return e
	}
	for _, v := range []string{"/d/etcd\n", " /d/etcd", "/d/et\x00cd"} {
		if _, err := parseServe(nil, with(v)); err == nil || !strings.Contains(err.Error(), "FRAUDD_CLUSTER_ETCD_DIR=") ||
			!strings.Contains(err.Error(), "accepted: a directory path") || strings.Contains(err.Error(), "\n") {
			t.Errorf("FRAUDD_CLUSTER_ETCD_DIR=%q: %v; want one line refusing it", v, err)
		}
	}
	for v, want := range map[string]string{"": "/d/etcd", "/srv/etcd": "/srv/etcd"} {
		c, err := parseServe(nil, with(v))
		if err != nil || c.cluster.embedDir != want {
			t.Errorf("FRAUDD_CLUSTER_ETCD_DIR=%q: err %v; want %s", v, err, want)
		}
	}
}

// TestDanglingDataDirLinkNamed: a data dir that is a link whose target is
// gone (the shipped unit's /var/lib/fraudd after its target was moved
// aside) stopped on "create data dir: mkdir DIR: file exists", naming
// neither the link nor its target; the line now names both, and nothing
// is created.
func TestDanglingDataDirLinkNamed(t *testing.T) {
	base := t.TempDir()
	target := filepath.Join(base, "private", "fraudd")
	link := filepath.Join(base, "fraudd")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	err := secureDataDir(link, slog.New(slog.NewTextHandler(io.Discard, nil)))
	want := "data dir " + link + " is a symbolic link to " + target + ", which does not exist"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want %q", err, want)
	}
	if _, err := os.Stat(filepath.Dir(target)); !os.IsNotExist(err) {
		t.Errorf("created %s: %v", filepath.Dir(target), err)
	}
}
