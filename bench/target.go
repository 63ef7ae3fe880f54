package bench

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync/atomic"
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
	// pool, for a Target over several servers (NewTargets), is one
	// Target per server, taken in turn.
	pool []*member
	next atomic.Uint64
	// lastFail is when a pooled server not dropped last answered 5xx or
	// not at all (Unix nanoseconds).
	lastFail atomic.Int64
}

// member is one server of a pooled Target and what it answered.
type member struct {
	t                *Target
	dropped          atomic.Bool
	answered, failed atomic.Int64
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

// NewTargets is one Target over several servers of one service (the
// nodes of a cluster): each request goes to the next server in turn that
// has not been dropped, as a round-robin load balancer sends it. Its URL
// and Host are the first server's.
func NewTargets(bases []string, o TargetOptions) (*Target, error) {
	if len(bases) == 0 {
		return nil, errors.New("no target")
	}
	o.Conns = max(o.Conns, 1)
	var pool []*member
	for _, b := range bases {
		t, err := NewTarget(b, o)
		if err != nil {
			return nil, err
		}
		pool = append(pool, &member{t: t})
	}
	return &Target{URL: pool[0].t.URL, Host: pool[0].t.Host, client: pool[0].t.client, pool: pool}, nil
}

// Drop stops sending to server i of a pooled Target: the load balancer
// took it out (fraudbench killed it).
func (t *Target) Drop(i int) { t.pool[i].dropped.Store(true) }

// Served is what server i of a pooled Target answered: 2xx–4xx, and 5xx
// or no answer.
func (t *Target) Served(i int) (answered, failed int64) {
	return t.pool[i].answered.Load(), t.pool[i].failed.Load()
}

// LastFailure is when a pooled server that was not dropped last answered
// 5xx or not at all (zero: never).
func (t *Target) LastFailure() time.Time {
	if n := t.lastFail.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// Do sends req (whose RequestURI is a path) to the target. It sets the Host
// and User-Agent headers.
func (t *Target) Do(req *fasthttp.Request, resp *fasthttp.Response, timeout time.Duration) error {
	if t.pool != nil {
		return t.doPooled(req, resp, timeout)
	}
	req.Header.SetHost(t.Host)
	req.Header.SetUserAgent(UserAgent)
	return t.client.DoTimeout(req, resp, timeout)
}

func (t *Target) doPooled(req *fasthttp.Request, resp *fasthttp.Response, timeout time.Duration) error {
	var m *member
	for range len(t.pool) {
		m = t.pool[t.next.Add(1)%uint64(len(t.pool))]
		if !m.dropped.Load() {
			break
		}
	}
	err := m.t.Do(req, resp, timeout)
	if err != nil || resp.StatusCode() >= 500 {
		m.failed.Add(1)
		if !m.dropped.Load() {
			t.lastFail.Store(time.Now().UnixNano())
		}
	} else {
		m.answered.Add(1)
	}
	return err
}

// CloseIdle closes the target's idle keep-alive connections.
func (t *Target) CloseIdle() {
	if t.pool != nil {
		for _, m := range t.pool {
			m.t.CloseIdle()
		}
		return
	}
	t.client.CloseIdleConnections()
}
