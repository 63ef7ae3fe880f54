package e2e

import (
	"os/exec"
	"strings"
	"testing"
)

// TestHealthProbes: /healthz and /readyz answer without credentials, without
// a User-Agent and without a rate limit, and `fraudd health` (the image's
// HEALTHCHECK) follows /readyz.
func TestHealthProbes(t *testing.T) {
	s := Start(t, bin)
	for i := 0; i < 300; i++ {
		for _, p := range []string{"/healthz", "/readyz"} {
			r := s.Do(t, Req{Path: p, NoAgent: i%2 == 0})
			if r.Status != 200 {
				t.Fatalf("%s #%d: %d %s", p, i, r.Status, r.Body)
			}
		}
	}
	if r := s.Do(t, Req{Path: "/readyz"}); string(r.Body) != `{"status":"ready"}` {
		t.Fatalf("readyz body: %s", r.Body)
	}
	out, err := exec.Command(bin, "health", "--url", s.URL).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ready") {
		t.Fatalf("fraudd health on a ready server: %v %s", err, out)
	}
	url := s.URL
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(bin, "health", "--url", url, "--timeout", "2s").CombinedOutput()
	if !isExit(err, 1) {
		t.Fatalf("fraudd health on a stopped server: %v %s", err, out)
	}
}
