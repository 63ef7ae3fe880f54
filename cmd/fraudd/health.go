package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// runHealth is `fraudd health`: GET <url>/readyz (or /healthz with --live)
// and exit 0 on 200, 1 otherwise. Distroless and scratch images have no curl
// or wget, so the image's HEALTHCHECK runs the binary itself.
func runHealth(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fraudd health", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	base := new(string)
	*base = localURL(osEnv())
	fs.Var(serverURL{base}, "url", "service base URL (default: the loopback address of FRAUDD_ADDR)")
	live := fs.Bool("live", false, "probe /healthz (the process serves) instead of /readyz (ready for traffic)")
	timeout := 3 * time.Second
	fs.Var(positiveDuration{&timeout}, "timeout", "give up after this long (above 0)")
	if err := parseFlagsEnv(fs, args, osEnv()); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, "usage: fraudd health [flags]\n\nExits 0 when the server at --url is ready (GET /readyz answers 200), 1 otherwise.\n\nflags:\n")
			printFlags(stdout, fs, true)
			return 0
		}
		fmt.Fprintf(stderr, "fraudd health: %v\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "fraudd health: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	path := "/readyz"
	if *live {
		path = "/healthz"
	}
	req, err := http.NewRequest("GET", strings.TrimRight(*base, "/")+path, nil)
	if err != nil {
		fmt.Fprintf(stderr, "fraudd health: %v\n", err)
		return 2
	}
	req.Header.Set("User-Agent", "fraudd-health/"+version)
	resp, err := (&http.Client{Timeout: timeout}).Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "fraudd health: %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "fraudd health: %s: HTTP %d %s\n", req.URL, resp.StatusCode, strings.TrimSpace(string(body)))
		return 1
	}
	fmt.Fprintf(stdout, "%s\n", strings.TrimSpace(string(body)))
	return 0
}

// localURL is the loopback URL of the server this environment configures
// (FRAUDD_ADDR, default :8080), so a HEALTHCHECK follows a changed port.
func localURL(env envVars) string {
	addr, _ := env.lookup("FRAUDD_ADDR")
	return loopbackURL(addr)
}

// localAdminURL is the loopback URL of the admin API of the server this
// environment configures: FRAUDD_ADMIN_ADDR when set (the admin API is
// served there only), else FRAUDD_ADDR. The admin and backup commands
// default to it, so `docker compose exec fraudd fraudd admin …` in a
// container whose environment moved the port reaches its server, as its
// HEALTHCHECK does, instead of a refused 127.0.0.1:8080.
func localAdminURL(env envVars) string {
	if addr, ok := env.lookup("FRAUDD_ADMIN_ADDR"); ok && addr != "" {
		return loopbackURL(addr)
	}
	return localURL(env)
}

// loopbackURL is the URL a local client dials for a listen address: an
// unspecified host is the loopback one; an unreadable or empty address is
// the default :8080.
func loopbackURL(addr string) string {
	if addr == "" {
		return "http://127.0.0.1:8080"
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://127.0.0.1:8080"
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// listenURL is the URL a local client uses for the listener at a: an
// unspecified host (":8080") becomes localhost.
func listenURL(a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return "http://" + a.String()
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port)
}
