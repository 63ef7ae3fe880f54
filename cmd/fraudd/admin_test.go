package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// fakeAdmin answers every call with status and body and records the paths
// it was asked for.
func fakeAdmin(t *testing.T, status int, body string) (*httptest.Server, func() []string) {
	var mu sync.Mutex
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.RawPath+"|"+r.URL.Path)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), paths...)
	}
}

// TestAdminCLIRefusesIDsThatAreNotOne: an ID is pasted into the path, which
// the server resolves as a router does, so get-account "" listed every
// account and get-account ../mail printed the outbox (exit 0) where the
// same call over HTTP for one account answers that account or 404
// (ADMIN.md: GET /admin/v1/accounts/{id}; unknown account: 404). Such an
// argument is refused before any call.
func TestAdminCLIRefusesIDsThatAreNotOne(t *testing.T) {
	srv, paths := fakeAdmin(t, 200, `[]`)
	for _, args := range [][]string{
		{"get-account", ""},
		{"get-account", ".."},
		{"get-account", "../mail"},
		{"get-account", "acc_x/rules"},
		{"get-account", "acc_x?q=1"},
		{"get-account", "acc_x%2Frules"},
		{"deliveries", ""},
		{"set-rules", "acc_x/..", "--json", `[]`},
	} {
		var out, errb bytes.Buffer
		code := runAdmin(append([]string{"--url", srv.URL, "--admin-token", "tok"}, args...), &out, &errb)
		if code != 2 || out.Len() != 0 || !strings.Contains(errb.String(), "is not an account ID") {
			t.Errorf("fraudd admin %q: exit %d, stdout %q, stderr %q; want 2 and the ID refused", args, code, out.String(), errb.String())
		}
	}
	if p := paths(); len(p) != 0 {
		t.Errorf("calls made: %q", p)
	}
	var out, errb bytes.Buffer
	if code := runAdmin([]string{"--url", srv.URL, "--admin-token", "tok", "get-account", "acc_0TEiiFs45EZiLO00j"}, &out, &errb); code != 0 {
		t.Fatalf("a plain ID: exit %d, %s", code, errb.String())
	}
	if p := paths(); len(p) != 1 || p[0] != "|/admin/v1/accounts/acc_0TEiiFs45EZiLO00j" {
		t.Errorf("a plain ID called %q", p)
	}
}

// TestAdminCLIErrorOneLine: a refused call is reported as one line that
// names the API's error, code, hint and status, with exit status 1; the
// JSON error body was printed indented over several lines.
func TestAdminCLIErrorOneLine(t *testing.T) {
	for _, c := range []struct {
		status int
		body   string
		want   string
	}{
		{409, `{"error":"An account with this email already exists."}`,
			"fraudd admin get-account: An account with this email already exists. (HTTP 409)\n"},
		{400, `{"error":"hourly_limit is only for the custom plan.","hint":"Send \"plan\": \"custom\"."}`,
			"fraudd admin get-account: hourly_limit is only for the custom plan. (HTTP 400) Send \"plan\": \"custom\".\n"},
		{503, `{"error":"Storage unavailable.","code":"storage_unavailable"}`,
			"fraudd admin get-account: Storage unavailable. (HTTP 503, code storage_unavailable)\n"},
		{502, "<html>\n<body>Bad gateway</body>\n</html>\n",
			"fraudd admin get-account: HTTP 502: <html> <body>Bad gateway</body> </html>\n"},
		{500, "", "fraudd admin get-account: HTTP 500\n"},
	} {
		srv, _ := fakeAdmin(t, c.status, c.body)
		var out, errb bytes.Buffer
		code := runAdmin([]string{"--url", srv.URL, "--admin-token", "tok", "get-account", "acc_x"}, &out, &errb)
		if code != 1 || out.Len() != 0 || errb.String() != c.want {
			t.Errorf("HTTP %d %q: exit %d, stdout %q, stderr %q; want 1 and %q", c.status, c.body, code, out.String(), errb.String(), c.want)
		}
	}
}

