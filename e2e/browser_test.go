package e2e

import (
	"context"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fraudd/fraudd/internal/testtools"
)

// findChromium returns a Chromium binary, or "" when none is installed.
// .ci/run installs Debian's chromium package when it is missing.
func findChromium() string {
	if p := os.Getenv("FRAUDD_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// submission is one form post the test backend received from the browser,
// with the backend's evaluate answer.
type submission struct {
	form     url.Values
	evaluate *Response
}

// shop is the caller's site in the SPEC §1 flow: a page that includes
// collector.js and a form, and a backend that forwards the posted form to
// /v1/evaluate with the secret key.
type shop struct {
	srv  *httptest.Server
	subs chan submission
}

func newShop(t *testing.T, s *Server, acct Account) *shop {
	sh := &shop{subs: make(chan submission, 4)}
	page := `<!doctype html><html><head><title>shop</title>
<script src="` + html.EscapeString(s.URL) + `/collector.js" data-key="` + html.EscapeString(acct.PublishableKey) + `" async></script>
</head><body>
<form id="checkout" method="post" action="/submit"><input name="item" value="book"></form>
<script>
(function wait() {
  if (!window.FraudCollector) { return setTimeout(wait, 20); }
  window.FraudCollector.ready.then(function () { document.getElementById('checkout').submit(); });
})();
</script></body></html>`
	sh.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			io.WriteString(w, page)
		case "/submit":
			if err := r.ParseForm(); err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			// The backend forwards the hidden inputs as they came: a form body
			// with the alias names (SPEC 2.1).
			ev := s.Do(t, Req{Method: "POST", Path: "/v1/evaluate", Bearer: acct.LiveKey,
				Header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"},
				Body:   r.PostForm.Encode()})
			sh.subs <- submission{form: r.PostForm, evaluate: ev}
			io.WriteString(w, "thanks")
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(sh.srv.Close)
	return sh
}

// load opens the shop page in headless Chromium and waits for the form post.
func (sh *shop) load(t *testing.T, chromium, profile string) submission {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.Command(chromium, "--headless", "--no-sandbox", "--disable-gpu",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--no-first-run", "--no-default-browser-check", "--disable-dev-shm-usage",
		"--user-data-dir="+profile, sh.srv.URL+"/")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		// Our own process group only: Chromium's helpers are its children.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}
	select {
	case sub := <-sh.subs:
		stop()
		return sub
	case err := <-exited:
		t.Fatalf("chromium exited before the form was posted: %v\n%s", err, tail(logs.String()))
	case <-ctx.Done():
		stop()
		t.Fatalf("no form post within 90s\n%s", tail(logs.String()))
	}
	return submission{}
}

func tail(s string) string {
	if len(s) > 4000 {
		return s[len(s)-4000:]
	}
	return s
}

// TestBrowserCollectorEndToEnd: headless Chromium loads a page with
// collector.js and a form, the collector fills the hidden inputs, the form
// posts to the shop's backend, and the backend's evaluate shows the device
// verdicts of a headless browser.
func TestBrowserCollectorEndToEnd(t *testing.T) {
	chromium := findChromium()
	if chromium == "" {
		testtools.Skip(t, "chromium", "apt-get install -y chromium; the real-browser test")
	}
	s := Start(t, bin)
	acct := s.CreateAccount(t, map[string]any{"email": "browser@example.com", "plan": "starter"})
	sh := newShop(t, s, acct)
	// Confine the publishable key to the shop's origin: the browser's CORS
	// check must pass for the real page.
	if r := s.Admin(t, "PATCH", "/admin/v1/accounts/"+acct.ID, map[string]any{"origins": []string{sh.srv.URL}}); r.Status != 200 {
		t.Fatalf("set origins: %d %s", r.Status, r.Body)
	}
	profile := filepath.Join(t.TempDir(), "profile")

	first := sh.load(t, chromium, profile)
	for _, name := range []string{"netcheck", "service_fp", "service_tz"} {
		if first.form.Get(name) == "" {
			t.Fatalf("hidden input %s empty in the posted form: %v\nserver logs:\n%s", name, first.form, tail(s.Logs()))
		}
	}
	if first.form.Get("item") != "book" {
		t.Fatalf("the page's own field was lost: %v", first.form)
	}
	ev := first.evaluate
	if ev.Status != 200 {
		t.Fatalf("evaluate: %d %s", ev.Status, ev.Body)
	}
	m := ev.JSON(t)
	dev, _ := m["device"].(map[string]any)
	if dev == nil {
		t.Fatalf("no device object: %s", ev.Body)
	}
	if dev["automation"] != true || m["decision"] != "block" || m["device_status"] != "ok" || !browserHasReason(m, "automation_detected") {
		t.Fatalf("headless Chromium not caught: %s", ev.Body)
	}
	visitor, _ := dev["visitor_id"].(string)
	if visitor == "" || dev["complete"] != true {
		t.Fatalf("visitor_id / complete: %s", ev.Body)
	}
	if m["degraded"] != false {
		t.Fatalf("a real token gave a degraded answer: %s", ev.Body)
	}
	// The browser reached us over loopback: the network reading could not
	// measure a public address.
	if netw, _ := m["network"].(map[string]any); netw["sdk_blocked"] != true || netw["complete"] != false {
		t.Fatalf("network of a loopback visitor: %s", ev.Body)
	}
	evid, _ := m["evidence"].(map[string]any)
	if evid == nil || evid["device_replayed"] != false || evid["device_age_s"] == nil || evid["network_age_s"] == nil {
		t.Fatalf("evidence: %s", ev.Body)
	}
	t.Logf("first load: visitor_id %s, checked %v, tampering %v", visitor, dev["checked_signals"], dev["tampering_score"])

	// A second load of the same browser profile: the same device.
	second := sh.load(t, chromium, profile)
	m2 := second.evaluate.JSON(t)
	dev2, _ := m2["device"].(map[string]any)
	if dev2 == nil || dev2["visitor_id"] != visitor {
		t.Fatalf("visitor_id not stable across loads: %v vs %s", dev2, visitor)
	}
	if dev2["times_seen"] != float64(2) || dev2["returning"] != true {
		t.Fatalf("second sighting: %s", second.evaluate.Body)
	}
	if second.form.Get("service_fp") == first.form.Get("service_fp") || second.form.Get("netcheck") == "" {
		t.Fatal("the second load reused the first event")
	}

	// The backend evaluating the first event again: a replay.
	again := s.Do(t, Req{Method: "POST", Path: "/v1/evaluate", Bearer: acct.LiveKey, Body: map[string]any{
		"token": first.form.Get("netcheck"), "fingerprintEventId": first.form.Get("service_fp"),
	}})
	ma := again.JSON(t)
	if e, _ := ma["evidence"].(map[string]any); e == nil || e["device_replayed"] != true {
		t.Fatalf("second evaluate of one event is not a replay: %s", again.Body)
	}
}

func browserHasReason(m map[string]any, code string) bool {
	rs, _ := m["reasons"].([]any)
	for _, r := range rs {
		if r == code {
			return true
		}
	}
	return false
}
