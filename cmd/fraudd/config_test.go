package main

import (
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestParseServeEnvironment(t *testing.T) {
	c, err := parseServe(nil, envVars{
		"FRAUDD_ADDR": "127.0.0.1:9", "FRAUDD_EDGE_BLOCK": "false", "FRAUDD_FEEDS_REFRESH": "6h",
		"FRAUDD_LOG_LEVEL": "warn", "FRAUDD_TRUSTED_PROXIES": "10.0.0.0/8, 192.0.2.7", "FRAUDD_EDGE_BLOCK_AGENTS": "",
		"FRAUDD_SPELLED_WRONG": "1", "FRAUDD_URL": "http://x", "HOME": "/root",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.7/32")}
	if c.addr != "127.0.0.1:9" || c.edgeBlock || c.feedsRefresh != 6*time.Hour || c.logLevel != slog.LevelWarn ||
		len(c.trustedProxies) != 2 || c.trustedProxies[0] != want[0] || c.trustedProxies[1] != want[1] || len(c.edgeBlockAgents) != 0 {
		t.Fatalf("config from env: %+v", c)
	}
	if len(c.unknownEnv) != 1 || c.unknownEnv[0] != "FRAUDD_SPELLED_WRONG" {
		t.Fatalf("unknown env: %v", c.unknownEnv)
	}

	// A flag outranks its variable, and a bad variable behind a given flag
	// is not consulted.
	c, err = parseServe([]string{"--edge-block=true", "--feeds-refresh", "1h"}, envVars{"FRAUDD_EDGE_BLOCK": "false", "FRAUDD_FEEDS_REFRESH": "6"})
	if err != nil || !c.edgeBlock || c.feedsRefresh != time.Hour {
		t.Fatalf("flags over env: %+v %v", c, err)
	}

	// The four levels, in any case.
	for in, want := range map[string]slog.Level{"debug": slog.LevelDebug, "INFO": slog.LevelInfo, "Warn": slog.LevelWarn, "error": slog.LevelError} {
		if c, err := parseServe([]string{"--log-level", in}, envVars{}); err != nil || c.logLevel != want {
			t.Errorf("--log-level %s: %v %v, want %v", in, c, err, want)
		}
	}

	// Defaults.
	c, err = parseServe(nil, envVars{})
	if err != nil || c.addr != ":8080" || c.dataDir != "./data" || !c.edgeBlock || c.logLevel != slog.LevelInfo ||
		len(c.edgeBlockAgents) != 1 || c.feedsRefresh != 0 {
		t.Fatalf("defaults: %+v %v", c, err)
	}
}

func TestParseServeRefusesBadValues(t *testing.T) {
	for _, c := range []struct {
		env  envVars
		args []string
		want []string
	}{
		{env: envVars{"FRAUDD_EDGE_BLOCK": "off"}, want: []string{`FRAUDD_EDGE_BLOCK="off"`, "true or false"}},
		{env: envVars{"FRAUDD_FEEDS_REFRESH": "6"}, want: []string{`FRAUDD_FEEDS_REFRESH="6"`, "missing unit", "e.g. 6h"}},
		{env: envVars{"FRAUDD_FEEDS_REFRESH": "-5m"}, want: []string{"negative"}},
		{env: envVars{"FRAUDD_FEEDS_REFRESH": "6s"}, want: []string{`FRAUDD_FEEDS_REFRESH="6s"`, "under 1m0s", "1m or more"}},
		{env: envVars{"FRAUDD_LOG_LEVEL": "loud"}, want: []string{"FRAUDD_LOG_LEVEL", "debug, info, warn or error"}},
		// slog's offsets ("info+2") name levels the help does not list.
		{env: envVars{"FRAUDD_LOG_LEVEL": "info+2"}, want: []string{`FRAUDD_LOG_LEVEL="info+2"`, "unknown level", "debug, info, warn or error"}},
		{args: []string{"--log-level", "DEBUG-4"}, want: []string{`--log-level="DEBUG-4"`, "unknown level"}},
		{args: []string{"--log-level", "8"}, want: []string{"unknown level"}},
		{env: envVars{"FRAUDD_TRUSTED_PROXIES": "10.0.0.0/33"}, want: []string{"FRAUDD_TRUSTED_PROXIES", "IPs or CIDRs"}},
		{env: envVars{"FRAUDD_EDGE_BLOCK": "", "FRAUDD_TEST_CLOCK": "2"}, want: []string{"FRAUDD_EDGE_BLOCK", "FRAUDD_TEST_CLOCK"}},
		{args: []string{"--feeds-refresh", "6"}, want: []string{"-feeds-refresh", "accepted: a Go duration"}},
		{args: []string{"--edge-block=off"}, want: []string{"-edge-block", "accepted: true or false"}},
		{args: []string{"extra"}, want: []string{`unexpected argument "extra"`}},
		// A boolean flag takes no separate value: the line says so.
		{args: []string{"--edge-block", "false"}, want: []string{`unexpected argument "false" after --edge-block, which takes no separate value: write --edge-block=false`}},
		{args: []string{"-test-clock", "1", "--addr", ":1"}, want: []string{`write -test-clock=1`}},
		// CLARIFICATIONS "Auth": curl, browsers and Go's net/http are never
		// blocked, so no entry may match their User-Agents.
		{args: []string{"--edge-block-agents", "Python-urllib/,curl/"}, want: []string{"-edge-block-agents", `"curl/" would block curl/`}},
		{env: envVars{"FRAUDD_EDGE_BLOCK_AGENTS": "Mozilla"}, want: []string{`FRAUDD_EDGE_BLOCK_AGENTS="Mozilla"`, "would block Mozilla/"}},
		{args: []string{"--edge-block-agents", "Go-http-client/1.1"}, want: []string{"would block Go-http-client/"}},
		{args: []string{"--edge-block-agents", "c"}, want: []string{"would block curl/"}},
		// A wrong SMTP URL stops the start naming the flag, before the
		// store is opened, and keeps its password out of the line.
		{env: envVars{"FRAUDD_SMTP_URL": "http://x"}, want: []string{`FRAUDD_SMTP_URL`, "smtp://[user:pass@]host:port"}},
		{args: []string{"--smtp-url", "smtp://u:hunter2@"}, want: []string{"-smtp-url", "smtp://[user:pass@]host:port"}},
	} {
		_, err := parseServe(c.args, c.env)
		if err == nil {
			t.Errorf("%v %v: accepted", c.env, c.args)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v %v: error %q lacks %q", c.env, c.args, err, w)
			}
		}
	}
	if _, err := parseServe([]string{"--smtp-url", "smtp://u:hunter2@"}, envVars{}); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("--smtp-url without a host: %v (want refused, without the password)", err)
	}
	for _, ok := range []string{"Python-urllib/,python-requests/,Wget/", ""} {
		if _, err := parseServe([]string{"--edge-block-agents", ok, "--smtp-url", "smtp://u:p@mail.example:587?from=a@b.example"}, envVars{}); err != nil {
			t.Errorf("--edge-block-agents %q: %v", ok, err)
		}
	}
	var h helpError
	if _, err := parseServe([]string{"-h"}, envVars{"FRAUDD_EDGE_BLOCK": "off"}); !errors.As(err, &h) {
		t.Errorf("-h: %v", err)
	}
}

func TestHealthURLFollowsAddr(t *testing.T) {
	for addr, want := range map[string]string{
		"": "http://127.0.0.1:8080", ":9000": "http://127.0.0.1:9000", "0.0.0.0:81": "http://127.0.0.1:81",
		"[::]:82": "http://127.0.0.1:82", "10.1.2.3:83": "http://10.1.2.3:83", "[::1]:84": "http://[::1]:84", "junk": "http://127.0.0.1:8080",
	} {
		env := envVars{}
		if addr != "" {
			env["FRAUDD_ADDR"] = addr
		}
		if got := localURL(env); got != want {
			t.Errorf("FRAUDD_ADDR=%q: %s, want %s", addr, got, want)
		}
	}
}

// TestAdminURLFollowsAdminAddr: fraudd admin and backup default to the
// admin API of the server their environment configures: FRAUDD_ADMIN_ADDR
// when set, else FRAUDD_ADDR (before: always 127.0.0.1:8080).
func TestAdminURLFollowsAdminAddr(t *testing.T) {
	for _, c := range []struct {
		env  envVars
		want string
	}{
		{envVars{}, "http://127.0.0.1:8080"},
		{envVars{"FRAUDD_ADDR": ":9000"}, "http://127.0.0.1:9000"},
		{envVars{"FRAUDD_ADDR": ":9000", "FRAUDD_ADMIN_ADDR": "127.0.0.1:8081"}, "http://127.0.0.1:8081"},
		{envVars{"FRAUDD_ADMIN_ADDR": "0.0.0.0:8082"}, "http://127.0.0.1:8082"},
		{envVars{"FRAUDD_ADDR": ":9000", "FRAUDD_ADMIN_ADDR": ""}, "http://127.0.0.1:9000"},
	} {
		if got := localAdminURL(c.env); got != c.want {
			t.Errorf("%v: %s, want %s", c.env, got, c.want)
		}
	}
}

// TestParseServeRefusesBadListenAddrs: a listen address that is not
// host:port stops the start with one line naming the flag or variable,
// instead of coming up without the listener (--debug-addr only logged an
// ERROR and served on) or failing later without naming the variable.
func TestParseServeRefusesBadListenAddrs(t *testing.T) {
	for _, c := range []struct {
		env  envVars
		args []string
		want []string
	}{
		{env: envVars{"FRAUDD_DEBUG_ADDR": "6060"}, want: []string{`FRAUDD_DEBUG_ADDR="6060"`, "not host:port", "accepted: host:port"}},
		{args: []string{"--debug-addr", "127.0.0.1:http-alt-nope"}, want: []string{"-debug-addr", "bad port"}},
		{env: envVars{"FRAUDD_METRICS_ADDR": "localhost"}, want: []string{"FRAUDD_METRICS_ADDR", "not host:port"}},
		{env: envVars{"FRAUDD_ADMIN_ADDR": "8081"}, want: []string{"FRAUDD_ADMIN_ADDR", "not host:port"}},
		{env: envVars{"FRAUDD_ADDR": "junk"}, want: []string{`FRAUDD_ADDR="junk"`, "not host:port"}},
		{args: []string{"--addr", ""}, want: []string{"-addr"}},
		{env: envVars{"FRAUDD_ADDR": "127.0.0.1:"}, want: []string{`FRAUDD_ADDR="127.0.0.1:"`, "the port is empty", "accepted: host:port"}},
		{env: envVars{"FRAUDD_ADDR": ":"}, want: []string{`FRAUDD_ADDR=":"`, "the port is empty"}},
		{args: []string{"--debug-addr", "127.0.0.1:"}, want: []string{"-debug-addr", "the port is empty"}},
		{env: envVars{"FRAUDD_ADMIN_ADDR": "127.0.0.1:"}, want: []string{"FRAUDD_ADMIN_ADDR", "the port is empty"}},
		{env: envVars{"FRAUDD_METRICS_ADDR": ":"}, want: []string{"FRAUDD_METRICS_ADDR", "the port is empty"}},
	} {
		_, err := parseServe(c.args, c.env)
		if err == nil {
			t.Errorf("%v %v: accepted", c.env, c.args)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v %v: error %q lacks %q", c.env, c.args, err, w)
			}
		}
	}
	// The forms that serve: empty turns the optional listeners off.
	c, err := parseServe([]string{"--addr", "127.0.0.1:0", "--debug-addr", "127.0.0.1:6060", "--metrics-addr", ":9464", "--admin-addr", ""},
		envVars{"FRAUDD_DEBUG_ADDR": "junk"})
	if err != nil || c.addr != "127.0.0.1:0" || c.debugAddr != "127.0.0.1:6060" || c.metricsAddr != ":9464" || c.adminAddr != "" {
		t.Fatalf("good addresses: %+v %v", c, err)
	}
	if c, err := parseServe(nil, envVars{}); err != nil || c.addr != ":8080" || c.debugAddr != "" {
		t.Fatalf("defaults: %+v %v", c, err)
	}
}