// TestAdminCLISendsJSONAsGiven: --json is the body of the HTTP call
// (ADMIN.md: the CLI uses exactly the admin API). It was decoded and encoded
// again, so a key given twice reached the server once (which refuses it
// twice), 1e3 and 1.0 as 1000 and 1 (refused as limits when sent so), and
// 9007199254740993 as ...992.
func TestAdminCLISendsJSONAsGiven(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, string(b))
		mu.Unlock()
		w.Write([]byte(`{}`))
	}))
	t.Cleanup(srv.Close)
	for _, body := range []string{
		`{"suspended":true,"suspended":false}`,
		`{"plan":"custom","hourly_limit":1e3}`,
		`{"plan":"custom","monthly_limit":1.0}`,
		`{"plan":"custom","monthly_limit":9007199254740993}`,
	} {
		mu.Lock()
		got = nil
		mu.Unlock()
		var out, errb bytes.Buffer
		if code := runAdmin([]string{"--url", srv.URL, "--admin-token", "tok", "patch-account", "acc_x", "--json", body}, &out, &errb); code != 0 {
			t.Fatalf("%s: exit %d %s", body, code, errb.String())
		}
		mu.Lock()
		if len(got) != 1 || got[0] != body {
			t.Errorf("--json %s sent %q", body, got)
		}
		mu.Unlock()
	}
	var out, errb bytes.Buffer
	if code := runAdmin([]string{"--url", srv.URL, "--admin-token", "tok", "set-rules", "acc_x", "--json", `[{"signal":`}, &out, &errb); code != 2 {
		t.Errorf("malformed --json: exit %d %s", code, errb.String())
	}
}

// TestAdminCLINamesWhatFollowsTheID: for a command without flags a flag
// after the ID (`get-account ID --bogus`) or a second argument was refused
// as "want 1 argument(s): ID", though the ID was given; the line now names
// the unknown flag or the unexpected argument, exit 2, and no call is made.
func TestAdminCLINamesWhatFollowsTheID(t *testing.T) {
	srv, paths := fakeAdmin(t, 200, `{}`)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"get-account", "acc_x", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"deliveries", "acc_x", "--limit", "5"}, "flag provided but not defined: -limit"},
		{[]string{"get-account", "acc_x", "acc_y"}, `unexpected argument "acc_y"`},
		{[]string{"mail", "extra"}, `unexpected argument "extra"`},
		{[]string{"set-rules", "acc_x", "--json", `[]`, "extra"}, `unexpected argument "extra"`},
	} {
		var out, errb bytes.Buffer
		code := runAdmin(append([]string{"--url", srv.URL, "--admin-token", "tok"}, c.args...), &out, &errb)
		if code != 2 || out.Len() != 0 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("fraudd admin %q: exit %d, stdout %q, stderr %q; want 2 and %q", c.args, code, out.String(), errb.String(), c.want)
		}
	}
	if p := paths(); len(p) != 0 {
		t.Errorf("calls made: %q", p)
	}
	// A command's -h after the ID is its help, as before it.
	var out, errb bytes.Buffer
	if code := runAdmin([]string{"--url", srv.URL, "--admin-token", "tok", "get-account", "acc_x", "-h"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "usage: fraudd admin get-account") {
		t.Errorf("get-account ID -h: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
}

// TestAdminSetWebhookNeedsURL: set-webhook without its --url cleared the
// account's webhook and exited 0 (help: "--url ” clears it"), so
// `fraudd admin --url SERVER set-webhook ID`, the server's URL taken for
// the receiver's, silently stopped the deliveries. It is refused before
// any call; --url ” still clears and --url U still sets.
func TestAdminSetWebhookNeedsURL(t *testing.T) {
	srv, paths := fakeAdmin(t, 200, `{"url":null}`)
	for _, args := range [][]string{
		{"set-webhook", "acc_x"},
		{"--url", srv.URL, "set-webhook", "acc_x"},
	} {
		var out, errb bytes.Buffer
		code := runAdmin(append([]string{"--url", srv.URL, "--admin-token", "tok"}, args...), &out, &errb)
		if code != 2 || out.Len() != 0 || !strings.Contains(errb.String(), "--url is required") {
			t.Errorf("fraudd admin %q: exit %d, stdout %q, stderr %q; want 2 and --url required", args, code, out.String(), errb.String())
		}
	}
	if p := paths(); len(p) != 0 {
		t.Errorf("calls made: %q", p)
	}
	bodies := make(chan string, 2)
	rec := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies <- string(b)
		w.Write(b)
	}))
	t.Cleanup(rec.Close)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"set-webhook", "acc_x", "--url", ""}, `{"url":null}`},
		{[]string{"set-webhook", "--url", "https://hooks.example/x", "acc_x"}, `{"url":"https://hooks.example/x"}`},
	} {
		var out, errb bytes.Buffer
		if code := runAdmin(append([]string{"--url", rec.URL, "--admin-token", "tok"}, c.args...), &out, &errb); code != 0 {
			t.Fatalf("%q: exit %d, %s", c.args, code, errb.String())
		}
		if got := <-bodies; got != c.want {
			t.Errorf("%q sent %s, want %s", c.args, got, c.want)
		}
	}
}

