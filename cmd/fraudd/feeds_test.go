package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fraudd/fraudd/intel/netlists"
	"github.com/fraudd/fraudd/internal/testtools"
)

func runFeedsT(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = runFeeds(args, &o, &e)
	return code, o.String(), e.String()
}

func TestFeedsUsage(t *testing.T) {
	if code, _, errOut := runFeedsT(); code != 2 || !strings.Contains(errOut, "usage: fraudd feeds") {
		t.Errorf("no args: %d %q", code, errOut)
	}
	if code, _, errOut := runFeedsT("frobnicate"); code != 2 || !strings.Contains(errOut, "unknown command") {
		t.Errorf("unknown: %d %q", code, errOut)
	}
	if code, out, _ := runFeedsT("help"); code != 0 || !strings.Contains(out, "feeds status") {
		t.Errorf("help: %d %q", code, out)
	}
	if code, _, _ := runFeedsT("status", "-h"); code != 0 {
		t.Errorf("status -h: %d", code)
	}
	if code, _, _ := runFeedsT("status", "extra"); code != 2 {
		t.Errorf("stray argument: %d", code)
	}
	if code, _, errOut := runFeedsT("update", "--only", "geo"); code != 2 || !strings.Contains(errOut, "no upstream") {
		t.Errorf("update --only geo: %d %q", code, errOut)
	}
}

func TestFeedsStatus(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := runFeedsT("status", "--data-dir", dir)
	if code != 0 {
		t.Fatalf("status: %d %s", code, errOut)
	}
	for _, name := range netlists.FeedNames {
		if !strings.Contains(out, name) {
			t.Errorf("status output lacks %s:\n%s", name, out)
		}
	}
	if !strings.Contains(out, netlists.SourceEmbedded) || strings.Contains(out, netlists.SourceDataDir) {
		t.Errorf("status output:\n%s", out)
	}
	// A corrupt override is reported, not ignored.
	os.MkdirAll(filepath.Join(dir, netlists.FeedsSubdir), 0o755)
	os.WriteFile(filepath.Join(dir, netlists.FeedsSubdir, "tor.fdf"), []byte("garbage"), 0o644)
	if code, _, errOut := runFeedsT("status", "--data-dir", dir); code != 1 || !strings.Contains(errOut, "tor.fdf") {
		t.Errorf("corrupt override: %d %q", code, errOut)
	}
}

func TestFeedsBuild(t *testing.T) {
	from := "../../../shared/data"
	if _, err := os.Stat(filepath.Join(from, "SOURCES.md")); err != nil {
		testtools.Skip(t, "raw snapshots in "+from, "the shared data directory beside the repository")
	}
	out := t.TempDir()
	code, stdout, errOut := runFeedsT("build", "--from", from, "--out", out)
	if code != 0 {
		t.Fatalf("build: %d %s", code, errOut)
	}
	if !strings.Contains(stdout, fmt.Sprintf("wrote %d feeds", len(netlists.FeedNames))) {
		t.Errorf("build output:\n%s", stdout)
	}
	for _, name := range netlists.FeedNames {
		if _, err := os.Stat(filepath.Join(out, name+".fdf")); err != nil {
			t.Error(err)
		}
	}
	if code, _, _ := runFeedsT("build", "--from", t.TempDir(), "--out", t.TempDir()); code != 1 {
		t.Errorf("build from an empty dir: %d", code)
	}
}

func TestMain(m *testing.M) { os.Exit(testtools.Main(m)) }

// TestFeedsStatusListsInputs: README "IP → country" says the geo feed's
// header lists the AU-filler rule as its last input with the number of
// ranges it moved, readable with fraudd feeds status; status printed only
// the feed's own date, entries and origin.
func TestFeedsStatusListsInputs(t *testing.T) {
	code, out, errOut := runFeedsT("status", "--data-dir", t.TempDir())
	if code != 0 {
		t.Fatalf("status: %d %s", code, errOut)
	}
	var geo []string
	in := false
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(l, "geo "):
			in = true
		case in && strings.HasPrefix(l, "  "):
			geo = append(geo, l)
		default:
			in = false
		}
	}
	if len(geo) == 0 || !strings.Contains(geo[len(geo)-1], "rule:au-filler") {
		t.Fatalf("status lists no AU-filler rule as the geo feed's last input:\n%s", out)
	}
	if f := strings.Fields(geo[len(geo)-1]); f[len(f)-1] == "0" {
		t.Errorf("the AU-filler input names no count of ranges moved: %q", geo[len(geo)-1])
	}
}
