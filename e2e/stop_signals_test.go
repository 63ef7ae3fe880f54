package e2e

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestHangupAndClosedLogPipeStopCleanly: SIGHUP (the terminal or SSH session
// of `./fraudd serve &`, README's quick start, going away) and a log reader
// that is gone (`fraudd serve 2>&1 | tee log` after Ctrl-C, a log shipper
// that died: the next log line is a write to a broken pipe) each killed
// fraudd at once with Go's default action — no drain, no last group commit,
// no store close — so every count answered since the last group sync was
// lost, against README's "A clean stop loses nothing" and "only SIGKILL
// skips the store's close". With a 10 s sync interval the counts below are
// all still in memory when the signal comes; after the stop and a restart
// on the same data dir every one of them must be there, and the exit is 0.
func TestHangupAndClosedLogPipeStopCleanly(t *testing.T) {
	for _, c := range []struct {
		name      string
		closeLogs bool
		sig       syscall.Signal
	}{
		{"sighup", false, syscall.SIGHUP},
		{"closed log pipe then sigterm", true, syscall.SIGTERM},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := Start(t, bin, "--sync-interval", "10s")
			a := s.CreateAccount(t, map[string]any{"email": "hup@example.com", "plan": "public_interest"})
			if err := s.Stop(); err != nil {
				t.Fatalf("stop: %v\n%s", err, s.Logs())
			}

			// The same server, its stderr a pipe this test can close.
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--data-dir", s.DataDir,
				"--admin-token", AdminToken, "--sync-interval", "10s")
			cmd.Env = append(os.Environ(), "FRAUDD_SECRET=e2e-master-secret")
			cmd.Stderr = w
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			w.Close()
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			stopped := false
			t.Cleanup(func() {
				if !stopped {
					_ = cmd.Process.Kill()
					<-exited
				}
			})
			sc := bufio.NewScanner(r)
			var logs strings.Builder
			for s.URL = ""; s.URL == "" && sc.Scan(); {
				logs.WriteString(sc.Text() + "\n")
				if m := listenRE.FindStringSubmatch(sc.Text()); m != nil {
					s.URL = "http://" + m[1]
				}
			}
			if s.URL == "" {
				t.Fatalf("fraudd did not report its address:\n%s", logs.String())
			}
			if !c.closeLogs {
				go func() { // keep reading: only the signal stops it
					for sc.Scan() {
					}
				}()
			}

			const evaluations = 9
			for range evaluations {
				if resp := s.Do(t, Req{Method: "POST", Path: "/v1/evaluate", Bearer: a.LiveKey, Body: map[string]any{}}); resp.Status != 200 {
					t.Fatalf("evaluate: %d %s", resp.Status, resp.Body)
				}
			}
			if c.closeLogs {
				r.Close()
			}
			if err := cmd.Process.Signal(c.sig); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-exited:
				stopped = true
				if err != nil {
					t.Errorf("exit after %s: %v; want a clean stop, exit 0", c.name, err)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("no stop within 30s of %s", c.name)
			}
			r.Close()

			s.start()
			u := s.Do(t, Req{Path: "/v1/usage", Bearer: a.LiveKey}).JSON(t)
			if got := num(t, u, "month_used"); got != evaluations {
				t.Errorf("month_used %d after the stop, want %d: answered counts lost", got, evaluations)
			}
		})
	}
}
