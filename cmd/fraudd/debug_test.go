package main

import (
	"io"
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
