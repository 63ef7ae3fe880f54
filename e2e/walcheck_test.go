package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCorruptWALRefusesToStart: a byte flipped in the middle of the WAL a
// kill -9 left (a bad sector, a bad copy) has intact records after it,
// which Pebble's replay would drop for good, and its open would then
// delete the WAL. The start is refused with one ERROR line naming the file
// and the offset, and the files are left as they were; cutting the WAL at
// that offset, as the line says, accepts the loss and the server starts.
func TestCorruptWALRefusesToStart(t *testing.T) {
	dir := t.TempDir()
	s := StartServer(t, &Server{Bin: bin, DataDir: dir})
	a := s.CreateAccount(t, map[string]any{"email": "wal-damage@example.com"})
	const lookups = 60
	for i := 1; i <= lookups; i++ {
		if r := s.Do(t, Req{Path: fmt.Sprintf("/v1/lookup/185.220.101.%d", i), Bearer: a.LiveKey}); r.Status != 200 {
			t.Fatalf("lookup %d: %d %s", i, r.Status, r.Body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Kill()

	logs, _ := filepath.Glob(filepath.Join(dir, "pebble", "*.log"))
	wal, size := "", int64(0)
	for _, l := range logs {
		if st, err := os.Stat(l); err == nil && st.Size() > size {
			wal, size = l, st.Size()
		}
	}
	if wal == "" {
		t.Fatalf("no WAL with records among %v", logs)
	}
	b, err := os.ReadFile(wal)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x10
	if err := os.WriteFile(wal, b, 0o600); err != nil {
		t.Fatal(err)
	}

	out := startFails(t, dir, []string{"FRAUDD_SECRET=e2e-master-secret"})
	if n := strings.Count(out, "level=ERROR"); n != 1 {
		t.Fatalf("want one error line, got %d:\n%s", n, out)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "level=ERROR") {
			t.Log(l)
		}
	}
	if !strings.Contains(out, "corrupt record") || !strings.Contains(out, wal) {
		t.Fatalf("refusal does not name the damage and the file:\n%s", out)
	}
	if after, err := os.ReadFile(wal); err != nil || !bytes.Equal(after, b) {
		t.Fatalf("the refused start changed the WAL (%v)", err)
	}
	m := regexp.MustCompile(`truncate -s (\d+) ` + regexp.QuoteMeta(wal)).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("refusal does not say how to accept the loss:\n%s", out)
	}
	off, _ := strconv.ParseInt(m[1], 10, 64)
	if off <= 0 || off >= int64(len(b)) {
		t.Fatalf("cut at %d of a %d-byte WAL", off, len(b))
	}
	if err := os.Truncate(wal, off); err != nil {
		t.Fatal(err)
	}

	s.start()
	if r := s.Admin(t, "GET", "/admin/v1/accounts/"+a.ID, nil); r.Status != 200 {
		t.Fatalf("account after the accepted loss: %d %s\n%s", r.Status, r.Body, s.Logs())
	}
	u := s.Do(t, Req{Path: "/v1/usage", Bearer: a.LiveKey}).JSON(t)
	n := num(t, u, "month_lookups_used")
	t.Logf("%d of %d lookups counted after the cut", n, lookups)
	if n >= lookups {
		t.Fatalf("%d lookups counted after the records past the damage were dropped, want fewer than %d", n, lookups)
	}
}
