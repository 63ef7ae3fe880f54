package main

import (
	"errors"
	"strings"
	"testing"
)

// TestHostPortFlagRules pins the rules of the address flags: a listen
// address (--addr and the optional listeners) takes an empty host and port 0
// (the kernel picks one), and the optional ones take empty for off; the
// cluster's --cluster-listen takes an empty host but needs a port, and
// --cluster-advertise, an address other nodes dial, needs both. An empty
// port is refused everywhere (Go would read it as 0: a random port).
func TestHostPortFlagRules(t *testing.T) {
	var h helpError
	if _, err := parseServe([]string{"-h"}, envVars{}); !errors.As(err, &h) {
		t.Fatalf("-h: %v", err)
	}
	fs := h.fs
	for _, f := range []struct {
		name  string
		forms string
		ok    map[string]bool
	}{
		{"addr", "host:port or :port, e.g. :8080 or 127.0.0.1:8080",
			map[string]bool{"127.0.0.1:8080": true, ":8080": true, "127.0.0.1:0": true, ":http": true, "": false, "8080": false, "a:b:c": false, "x:nope-port": false, "127.0.0.1:": false, ":": false}},
		{"debug-addr", "host:port or :port, e.g. 127.0.0.1:6060 (empty = off)",
			map[string]bool{"127.0.0.1:6060": true, ":0": true, "": true, "6060": false, "localhost": false, "127.0.0.1:": false, ":": false}},
		{"admin-addr", "host:port or :port, e.g. 127.0.0.1:6060 (empty = off)",
			map[string]bool{"127.0.0.1:8081": true, ":0": true, "": true, "127.0.0.1:": false, ":": false}},
		{"metrics-addr", "host:port or :port, e.g. 127.0.0.1:6060 (empty = off)",
			map[string]bool{"127.0.0.1:9464": true, "127.0.0.1:0": true, "": true, "[::1]:": false, ":": false}},
		{"cluster-listen", "host:port or :port, e.g. :8090",
			map[string]bool{":8090": true, "10.0.0.1:8090": true, ":0": false, "": false, "8090": false, "10.0.0.1:": false, ":": false}},
		{"cluster-advertise", "host:port, e.g. node1.internal:8090",
			map[string]bool{"node1.internal:8090": true, ":8090": false, "n:0": false, "": false, "n:": false}},
	} {
		v := fs.Lookup(f.name)
		if v == nil {
			t.Fatalf("no flag %s", f.name)
		}
		if got := v.Value.(formsOf).Forms(); got != f.forms {
			t.Errorf("--%s forms %q, want %q", f.name, got, f.forms)
		}
		for in, ok := range f.ok {
			err := v.Value.Set(in)
			if (err == nil) != ok {
				t.Errorf("--%s %q: error %v, want accepted %v", f.name, in, err, ok)
			}
			if err == nil && v.Value.String() != in {
				t.Errorf("--%s %q: holds %q", f.name, in, v.Value.String())
			}
			if err != nil && !strings.Contains(err.Error(), "host") && !strings.Contains(err.Error(), "port") {
				t.Errorf("--%s %q: error %q names neither host nor port", f.name, in, err)
			}
		}
	}
}
