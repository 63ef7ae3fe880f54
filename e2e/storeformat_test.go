package e2e

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// TestNewerStoreFormatStopsTheStart: a data directory a build of a newer
// store format wrote (a downgrade, or a backup of the newer release restored
// under this one) stops the start with one ERROR line naming both formats,
// and leaves the store as it was: put back under a build that reads it (here
// the format record as this build writes it), it serves its accounts. Before,
// nothing in the store said which build wrote it: the older build served,
// and each record of a version it did not know failed (or was forgotten)
// only when it was read.
func TestNewerStoreFormatStopsTheStart(t *testing.T) {
	dir := t.TempDir()
	s := StartServer(t, &Server{Bin: bin, DataDir: dir})
	a := s.CreateAccount(t, map[string]any{"email": "format@example.com"})
	if err := s.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	formatKey := []byte{0x01, 'f', 'o', 'r', 'm', 'a', 't'}
	setFormat := func(v byte) {
		t.Helper()
		p, err := pebble.Open(filepath.Join(dir, "pebble"), &pebble.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Set(formatKey, []byte{v}, pebble.Sync); err != nil {
			t.Fatal(err)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
	setFormat(99)
	out := startFails(t, dir, []string{"FRAUDD_SECRET=e2e-master-secret"})
	var errs []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "level=ERROR") {
			errs = append(errs, l)
		}
	}
	if len(errs) != 1 || !strings.Contains(errs[0], "written by a newer fraudd") || !strings.Contains(errs[0], "store format 99") {
		t.Fatalf("want one error line naming the newer store format, got %d:\n%s", len(errs), out)
	}
	setFormat(1)
	s = StartServer(t, &Server{Bin: bin, DataDir: dir})
	if r := s.Do(t, Req{Path: "/v1/usage", Bearer: a.LiveKey}); r.Status != 200 {
		t.Fatalf("usage after the refused start: %d %s", r.Status, r.Body)
	}
}
