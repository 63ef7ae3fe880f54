package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestHealthRefusesNonPositiveTimeout: --timeout 0 or below would give the
// probe no timeout at all (http.Client reads it as none), so a HEALTHCHECK
// against a hung server would hang with it; it is a usage error instead.
func TestHealthRefusesNonPositiveTimeout(t *testing.T) {
	for _, v := range []string{"0", "-1s"} {
		var out, errb bytes.Buffer
		code := run([]string{"health", "--url", "http://127.0.0.1:1", "--timeout", v}, &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), "--timeout") {
			t.Errorf("--timeout %s: exit %d, stderr %q; want 2 naming --timeout", v, code, errb.String())
		}
	}
}