// TestAdminExtraArgumentToACommandWithout: an argument to a command that
// takes none (mail, clock) was refused as "(want 0 argument(s): )".
func TestAdminExtraArgumentToACommandWithout(t *testing.T) {
	for _, cmd := range []string{"mail", "clock", "create-account"} {
		var out, errb bytes.Buffer
		code := runAdmin([]string{"--url", "http://127.0.0.1:1", "--admin-token", "tok", cmd, "acc_x"}, &out, &errb)
		want := "fraudd admin " + cmd + ": unexpected argument \"acc_x\" (it takes none)\n"
		if code != 2 || errb.String() != want {
			t.Errorf("%s acc_x: exit %d, stderr %q; want 2 and %q", cmd, code, errb.String(), want)
		}
	}
}

// TestAdminCallsToNoAdminAPI: with --admin-addr the public listener answers
// the admin API a bare 404 (README Operator console), and the commands
// pointed at it (their default --url) said only "Not found. (HTTP 404)",
// read as a missing account or command; fraudd backup printed the JSON
// body over several lines, and admin clock said the server ran without
// --test-clock. Each now says --url serves no admin API and why it may
// not; the API's own 404s are reported as before.
func TestAdminCallsToNoAdminAPI(t *testing.T) {
	public, _ := fakeAdmin(t, 404, `{"error":"Not found."}`)
	want := public.URL + " serves no admin API (HTTP 404 Not found.): a server started with --admin-addr serves it on that address only; give it as --url\n"
	for _, args := range [][]string{{"admin", "mail"}, {"admin", "get-account", "acc_x"}, {"admin", "clock", "--advance", "1h"}, {"backup", t.TempDir() + "/b"}} {
		full := append([]string{args[0], "--url", public.URL, "--admin-token", "tok", "--data-dir", t.TempDir()}, args[1:]...)
		if args[0] == "backup" {
			// No store in the data dir: the server is asked.
			full = []string{"backup", "--url", public.URL, "--admin-token", "tok", "--data-dir", t.TempDir(), args[1]}
		}
		var out, errb bytes.Buffer
		code := run(full, &out, &errb)
		if code != 1 || !strings.HasSuffix(errb.String(), want) || strings.Count(errb.String(), "\n") != 1 {
			t.Errorf("%q: exit %d, stderr %q; want 1 and one line ending %q", args, code, errb.String(), want)
		}
	}
	admin, _ := fakeAdmin(t, 404, `{"error":"Account not found."}`)
	var out, errb bytes.Buffer
	if code := run([]string{"admin", "--url", admin.URL, "--admin-token", "tok", "get-account", "acc_x"}, &out, &errb); code != 1 ||
		errb.String() != "fraudd admin get-account: Account not found. (HTTP 404)\n" {
		t.Errorf("unknown account: exit %d, stderr %q", code, errb.String())
	}
}

// TestAdminGlobalFlagAfterTheCommand: a flag of fraudd admin itself given
// after the command (`get-account ID --admin-token T`) was refused as
// "flag provided but not defined: -admin-token", as if there were no such
// flag; the line now says it goes before the command. set-webhook's own
// --url is still its own.
func TestAdminGlobalFlagAfterTheCommand(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"get-account", "acc_x", "--admin-token", "t"}, "fraudd admin get-account: --admin-token is a flag of fraudd admin: give it before the command (fraudd admin --admin-token … get-account)\n"},
		{[]string{"mail", "--url", "http://127.0.0.1:1"}, "fraudd admin mail: --url is a flag of fraudd admin: give it before the command (fraudd admin --url … mail)\n"},
		{[]string{"deliveries", "--data-dir", "d", "acc_x"}, "fraudd admin deliveries: --data-dir is a flag of fraudd admin: give it before the command (fraudd admin --data-dir … deliveries)\n"},
	} {
		var out, errb bytes.Buffer
		if code := runAdmin(append([]string{"--admin-token", "tok", "--url", "http://127.0.0.1:1"}, c.args...), &out, &errb); code != 2 || errb.String() != c.want {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
	srv, paths := fakeAdmin(t, 200, `{"url":"https://hooks.example/x"}`)
	var out, errb bytes.Buffer
	if code := runAdmin([]string{"--admin-token", "tok", "--url", srv.URL, "set-webhook", "acc_x", "--url", "https://hooks.example/x"}, &out, &errb); code != 0 || len(paths()) != 1 {
		t.Errorf("set-webhook --url: exit %d, %s", code, errb.String())
	}
}
