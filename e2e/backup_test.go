package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// backupAccount is an account as the test left it before the backup.
type backupAccount struct {
	Account
	rules, pins string // GET bodies
}

// TestBackupUnderLoadRestores takes an online backup while clients keep
// evaluating and looking up with a live key, restores it into a fresh data
// directory and starts a server there: every account, key, rule and pin is
// back, and each usage count is at least what was acknowledged before the
// backup started. The server is started as on a first run by hand (secrets
// generated into the data dir), so the restore also proves the backup holds
// them.
func TestBackupUnderLoadRestores(t *testing.T) {
	data := t.TempDir()
	s := StartServer(t, &Server{Bin: bin, DataDir: data, Bare: true})
	tok := readToken(t, data)
	admin := func(s *Server, method, path string, body any) *Response {
		return s.Do(t, Req{Method: method, Path: path, Body: body, Bearer: tok})
	}

	var accts []backupAccount
	for i := range 3 {
		r := admin(s, "POST", "/admin/v1/accounts", map[string]any{"email": fmt.Sprintf("backup%d@example.com", i), "plan": "scale"})
		if r.Status != 201 {
			t.Fatalf("create: %d %s", r.Status, r.Body)
		}
		var a struct {
			ID      string `json:"id"`
			Email   string `json:"email"`
			LiveKey string `json:"live_key"`
			TestKey string `json:"test_key"`
		}
		if err := json.Unmarshal(r.Body, &a); err != nil {
			t.Fatal(err)
		}
		base := "/admin/v1/accounts/" + a.ID
		rules := []map[string]any{{"signal": "vpn", "action": "block"}, {"signal": "tor", "action": []string{"review", "block"}[i%2]}}
		pins := []map[string]any{{"ip": fmt.Sprintf("203.0.113.%d", i+1), "action": "allow", "label": fmt.Sprintf("office %d", i)}}
		if r := admin(s, "PUT", base+"/rules", rules); r.Status != 200 {
			t.Fatalf("rules: %d %s", r.Status, r.Body)
		}
		if r := admin(s, "PUT", base+"/exceptions", pins); r.Status != 200 {
			t.Fatalf("pins: %d %s", r.Status, r.Body)
		}
		accts = append(accts, backupAccount{Account: Account{ID: a.ID, Email: a.Email, LiveKey: a.LiveKey, TestKey: a.TestKey},
			rules: string(admin(s, "GET", base+"/rules", nil).Body), pins: string(admin(s, "GET", base+"/exceptions", nil).Body)})
	}
	live := accts[0].LiveKey

	// Load: counted evaluations (no token: the degraded answer counts toward
	// the month) and lookups, with the live key.
	var evals, lookups atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				if (w+n)%2 == 0 {
					if r, err := s.try(Req{Method: "POST", Path: "/v1/evaluate", Body: map[string]any{}, Bearer: live}); err == nil && r.Status == 200 {
						evals.Add(1)
					}
				} else if r, err := s.try(Req{Method: "GET", Path: "/v1/lookup/8.8.8.8", Bearer: live}); err == nil && r.Status == 200 {
					lookups.Add(1)
				}
			}
		}()
	}
	for deadline := time.Now().Add(30 * time.Second); evals.Load() < 20 || lookups.Load() < 20; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("load too slow: %d evaluations, %d lookups in 30 s", evals.Load(), lookups.Load())
		}
	}
	ackEvals, ackLookups := evals.Load(), lookups.Load()
	dir := filepath.Join(t.TempDir(), "backup")
	out := runCLI(t, "backup", "--data-dir", data, "--url", s.URL, dir)
	close(stop)
	wg.Wait()
	if !strings.Contains(out, "backup written to "+dir) || !strings.Contains(out, "pebble/") || !strings.Contains(out, "master-secret") {
		t.Fatalf("backup output:\n%s", out)
	}
	if !strings.Contains(s.Logs(), `msg="backup written"`) {
		t.Fatal("the running server did not write the backup (offline mode used while it held the store?)")
	}
	if evals.Load() == ackEvals && lookups.Load() == ackLookups {
		t.Fatal("no request was answered while the backup ran: not under load")
	}
	checkModes(t, dir)
	// A second backup into the same directory is refused and changes nothing.
	before := treeSize(t, dir)
	if code, out := runCLIExit(t, "backup", "--data-dir", data, "--url", s.URL, dir); code == 0 || !strings.Contains(out, "not empty") {
		t.Fatalf("backup over an existing backup: exit %d\n%s", code, out)
	}
	if treeSize(t, dir) != before {
		t.Fatal("a refused backup changed the existing one")
	}

	restored := filepath.Join(t.TempDir(), "restored")
	copyTree(t, dir, restored)
	r2 := StartServer(t, &Server{Bin: bin, DataDir: restored, Bare: true})
	checkRestored(t, r2, tok, accts, ackEvals, ackLookups)

	// Offline: with the server stopped the CLI backs the data dir up itself.
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	off := filepath.Join(t.TempDir(), "offline")
	if out := runCLI(t, "backup", "--data-dir", data, "--url", "http://127.0.0.1:1", off); !strings.Contains(out, "backup written to "+off) {
		t.Fatalf("offline backup:\n%s", out)
	}
	r3 := StartServer(t, &Server{Bin: bin, DataDir: off, Bare: true})
	checkRestored(t, r3, tok, accts, ackEvals, ackLookups)
}

