package bench

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// Version is fraudbench's version; it is in every request's User-Agent.
const Version = "0.1.0"

// UserAgent is the User-Agent every request of the suite carries: a real one,
// so fraudd's edge block (403 `error code: 1010`) lets it through.
const UserAgent = "fraudbench/" + Version

// Target is one HTTP server under load: a keep-alive fasthttp HostClient for
// its base URL.
type Target struct {
	// URL is the base URL, e.g. http://127.0.0.1:8080 (no path).
	URL string
	// Host is the host:port of URL, sent as the Host header.
	Host   string
	client *fasthttp.HostClient
}

// TargetOptions tune a Target. The zero value works.
type TargetOptions struct {
	// Conns is the most connections the client opens (default 1).
	Conns int
	// Timeout bounds one request (default 5s).
	Timeout time.Duration
	// AllowRemote lets the target be something other than a loopback
	// address. Load goes to loopback only unless a caller says otherwise.
	AllowRemote bool
}

// ErrNotLoopback is returned by NewTarget for a non-loopback URL without
// TargetOptions.AllowRemote.
var ErrNotLoopback = errors.New("target is not a loopback address")

// NewTarget parses a base URL (http or https) and builds its client.
func NewTarget(base string, o TargetOptions) (*Target, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("target %q: %w", base, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("target %q: scheme must be http or https", base)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("target %q: no host", base)
	}
	if p := strings.TrimRight(u.Path, "/"); p != "" {
		return nil, fmt.Errorf("target %q: give the base URL without a path", base)
	}
	host := u.Host
	if u.Port() == "" {
		if u.Scheme == "https" {
			host = net.JoinHostPort(u.Hostname(), "443")
		} else {
			host = net.JoinHostPort(u.Hostname(), "80")
		}
	}
	if !o.AllowRemote && !isLoopback(u.Hostname()) {
		return nil, fmt.Errorf("%w: %s (pass the remote opt-in to load another machine)", ErrNotLoopback, u.Hostname())
	}
	if o.Conns <= 0 {
		o.Conns = 1
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	hc := &fasthttp.HostClient{
		Addr:                      host,
		Name:                      UserAgent,
		MaxConns:                  o.Conns,
		MaxIdleConnDuration:       time.Minute,
		MaxConnWaitTimeout:        o.Timeout,
		MaxIdemponentCallAttempts: 1, // an error is counted, never retried away
		ReadTimeout:               o.Timeout,
		WriteTimeout:              o.Timeout,
		IsTLS:                     u.Scheme == "https",
	}
	if hc.IsTLS {
		hc.TLSConfig = &tls.Config{ServerName: u.Hostname(), MinVersion: tls.VersionTLS12}
	}
	return &Target{URL: u.Scheme + "://" + u.Host, Host: u.Host, client: hc}, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Do sends req (whose RequestURI is a path) to the target. It sets the Host
// and User-Agent headers.
func (t *Target) Do(req *fasthttp.Request, resp *fasthttp.Response, timeout time.Duration) error {
	req.Header.SetHost(t.Host)
	req.Header.SetUserAgent(UserAgent)
	return t.client.DoTimeout(req, resp, timeout)
}

// CloseIdle closes the target's idle keep-alive connections.
func (t *Target) CloseIdle() { t.client.CloseIdleConnections() }