// TestParseServeRefusesOneAddressTwice: two of serve's listeners on one
// address stop the start naming both flags, before the store is opened
// (in cluster mode before the node joins), instead of a late "listen on
// …: address already in use" that named neither and sent the operator
// looking for another process. Port 0 and distinct hosts are served.
func TestParseServeRefusesOneAddressTwice(t *testing.T) {
	embedded := []string{"--cluster-embedded-etcd", "--cluster-node-id", "n1"}
	for _, c := range []struct {
		env  envVars
		args []string
		want []string
	}{
		{args: []string{"--addr", "127.0.0.1:8080", "--admin-addr", "127.0.0.1:8080"}, want: []string{"--admin-addr 127.0.0.1:8080 and --addr 127.0.0.1:8080", "give --admin-addr another port"}},
		{args: []string{"--addr", ":8080", "--admin-addr", "127.0.0.1:8080"}, want: []string{"--admin-addr", "--addr :8080"}},
		{args: []string{"--addr", "127.0.0.1:8080"}, env: envVars{"FRAUDD_METRICS_ADDR": "0.0.0.0:8080"}, want: []string{"--metrics-addr 0.0.0.0:8080 and --addr"}},
		{args: []string{"--addr", "[::]:80", "--debug-addr", "127.0.0.1:http"}, want: []string{"--debug-addr 127.0.0.1:http and --addr [::]:80"}},
		{args: []string{"--admin-addr", "127.0.0.1:9464", "--metrics-addr", "127.0.0.1:9464"}, want: []string{"--metrics-addr 127.0.0.1:9464 and --admin-addr"}},
		{args: []string{"--addr", "LOCALHOST:8080", "--admin-addr", "localhost:8080"}, want: []string{"--admin-addr localhost:8080 and --addr"}},
		{args: []string{"--addr", ":8090", "--cluster-etcd", "etcd:2379", "--cluster-node-id", "n1"}, want: []string{"--cluster-listen :8090 and --addr :8090"}},
		{args: append([]string{"--addr", "127.0.0.1:2379"}, embedded...), want: []string{"--cluster-etcd-client-url 127.0.0.1:2379 and --addr"}},
		{args: append([]string{"--cluster-etcd-peer-url", "http://127.0.0.1:2379"}, embedded...), want: []string{"--cluster-etcd-peer-url 127.0.0.1:2379 and --cluster-etcd-client-url 127.0.0.1:2379"}},
	} {
		_, err := parseServe(c.args, c.env)
		if err == nil {
			t.Errorf("%v %v: accepted", c.env, c.args)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v %v: error %q lacks %q", c.env, c.args, err, w)
			}
		}
	}
	for _, ok := range [][]string{
		{"--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0", "--debug-addr", ":0"},
		{"--addr", "127.0.0.1:8080", "--admin-addr", "127.0.0.2:8080"},
		{"--addr", "0.0.0.0:8080", "--admin-addr", "[::1]:8080"},
		{"--addr", "127.0.0.1:8080", "--admin-addr", "localhost:8080"}, // left to the kernel
		{"--addr", ":8080", "--admin-addr", ":8081", "--metrics-addr", ":9464", "--debug-addr", ":6060"},
		append([]string{"--addr", ":8080"}, embedded...),
	} {
		if _, err := parseServe(ok, envVars{}); err != nil {
			t.Errorf("%v: %v", ok, err)
		}
	}
}