func checkRestored(t *testing.T, s *Server, tok string, accts []backupAccount, evals, lookups int64) {
	t.Helper()
	admin := func(method, path string) *Response { return s.Do(t, Req{Method: method, Path: path, Bearer: tok}) }
	for _, a := range accts {
		base := "/admin/v1/accounts/" + a.ID
		r := admin("GET", base)
		if r.Status != 200 || r.JSON(t)["email"] != a.Email {
			t.Fatalf("restored account %s: %d %s", a.ID, r.Status, r.Body)
		}
		if got := string(admin("GET", base+"/rules").Body); got != a.rules {
			t.Fatalf("restored rules of %s: %s, want %s", a.ID, got, a.rules)
		}
		if got := string(admin("GET", base+"/exceptions").Body); got != a.pins {
			t.Fatalf("restored pins of %s: %s, want %s", a.ID, got, a.pins)
		}
		for _, key := range []string{a.LiveKey, a.TestKey} {
			if r := s.Do(t, Req{Path: "/v1/usage", Bearer: key}); r.Status != 200 {
				t.Fatalf("key of %s does not authenticate after the restore: %d %s", a.ID, r.Status, r.Body)
			}
		}
	}
	u := s.Do(t, Req{Path: "/v1/usage", Bearer: accts[0].LiveKey}).JSON(t)
	if num(t, u, "month_used") < evals || num(t, u, "month_lookups_used") < lookups {
		t.Fatalf("restored usage %v/%v below what was acknowledged before the backup (%d evaluations, %d lookups)",
			u["month_used"], u["month_lookups_used"], evals, lookups)
	}
}

func readToken(t *testing.T, data string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(data, "admin-token"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// runCLIExit runs the fraudd binary with args and returns its exit code and
// combined output.
func runCLIExit(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = os.Environ()
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("fraudd %v did not finish in 2 minutes:\n%s", args, out)
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, string(out)
}

func runCLI(t *testing.T, args ...string) string {
	t.Helper()
	code, out := runCLIExit(t, args...)
	if code != 0 {
		t.Fatalf("fraudd %v: exit %d\n%s", args, code, out)
	}
	return out
}

// checkModes: a backup's directories are 0700 and its files 0600.
func checkModes(t *testing.T, root string) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		}
		if info.Mode().Perm() != want {
			t.Errorf("%s: mode %04o, want %04o", path, info.Mode().Perm(), want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func treeSize(t *testing.T, root string) int64 {
	t.Helper()
	var n int64
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size() + 1
			}
		}
		return nil
	})
	return n
}

// copyTree copies a backup into place the way cp -r would.
func copyTree(t *testing.T, from, to string) { copyFiles(t, from, to, os.O_EXCL) }

// copyFiles copies every file of from into to, creating directories 0700
// and files 0600; flag is os.O_EXCL (refuse a file that is there) or
// os.O_TRUNC (replace it, as cp -a FROM/. TO/ does).
func copyFiles(t *testing.T, from, to string, flag int) {
	t.Helper()
	err := filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o700)
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|flag, 0o600)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}
