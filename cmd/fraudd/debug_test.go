package main

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

// TestDebugHidesCmdline: the debug listener must not print the command line,
// which may carry --admin-token or --secret.
func TestDebugHidesCmdline(t *testing.T) {
	const secret = "adm_debug_must_not_show_this"
	saved := os.Args
	os.Args = append([]string{saved[0], "serve", "--admin-token", secret}, saved[1:]...)
	defer func() { os.Args = saved }()

	srv := httptest.NewServer(debugMux(nil))
	defer srv.Close()
	for _, path := range []string{"/debug/pprof/cmdline", "/debug/pprof/cmdline?debug=1", "/debug/pprof/", "/debug/pprof/goroutine?debug=1"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), secret) {
			t.Errorf("%s shows the admin token: %q", path, body)
		}
		if strings.HasPrefix(path, "/debug/pprof/cmdline") && resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: status %d, want 404", path, resp.StatusCode)
		}
		if !strings.HasPrefix(path, "/debug/pprof/cmdline") && resp.StatusCode != http.StatusOK {
			t.Errorf("%s: status %d, want 200", path, resp.StatusCode)
		}
	}
}

// TestDebugAddrInUse: a --debug-addr another process holds is an error
// naming the flag and the address, which stops the start like a busy
// --addr, --admin-addr or --metrics-addr (it was logged and the service
// came up without its profiles); the server returned is the caller's to
// close.
func TestDebugAddrInUse(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	addr := busy.Addr().String()
	srv, err := startDebug(addr, nil, quiet)
	if err == nil {
		srv.Close()
		t.Fatalf("--debug-addr %s in use: served", addr)
	}
	if want := "listen on --debug-addr " + addr + ": "; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %q, want it to start %q", err, want)
	}
	srv, err = startDebug("127.0.0.1:0", nil, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Errorf("close the debug server: %v", err)
	}
}
