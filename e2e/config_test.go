package e2e

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBadEnvironmentRefusesToStart: a FRAUDD_* value that does not parse
// stops the start with the variable and the forms it accepts, instead of
// falling back to the default as if it had not been set.
func TestBadEnvironmentRefusesToStart(t *testing.T) {
	for _, c := range []struct {
		env  string
		want []string
	}{
		{"FRAUDD_EDGE_BLOCK=off", []string{`FRAUDD_EDGE_BLOCK="off"`, "true or false"}},
		{"FRAUDD_FEEDS_REFRESH=6", []string{`FRAUDD_FEEDS_REFRESH="6"`, "6h"}},
		{"FRAUDD_FEEDS_REFRESH=-1h", []string{"FRAUDD_FEEDS_REFRESH", "negative"}},
		{"FRAUDD_ALLOW_PRIVATE_WEBHOOKS=yes", []string{"FRAUDD_ALLOW_PRIVATE_WEBHOOKS", "true or false"}},
		{"FRAUDD_LOG_LEVEL=verbose", []string{"FRAUDD_LOG_LEVEL", "debug, info, warn or error"}},
		{"FRAUDD_TRUSTED_PROXIES=10.0.0.0/8,nope", []string{"FRAUDD_TRUSTED_PROXIES", `"nope" is not an IP or CIDR`}},
	} {
		t.Run(c.env, func(t *testing.T) {
			out := startFails(t, t.TempDir(), []string{c.env})
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("refusal does not say %q:\n%s", w, out)
				}
			}
		})
	}
	// The same forms on the command line name the accepted forms too.
	out := startFails(t, t.TempDir(), nil, "--feeds-refresh", "6")
	if !strings.Contains(out, "feeds-refresh") || !strings.Contains(out, "accepted: a Go duration") {
		t.Errorf("bad flag value:\n%s", out)
	}
}

// TestGoodEnvironmentApplies: a valid value is used, and a flag outranks its
// variable.
func TestGoodEnvironmentApplies(t *testing.T) {
	s := StartServer(t, &Server{Bin: bin, Env: []string{"FRAUDD_EDGE_BLOCK=false", "FRAUDD_FEEDS_REFRESH=0"}})
	if r := s.Do(t, Req{Path: "/api/status", NoAgent: true}); r.Status != 200 {
		t.Fatalf("FRAUDD_EDGE_BLOCK=false: a request without User-Agent got %d", r.Status)
	}
	s2 := StartServer(t, &Server{Bin: bin, Env: []string{"FRAUDD_EDGE_BLOCK=false"}, Args: []string{"--edge-block=true"}})
	if r := s2.Do(t, Req{Path: "/api/status", NoAgent: true}); r.Status != 403 {
		t.Fatalf("--edge-block=true over FRAUDD_EDGE_BLOCK=false: %d", r.Status)
	}
	// A misspelt variable is not silently ignored either: it is logged.
	s3 := StartServer(t, &Server{Bin: bin, Env: []string{"FRAUDD_FEED_REFRESH=6h"}})
	if !strings.Contains(s3.Logs(), "var=FRAUDD_FEED_REFRESH") {
		t.Fatalf("misspelt variable not reported:\n%s", s3.Logs())
	}
}

// TestHelpExitsZero: the help of each command is asked for, so it goes to
// stdout and exits 0, and shows boolean flags as booleans.
func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"serve", "-h"}, {"serve", "--help"}, {"admin", "-h"}, {"admin", "clock", "-h"}, {"feeds", "-h"}, {"health", "-h"}} {
		cmd := exec.Command(bin, args...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Errorf("fraudd %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
			continue
		}
		if !strings.Contains(stdout.String(), "usage: fraudd") {
			t.Errorf("fraudd %s: no usage on stdout:\n%s", strings.Join(args, " "), stdout.String())
		}
		if args[0] == "serve" {
			for _, w := range []string{"--edge-block[=true|false]", "--test-clock[=true|false]", "--feeds-refresh duration", "env FRAUDD_EDGE_BLOCK"} {
				if !strings.Contains(stdout.String(), w) {
					t.Errorf("serve help lacks %q:\n%s", w, stdout.String())
				}
			}
			if strings.Contains(stdout.String(), "edge-block error code") {
				t.Errorf("serve help shows a boolean as taking a value:\n%s", stdout.String())
			}
		}
	}
	// A usage error is still an error.
	if err := exec.Command(bin, "serve", "--no-such-flag").Run(); !isExit(err, 2) {
		t.Errorf("unknown flag: %v, want exit 2", err)
	}
}

func isExit(err error, code int) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee) && ee.ExitCode() == code
}

// TestSecondInstanceOnDataDir: a second fraudd on a data dir in use stops at
// once, naming the first one's pid.
func TestSecondInstanceOnDataDir(t *testing.T) {
	s := Start(t, bin)
	out := startFails(t, s.DataDir, nil)
	want := fmt.Sprintf("data dir is in use by another fraudd (pid %d)", s.cmd.Process.Pid)
	if !strings.Contains(out, want) {
		t.Fatalf("second instance: want %q in:\n%s", want, out)
	}
	if r := s.Do(t, Req{Path: "/api/status"}); r.Status != 200 {
		t.Fatalf("first instance after the refused second: %d", r.Status)
	}
	// The lock goes with the process: a restart on the same dir works.
	s.Restart()
}

