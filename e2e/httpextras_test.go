package e2e

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"
)

// TestHTTPExtras: gzip over 1 KB when asked, WWW-Authenticate on 401, and
// --access-log lines that never carry a key.
func TestHTTPExtras(t *testing.T) {
	s := StartServer(t, &Server{Bin: bin, Args: []string{"--access-log"}})
	a := s.CreateAccount(t, map[string]any{"email": "extras@example.com", "plan": "starter"})

	r := s.Do(t, Req{Path: "/api/status", Header: map[string]string{"Accept-Encoding": "gzip"}})
	if r.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("status (%d bytes) not gzipped: %v", len(r.Body), r.Header)
	}
	zr, err := gzip.NewReader(bytes.NewReader(r.Body))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := io.ReadAll(zr)
	if err != nil || !json.Valid(plain) || len(plain) < 1024 {
		t.Fatalf("gunzipped status: %v %d bytes", err, len(plain))
	}
	if r := s.Do(t, Req{Path: "/api/status"}); r.Header.Get("Content-Encoding") != "" {
		t.Fatal("gzipped without Accept-Encoding")
	}
	if r := s.Do(t, Req{Path: "/healthz", Header: map[string]string{"Accept-Encoding": "gzip"}}); r.Header.Get("Content-Encoding") != "" {
		t.Fatal("a tiny answer was gzipped")
	}

	r = s.Do(t, Req{Method: "POST", Path: "/v1/evaluate", Bearer: "sk_live_wrong", Body: map[string]any{"token": "test_clean"}})
	if r.Status != 401 || !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Bearer ") {
		t.Fatalf("401 without WWW-Authenticate: %d %v", r.Status, r.Header)
	}
	if r := s.Do(t, Req{Method: "POST", Path: "/v1/evaluate", Bearer: a.LiveKey, Body: map[string]any{"token": "test_vpn", "email": "v@example.com"}}); r.Status != 200 {
		t.Fatalf("evaluate: %d %s", r.Status, r.Body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(s.Logs(), "path=/v1/evaluate status=200") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	logs := s.Logs()
	if !strings.Contains(logs, "msg=access log=access method=POST path=/v1/evaluate status=200") {
		t.Fatalf("no access line for the evaluate:\n%s", logs)
	}
	for _, secret := range []string{a.LiveKey, "sk_live_wrong", "v@example.com", a.WebhookSecret} {
		if strings.Contains(logs, secret) {
			t.Fatalf("the log contains %q", secret)
		}
	}
}
