package e2e

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestStatusAndHeaders(t *testing.T) {
	s := Start(t, bin)
	r := s.Do(t, Req{Path: "/api/status"})
	if r.Status != 200 {
		t.Fatalf("status: %d %s", r.Status, r.Body)
	}
	m := r.JSON(t)
	if m["status"] != "operational" || m["version"] == "" {
		t.Fatalf("status body: %s", r.Body)
	}
	up := m["uptime"].(map[string]any)
	for _, k := range []string{"days", "hours", "minutes", "started"} {
		if _, ok := up[k]; !ok {
			t.Errorf("uptime.%s missing: %s", k, r.Body)
		}
	}
	hist, _ := m["history_90d"].([]any)
	if len(hist) != 90 {
		t.Fatalf("history_90d has %d days", len(hist))
	}
	today := hist[89].(map[string]any)
	if today["samples"].(float64) < 1 || today["pct"].(float64) != 100 || hist[0].(map[string]any)["pct"] != nil {
		t.Fatalf("history: first %v, today %v", hist[0], today)
	}
	if svc := m["services"].(map[string]any)["storage"].(map[string]any); svc["status"] != "operational" || svc["uptime_pct"].(float64) != 100 {
		t.Fatalf("storage service: %v", svc)
	}
	if !strings.HasPrefix(r.Header.Get("X-Request-Id"), "req_") {
		t.Errorf("X-Request-Id = %q", r.Header.Get("X-Request-Id"))
	}

	r = s.Do(t, Req{Path: "/no/such/route"})
	if r.Status != 404 || r.JSON(t)["error"] == nil || r.Header.Get("X-Request-Id") == "" {
		t.Errorf("unknown route: %d %s", r.Status, r.Body)
	}
	r = s.Do(t, Req{Method: "DELETE", Path: "/api/status"})
	if r.Status != 405 || r.Header.Get("Allow") != "GET, HEAD" || r.JSON(t)["error"] == nil {
		t.Errorf("wrong method: %d allow=%q %s", r.Status, r.Header.Get("Allow"), r.Body)
	}
	big := bytes.Repeat([]byte("a"), 65<<10)
	r = s.Do(t, Req{Method: "POST", Path: "/admin/v1/accounts", Body: big, Bearer: AdminToken})
	if r.Status != 413 || r.JSON(t)["error"] == nil {
		t.Errorf("oversized body: %d %s", r.Status, r.Body)
	}
}

func TestEdgeBlock(t *testing.T) {
	s := Start(t, bin)
	for _, c := range []struct {
		name    string
		agent   string
		noAgent bool
		blocked bool
	}{
		{"no user agent", "", true, true},
		{"python urllib", "Python-urllib/3.11", false, true},
		{"curl", "curl/8.5.0", false, false},
		{"go net/http", "Go-http-client/1.1", false, false},
		{"browser", "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/120 Safari/537.36", false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := map[string]string{}
			if !c.noAgent {
				h["User-Agent"] = c.agent
			}
			r := s.Do(t, Req{Path: "/api/status", Header: h, NoAgent: c.noAgent})
			if c.blocked {
				if r.Status != 403 || string(r.Body) != "error code: 1010" || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/plain") {
					t.Fatalf("want edge block, got %d %q", r.Status, r.Body)
				}
				return
			}
			if r.Status != 200 {
				t.Fatalf("want 200, got %d %s", r.Status, r.Body)
			}
		})
	}
	// The Go default agent is what the harness's http.Client sends with NoAgent
	// on a header map that sets nothing: make sure that is not blocked either.
	req, _ := http.NewRequest("GET", s.URL+"/api/status", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("Go's default User-Agent was blocked: %d", resp.StatusCode)
	}

	off := Start(t, bin, "--edge-block=false")
	if r := off.Do(t, Req{Path: "/api/status", NoAgent: true, Header: map[string]string{"User-Agent": ""}}); r.Status != 200 {
		t.Fatalf("--edge-block=false still blocks: %d", r.Status)
	}
}

func TestFirstStartCreatesSecrets(t *testing.T) {
	dir := t.TempDir()
	// Without --admin-token and --secret both are generated into the data dir,
	// 0600, and only the token's path is logged.
	s := StartServer(t, &Server{Bin: bin, DataDir: dir, Bare: true})
	for _, f := range []string{"admin-token", "master-secret"} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", f, st.Mode().Perm())
		}
	}
	tok, _ := os.ReadFile(filepath.Join(dir, "admin-token"))
	if strings.Contains(s.Logs(), strings.TrimSpace(string(tok))) {
		t.Fatal("the admin token appears in the log")
	}
	if !strings.Contains(s.Logs(), filepath.Join(dir, "admin-token")) {
		t.Fatalf("the admin token's path is not logged:\n%s", s.Logs())
	}
	r := s.Do(t, Req{Method: "GET", Path: "/admin/v1/mail", Bearer: strings.TrimSpace(string(tok))})
	if r.Status != 200 {
		t.Fatalf("generated admin token does not work: %d %s", r.Status, r.Body)
	}
}

// TestSecretsNeverStoredInClear scans every file the server wrote (Pebble's
// WAL, tables, manifest) for the keys it handed out.
func TestSecretsNeverStoredInClear(t *testing.T) {
	s := Start(t, bin)
	a := s.CreateAccount(t, map[string]any{"email": "clear@example.com"})
	rot := s.Admin(t, "POST", "/admin/v1/accounts/"+a.ID+"/keys/live/rotate", nil).JSON(t)["live_key"].(string)
	s.Do(t, Req{Path: "/v1/usage", Bearer: a.LiveKey})
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	secrets := []string{a.LiveKey, a.TestKey, a.WebhookSecret, rot}
	err := filepath.Walk(s.DataDir, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, sec := range secrets {
			// Keys are base62 ASCII: any stored copy would appear verbatim.
			if bytes.Contains(b, []byte(sec[len(sec)-20:])) {
				t.Errorf("%s contains a secret in clear", path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, sec := range secrets {
		if strings.Contains(s.Logs(), sec[len(sec)-20:]) {
			t.Error("a secret appears in the log")
		}
	}
}