// TestAdminClockWithoutTestClock: `fraudd admin clock` against a server
// started without --test-clock says so instead of a bare 404.
func TestAdminClockWithoutTestClock(t *testing.T) {
	s := StartServer(t, &Server{Bin: bin, NoTestClock: true})
	cmd := exec.Command(bin, "admin", "--url", s.URL, "--admin-token", AdminToken, "clock", "--advance", "1h")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "without --test-clock") {
		t.Fatalf("admin clock without --test-clock: %v\n%s", err, out)
	}
	r := s.Admin(t, "POST", "/admin/v1/clock", map[string]any{"advance": "1h"})
	if r.Status != 404 || !strings.Contains(r.JSON(t)["hint"].(string), "--test-clock") {
		t.Fatalf("clock route without --test-clock: %d %s", r.Status, r.Body)
	}
}

// TestPlanLimitsOnlyForCustom: a limit the account's plan would ignore is
// refused with a hint, not stored; leaving the custom plan drops its limits.
func TestPlanLimitsOnlyForCustom(t *testing.T) {
	s := Start(t, bin)
	r := s.Admin(t, "POST", "/admin/v1/accounts", map[string]any{"email": "plan@example.com", "plan": "starter", "hourly_limit": 10})
	if r.Status != 400 || !strings.Contains(r.JSON(t)["hint"].(string), `"plan": "custom"`) {
		t.Fatalf("create starter with hourly_limit: %d %s", r.Status, r.Body)
	}
	a := s.CreateAccount(t, map[string]any{"email": "plan@example.com", "plan": "starter"})
	path := "/admin/v1/accounts/" + a.ID
	for _, body := range []map[string]any{{"hourly_limit": 10}, {"monthly_limit": nil}, {"plan": "growth", "hourly_limit": 10}} {
		r := s.Admin(t, "PATCH", path, body)
		if r.Status != 400 || !strings.Contains(r.JSON(t)["hint"].(string), "custom") {
			t.Fatalf("patch %v on starter: %d %s", body, r.Status, r.Body)
		}
	}
	if m := s.Admin(t, "GET", path, nil).JSON(t); m["plan"] != "starter" || m["hourly_limit"] != nil {
		t.Fatalf("refused patch changed the account: %v", m)
	}
	if r := s.Admin(t, "PATCH", path, map[string]any{"plan": "custom", "hourly_limit": 10, "monthly_limit": 500}); r.Status != 200 || r.JSON(t)["hourly_limit"].(float64) != 10 {
		t.Fatalf("to custom with limits: %d %s", r.Status, r.Body)
	}
	if r := s.Admin(t, "PATCH", path, map[string]any{"hourly_limit": 20}); r.Status != 200 || r.JSON(t)["hourly_limit"].(float64) != 20 {
		t.Fatalf("custom limit change: %d %s", r.Status, r.Body)
	}
	r = s.Admin(t, "PATCH", path, map[string]any{"plan": "scale"})
	if m := r.JSON(t); r.Status != 200 || m["hourly_limit"] != nil || m["monthly_limit"] != nil {
		t.Fatalf("leaving custom kept its limits: %d %s", r.Status, r.Body)
	}
}

// TestBusyDebugAddrRefusesToStart: a --debug-addr another process holds
// stops the start with one line naming the flag, as a busy --addr,
// --admin-addr or --metrics-addr does; fraudd used to log it and serve
// without its profiles.
func TestBusyDebugAddrRefusesToStart(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	out := startFails(t, t.TempDir(), nil, "--debug-addr", addr)
	var refusals []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "level=ERROR") {
			refusals = append(refusals, l)
		}
	}
	if len(refusals) != 1 || !strings.Contains(refusals[0], "listen on --debug-addr "+addr+": ") {
		t.Fatalf("want one ERROR line naming --debug-addr %s:\n%s", addr, out)
	}
}

// TestOneAddressTwiceRefusedAtOnce: --admin-addr equal to --addr stops the
// start at once, exit 2, with one line naming both flags, before the data
// dir is touched; it used to open the store and then stop on "listen on
// …: address already in use", naming neither flag, as if another process
// held the port.
func TestOneAddressTwiceRefusedAtOnce(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := filepath.Join(t.TempDir(), "data")
	out := startFails(t, dir, nil, "--addr", addr, "--admin-addr", addr)
	want := fmt.Sprintf("fraudd serve: --admin-addr %s and --addr %s are the same address", addr, addr)
	if !strings.HasPrefix(out, want) || strings.Contains(out, "level=") {
		t.Fatalf("want one line %q and nothing logged:\n%s", want, out)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the data dir was created before the refusal: %v", err)
	}
	cmd := exec.Command(bin, "serve", "--addr", addr, "--admin-addr", addr, "--data-dir", dir)
	var ee *exec.ExitError
	if err := cmd.Run(); !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("exit: %v, want 2", err)
	}
}
