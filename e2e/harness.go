// Package e2e starts the real fraudd binary on a loopback port with a temp data
// dir and the test clock, and speaks HTTP to it as a client would. Every
// feature's end-to-end tests use this harness.
package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// UserAgent is what the harness sends; a real one, so the edge block passes.
const UserAgent = "fraudd-e2e/1.0 (+tests)"

// AdminToken is the operator token every harness server runs with.
const AdminToken = "adm_e2e_token_for_tests_only"

// Build compiles cmd/fraudd into dir and returns the binary's path.
func Build(dir string) (string, error) {
	bin := filepath.Join(dir, "fraudd")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/fraudd/fraudd/cmd/fraudd")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build fraudd: %w", err)
	}
	return bin, nil
}

// Server is one running fraudd.
type Server struct {
	Bin     string
	DataDir string
	URL     string
	Args    []string // extra flags
	// AdminURL is the admin listener's address when the server runs with
	// --admin-addr; Admin calls go there.
	AdminURL string
	// MetricsURL is the metrics listener's address when the server runs
	// with --metrics-addr.
	MetricsURL string

	// Bare starts the server without --admin-token and FRAUDD_SECRET, as on a
	// first start by hand.
	Bare bool
	// NoTestClock starts the server without --test-clock.
	NoTestClock bool
	// Env is added to the server's environment (e.g. FRAUDD_EDGE_BLOCK=false).
	Env []string

	t      testing.TB
	cmd    *exec.Cmd
	mu     sync.Mutex
	logs   bytes.Buffer
	exited chan error
	client *http.Client
}

var (
	listenRE      = regexp.MustCompile(`msg="fraudd listening" addr=(\S+)`)
	adminListenRE = regexp.MustCompile(`msg="fraudd admin listening" addr=(\S+)`)
	metricsRE     = regexp.MustCompile(`msg="metrics served without auth" metrics_addr=(\S+)`)
)

// Start runs bin with a fresh temp data dir and the standard test flags.
func Start(t testing.TB, bin string, extra ...string) *Server {
	t.Helper()
	return StartServer(t, &Server{Bin: bin, Args: extra})
}

// StartServer starts a server configured by the caller (DataDir defaults to a
// temp dir).
func StartServer(t testing.TB, s *Server) *Server {
	t.Helper()
	// Inside a test (not TestMain) so that go test's file log, which keys
	// its result cache, sees the sources the binary was built from.
	statOnce.Do(func() {
		if err := statSources(".."); err != nil {
			t.Fatalf("stat sources: %v", err)
		}
	})
	if s.DataDir == "" {
		s.DataDir = t.TempDir()
	}
	s.t = t
	s.client = &http.Client{Timeout: 30 * time.Second}
	s.start()
	t.Cleanup(func() { s.Stop() })
	return s
}

func (s *Server) start() {
	s.t.Helper()
	args := []string{"serve", "--addr", "127.0.0.1:0", "--data-dir", s.DataDir,
		"--trusted-proxies", "127.0.0.0/8", "--log-level", "debug"}
	if !s.NoTestClock {
		args = append(args, "--test-clock")
	}
	env := os.Environ()
	if !s.Bare {
		args = append(args, "--admin-token", AdminToken)
		env = append(env, "FRAUDD_SECRET=e2e-master-secret")
	}
	env = append(env, s.Env...)
	s.cmd = exec.Command(s.Bin, append(args, s.Args...)...)
	s.cmd.Env = env
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		s.t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start fraudd: %v", err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			s.logs.WriteString(line + "\n")
			s.mu.Unlock()
			if m := adminListenRE.FindStringSubmatch(line); m != nil && !sent {
				s.mu.Lock()
				s.AdminURL = "http://" + m[1]
				s.mu.Unlock()
			}
			if m := metricsRE.FindStringSubmatch(line); m != nil && !sent {
				s.mu.Lock()
				s.MetricsURL = "http://" + m[1]
				s.mu.Unlock()
			}
			if m := listenRE.FindStringSubmatch(line); m != nil && !sent {
				addr <- m[1]
				sent = true
			}
		}
	}()
	s.exited = make(chan error, 1)
	go func() { s.exited <- s.cmd.Wait() }()
	select {
	case a := <-addr:
		s.URL = "http://" + a
	case err := <-s.exited:
		s.t.Fatalf("fraudd exited before listening: %v\n%s", err, s.Logs())
	case <-time.After(60 * time.Second):
		s.t.Fatalf("fraudd did not report its address in 60s\n%s", s.Logs())
	}
}

// Logs returns everything the server wrote to stderr so far.
func (s *Server) Logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logs.String()
}

// Stop sends SIGTERM and waits for a clean exit; it returns the exit error.
func (s *Server) Stop() error {
	if s.cmd == nil || s.cmd.Process == nil {
		return nil
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	var err error
	select {
	case err = <-s.exited:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		err = <-s.exited
		err = fmt.Errorf("fraudd did not stop within 30s after SIGTERM (killed): %v", err)
	}
	s.cmd = nil
	return err
}

// Kill ends the server with SIGKILL (crash tests).
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// Restart stops the server and starts it again on the same data dir.
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.Stop(); err != nil {
		s.t.Fatalf("stop: %v\n%s", err, s.Logs())
	}
	s.start()
}

