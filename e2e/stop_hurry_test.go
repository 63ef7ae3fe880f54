package e2e

import (
	"bufio"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSecondSignalHurriesTheStop: a second SIGTERM during the graceful stop
// ends the drain at once, where it was ignored and the stop waited for a
// request in flight (here up to the read timeout, 10 s; the drain's own
// limit is 15 s); it says so in one WARN line. The actors' last commits and
// the store's close still run, a third signal does not skip them, and the
// exit code stays 0: a restart on the same data dir counts every call
// answered before the stop.
func TestSecondSignalHurriesTheStop(t *testing.T) {
	s := Start(t, bin)
	a := s.CreateAccount(t, map[string]any{"email": "hurry@example.com", "plan": "public_interest"})
	const evaluations, lookups = 20, 7
	for range evaluations {
		if r := s.Do(t, Req{Method: "POST", Path: "/v1/evaluate", Bearer: a.LiveKey, Body: map[string]any{}}); r.Status != 200 {
			t.Fatalf("evaluate: %d %s", r.Status, r.Body)
		}
	}
	for range lookups {
		if r := s.Do(t, Req{Path: "/v1/lookup/8.8.8.8", Bearer: a.LiveKey}); r.Status != 200 {
			t.Fatalf("lookup: %d %s", r.Status, r.Body)
		}
	}

	// A request in flight, its body half sent: the drain waits for it.
	conn, _ := halfSentLookup(t, s)

	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The second signal only after the first was taken: two sent at once
	// may reach the process as one.
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(s.Logs(), `msg="shutting down: draining requests"`); {
		if time.Now().After(deadline) {
			t.Fatalf("no stop began within 20s of SIGTERM:\n%s", s.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // the drain waits for the request
	second := time.Now()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// A third signal must not cut the stop any shorter (cmd/fraudd's
	// TestStopSignals sees it ignored). The process may be gone by now; a
	// failed send is fine.
	time.Sleep(20 * time.Millisecond)
	_ = s.cmd.Process.Signal(syscall.SIGINT)

	var exit error
	select {
	case exit = <-s.exited:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
		t.Fatalf("fraudd did not stop within 30s of the second signal:\n%s", s.Logs())
	}
	took := time.Since(second)
	s.cmd = nil
	if exit != nil {
		t.Errorf("a hurried stop exited with %v, want 0:\n%s", exit, s.Logs())
	}
	// Well before the 10 s the request in flight could hold the drain, with
	// seconds of slack for a busy machine.
	if took > 5*time.Second {
		t.Errorf("the hurried stop took %v after the second signal:\n%s", took, s.Logs())
	}
	// The drain did not wait for the request: it got no answer (it would
	// have got a 408 at its read timeout) before the process ended.
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err == nil {
		resp.Body.Close()
		t.Errorf("the request in flight was answered %d: the drain waited for it", resp.StatusCode)
	}
	logs := s.Logs()
	if n := strings.Count(logs, "level=WARN msg=\"second signal: hurrying the stop"); n != 1 {
		t.Errorf("%d WARN lines about the hurried stop, want 1:\n%s", n, logs)
	}
	if !strings.Contains(logs, `msg="storage closed"`) {
		t.Errorf("the store was not closed:\n%s", logs)
	}
	if strings.Contains(logs, "level=ERROR") {
		t.Errorf("an ERROR line in a hurried stop:\n%s", logs)
	}

	s.start()
	u := s.Do(t, Req{Path: "/v1/usage", Bearer: a.LiveKey}).JSON(t)
	if got := num(t, u, "month_used"); got != evaluations {
		t.Errorf("month_used %d after the hurried stop, want %d", got, evaluations)
	}
	if got := num(t, u, "month_lookups_used"); got != lookups {
		t.Errorf("month_lookups_used %d after the hurried stop, want %d", got, lookups)
	}
}
