package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"syscall"
	"time"

	"github.com/fraudd/fraudd/intel/ipaddr"
)

// errNotPublic refuses a connection to a loopback, private or reserved
// address (a public host name may resolve to one).
var errNotPublic = errors.New("receiver resolves to a non-public address (allowed only with --allow-private-webhooks)")

// errNotHTTPS refuses a plain http:// receiver without --allow-private-webhooks.
var errNotHTTPS = errors.New("receiver is not https:// (http:// allowed only with --allow-private-webhooks)")

// newClient is the delivery HTTP client: a whole attempt (connect, TLS,
// request, response headers and the drained body) is bounded by timeout;
// redirects are never followed (the 3xx is the answer, and a failure); no
// proxy from the environment; unless allowPrivate, every connection is
// checked against the address actually dialled, so DNS cannot point a
// delivery at the service's own network.
func newClient(timeout time.Duration, allowPrivate bool) *http.Client {
	d := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	if !allowPrivate {
		d.ControlContext = func(_ context.Context, _, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil || !ipaddr.IsPublic(ap.Addr().Unmap()) {
				return errNotPublic
			}
			return nil
		}
	}
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   maxInFlight,
		IdleConnTimeout:       90 * time.Second,
	}
	return &http.Client{
		Transport: tr,
		Timeout:   timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// attempt is one signed POST, prepared by the shard, run on its own goroutine.
type attempt struct {
	url     string
	body    []byte
	secret  string
	eventID string
}

// outcome is what an attempt came back with.
type outcome struct {
	start, end time.Time
	status     int
	err        string
}

func (o *outcome) ok() bool { return o.err == "" && o.status >= 200 && o.status < 300 }

// drainLimit is how much of a receiver's answer is read (to reuse the
// connection) before it is closed.
const drainLimit = 64 << 10

// post sends one attempt, stamped and signed at its start by the service clock.
func (s *Service) post(ctx context.Context, a *attempt) outcome {
	var o outcome
	o.start = s.cfg.Clock.Now()
	ts := o.start.Unix()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.url, bytes.NewReader(a.body))
	if err != nil {
		o.end, o.err = s.cfg.Clock.Now(), "invalid url"
		return o
	}
	// The admin API takes only https:// without the flag, but a URL stored
	// while it was on (a development run on the same data, a restored
	// backup) is read back as is: like the address at every connection, the
	// scheme is checked at every attempt, so a signed alert never goes out
	// in clear text.
	if !s.cfg.AllowPrivate && req.URL.Scheme != "https" {
		o.end, o.err = s.cfg.Clock.Now(), errNotHTTPS.Error()
		return o
	}
	h := req.Header
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", s.cfg.UserAgent)
	h.Set("X-Service-Timestamp", strconv.FormatInt(ts, 10))
	h.Set("X-Service-Signature", Sign(a.secret, ts, a.body))
	h.Set("X-Service-Event-Id", a.eventID)
	resp, err := s.client.Do(req)
	if err != nil {
		o.end, o.err = s.cfg.Clock.Now(), describe(err, s.cfg.Timeout)
		return o
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLimit))
	resp.Body.Close()
	o.end, o.status = s.cfg.Clock.Now(), resp.StatusCode
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		o.err = "redirect not followed"
	case resp.StatusCode < 200 || resp.StatusCode >= 300:
		o.err = "HTTP " + strconv.Itoa(resp.StatusCode)
	}
	return o
}

// describe turns a transport error into a short cause without the URL
// (net/http repeats the URL, which for chat webhooks carries a token).
func describe(err error, timeout time.Duration) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		if ue.Timeout() {
			return fmt.Sprintf("timeout after %s", timeout)
		}
		err = ue.Err
	}
	if errors.Is(err, errNotPublic) {
		return errNotPublic.Error()
	}
	if errors.Is(err, context.Canceled) {
		return "cancelled: service stopping"
	}
	return err.Error()
}