// TestServeHelpStatesWhatIsRefused: serve -h is where an operator reads
// what a flag takes (README Configuration), and it left out the ranges the
// flags refuse outside of (--feeds-refresh under 1m, --sync-interval
// outside 1ms–10s, --cluster-lease-ttl outside whole 1s–60s,
// --cluster-lease-after above 1000000); --durability said interval mode
// answers "once committed", where README says a call is answered once
// counted in memory and its commit waits for the group sync.
func TestServeHelpStatesWhatIsRefused(t *testing.T) {
	var h helpError
	if _, err := parseServe([]string{"-h"}, envVars{}); !errors.As(err, &h) {
		t.Fatalf("-h: %v", err)
	}
	for name, want := range map[string]string{
		"feeds-refresh":       "1m or more",
		"sync-interval":       "1ms to 10s",
		"cluster-lease-ttl":   "whole seconds from 1s to 60s",
		"cluster-lease-after": "at most 1000000",
		"durability":          "answered once counted in memory",
	} {
		if u := h.fs.Lookup(name).Usage; !strings.Contains(u, want) {
			t.Errorf("--%s help %q lacks %q", name, u, want)
		}
	}
	if u := h.fs.Lookup("durability").Usage; strings.Contains(u, "answered once committed") {
		t.Errorf("--durability help still says %q", u)
	}
}