// Response is a finished HTTP exchange.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into a generic map (fails the test when it is not an object).
func (r *Response) JSON(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("body is not a JSON object (status %d): %v\n%s", r.Status, err, r.Body)
	}
	return m
}

// Req describes a request.
type Req struct {
	Method string
	Path   string
	Body   any // []byte/string sent as is; anything else JSON-encoded
	Header map[string]string
	// Add is sent after Header and Bearer, each added: a name may repeat
	// (two Authorization headers, say).
	Add     [][2]string
	Bearer  string
	NoAgent bool
	// Base replaces the server's URL (the admin listener's, say).
	Base string
}

// Do performs a request and reads the whole answer.
func (s *Server) Do(t testing.TB, r Req) *Response {
	t.Helper()
	var body io.Reader
	ctype := ""
	switch b := r.Body.(type) {
	case nil:
	case []byte:
		body = bytes.NewReader(b)
	case string:
		body = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		body = bytes.NewReader(j)
		ctype = "application/json"
	}
	if r.Method == "" {
		r.Method = "GET"
	}
	base := s.URL
	if r.Base != "" {
		base = r.Base
	}
	req, err := http.NewRequest(r.Method, base+r.Path, body)
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if r.NoAgent {
		req.Header.Set("User-Agent", "") // an empty value makes net/http send none
	} else {
		req.Header.Set("User-Agent", UserAgent)
	}
	if r.Bearer != "" {
		req.Header.Set("Authorization", "Bearer "+r.Bearer)
	}
	for k, v := range r.Header {
		req.Header.Set(k, v)
	}
	for _, h := range r.Add {
		req.Header.Add(h[0], h[1])
	}
	if h := req.Header.Get("Host"); h != "" {
		req.Host = h // net/http sends req.Host, never a Host header
	}
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", r.Method, r.Path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// Admin performs an operator API call.
func (s *Server) Admin(t testing.TB, method, path string, body any) *Response {
	t.Helper()
	s.mu.Lock()
	base := s.AdminURL
	s.mu.Unlock()
	return s.Do(t, Req{Method: method, Path: path, Body: body, Bearer: AdminToken, Base: base})
}

// Account is a created account with its secrets.
type Account struct {
	ID, Email, LiveKey, TestKey, PublishableKey, WebhookSecret string
}

// CreateAccount creates an account through the admin API.
func (s *Server) CreateAccount(t testing.TB, body map[string]any) Account {
	t.Helper()
	r := s.Admin(t, "POST", "/admin/v1/accounts", body)
	if r.Status != http.StatusCreated {
		t.Fatalf("create account: %d %s", r.Status, r.Body)
	}
	var a struct {
		ID             string `json:"id"`
		Email          string `json:"email"`
		LiveKey        string `json:"live_key"`
		TestKey        string `json:"test_key"`
		PublishableKey string `json:"publishable_key"`
		WebhookSecret  string `json:"webhook_secret"`
	}
	if err := json.Unmarshal(r.Body, &a); err != nil {
		t.Fatal(err)
	}
	return Account{a.ID, a.Email, a.LiveKey, a.TestKey, a.PublishableKey, a.WebhookSecret}
}

// Advance moves the server's test clock.
func (s *Server) Advance(t testing.TB, d string) {
	t.Helper()
	if r := s.Admin(t, "POST", "/admin/v1/clock", map[string]any{"advance": d}); r.Status != 200 {
		t.Fatalf("advance clock: %d %s", r.Status, r.Body)
	}
}

// SetClock jumps the server's test clock.
func (s *Server) SetClock(t testing.TB, at string) {
	t.Helper()
	if r := s.Admin(t, "POST", "/admin/v1/clock", map[string]any{"set": at}); r.Status != 200 {
		t.Fatalf("set clock: %d %s", r.Status, r.Body)
	}
}

var statOnce sync.Once

// statSources stats every file the binary is built from. `go test` caches a
// package's result keyed on the files the test process touched; the build
// runs in a child process, so without this an edited handler would replay a
// stale cached pass.
func statSources(root string) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "e2e") {
				return filepath.SkipDir
			}
			return nil
		}
		_, err = os.Stat(path)
		return err
	})
}

// try performs a request and returns transport errors instead of failing the
// test (crash tests expect them).
func (s *Server) try(r Req) (*Response, error) {
	var body io.Reader
	if r.Body != nil {
		j, err := json.Marshal(r.Body)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(j)
	}
	req, err := http.NewRequest(r.Method, s.URL+r.Path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", UserAgent)
	req.Header.Set("Content-Type", "application/json")
	if r.Bearer != "" {
		req.Header.Set("Authorization", "Bearer "+r.Bearer)
	}
	for k, v := range r.Header {
		req.Header.Set(k, v)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
