package fastapi

import (
	"bytes"
	"compress/gzip"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

func (e *testEnv) serveHTTP(method, uri string, hdr map[string]string) *fasthttp.RequestCtx {
	ctx := new(fasthttp.RequestCtx)
	ctx.Request.Header.SetMethod(method)
	ctx.Request.SetRequestURI(uri)
	ctx.Request.Header.Set("User-Agent", "unit-test/1")
	for k, v := range hdr {
		ctx.Request.Header.Set(k, v)
	}
	e.srv.serveHTTP(ctx)
	return ctx
}

func gunzip(t *testing.T, b []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestGzipOverOneKB(t *testing.T) {
	e := newTestEnv(t)
	plain := e.serveHTTP("GET", "/collector.js", nil)
	if ce := plain.Response.Header.ContentEncoding(); len(ce) != 0 {
		t.Fatalf("compressed without Accept-Encoding: %s", ce)
	}
	if v := string(plain.Response.Header.Peek("Vary")); v != "Accept-Encoding" {
		t.Fatalf("Vary on a compressible answer: %q", v)
	}
	z := e.serveHTTP("GET", "/collector.js", map[string]string{"Accept-Encoding": "br, gzip;q=0.9"})
	if string(z.Response.Header.ContentEncoding()) != "gzip" {
		t.Fatalf("not compressed: %q", z.Response.Header.ContentEncoding())
	}
	if len(z.Response.Body()) >= len(plain.Response.Body()) {
		t.Fatalf("gzip body %d ≥ plain %d", len(z.Response.Body()), len(plain.Response.Body()))
	}
	if !bytes.Equal(gunzip(t, z.Response.Body()), plain.Response.Body()) {
		t.Fatal("gzip body does not decompress to the plain one")
	}
	et := string(z.Response.Header.Peek("ETag"))
	if et != "W/"+string(plain.Response.Header.Peek("ETag")) {
		t.Fatalf("gzip ETag %q (plain %q): want the weak form", et, plain.Response.Header.Peek("ETag"))
	}
	// The weak tag still revalidates.
	if nm := e.serveHTTP("GET", "/collector.js", map[string]string{"Accept-Encoding": "gzip", "If-None-Match": et}); nm.Response.StatusCode() != 304 {
		t.Fatalf("If-None-Match with the weak tag: %d", nm.Response.StatusCode())
	}
	// Small answers stay as they are, with no Vary.
	small := e.serveHTTP("GET", "/healthz", map[string]string{"Accept-Encoding": "gzip"})
	if len(small.Response.Header.ContentEncoding()) != 0 || len(small.Response.Header.Peek("Vary")) != 0 {
		t.Fatalf("a %d-byte answer was compressed or varied", len(small.Response.Body()))
	}
	// An evaluate answer (over 1 KB) is compressed too.
	ev := e.serveHTTP("GET", "/v1/evaluate/sample?scenario=vpn", map[string]string{"Accept-Encoding": "gzip"})
	if ev.Response.StatusCode() != 200 || string(ev.Response.Header.ContentEncoding()) != "gzip" ||
		!bytes.Contains(gunzip(t, ev.Response.Body()), []byte(`"decision"`)) {
		t.Fatalf("sample: %d %q", ev.Response.StatusCode(), ev.Response.Header.ContentEncoding())
	}
}

func TestWWWAuthenticateOn401(t *testing.T) {
	e := newTestEnv(t)
	missing := e.serveHTTP("GET", "/v1/usage", nil)
	if missing.Response.StatusCode() != 401 {
		t.Fatalf("usage without key: %d", missing.Response.StatusCode())
	}
	if v := string(missing.Response.Header.Peek("WWW-Authenticate")); !strings.HasPrefix(v, `Bearer realm="fraudd"`) ||
		!strings.Contains(v, `resource_metadata="http://`) || strings.Contains(v, "error=") {
		t.Fatalf("no credential: WWW-Authenticate %q", v)
	}
	bad := e.serveHTTP("GET", "/v1/usage", map[string]string{"Authorization": "Bearer sk_live_nope"})
	if v := string(bad.Response.Header.Peek("WWW-Authenticate")); bad.Response.StatusCode() != 401 || !strings.HasSuffix(v, `error="invalid_token"`) {
		t.Fatalf("bad key: %d WWW-Authenticate %q", bad.Response.StatusCode(), v)
	}
	adm := e.serveHTTP("GET", "/admin/v1/mail", map[string]string{"Authorization": "Bearer wrong"})
	if v := string(adm.Response.Header.Peek("WWW-Authenticate")); adm.Response.StatusCode() != 401 || !strings.HasPrefix(v, "Bearer") {
		t.Fatalf("admin: %d WWW-Authenticate %q", adm.Response.StatusCode(), v)
	}
	// Non-401 answers carry none.
	if ok := e.serveHTTP("GET", "/api/status", nil); len(ok.Response.Header.Peek("WWW-Authenticate")) != 0 {
		t.Fatal("WWW-Authenticate on a 200")
	}
}

func TestAccessLogKeepsSecretsOut(t *testing.T) {
	e := newTestEnv(t)
	var buf bytes.Buffer
	e.srv.cfg.AccessLog = slog.New(slog.NewTextHandler(&buf, nil))
	key := e.acct.LiveKey
	ctx := e.serveHTTP("GET", "/v1/usage?email=someone@example.com", map[string]string{"Authorization": "Bearer " + key})
	if ctx.Response.StatusCode() != 200 {
		t.Fatalf("usage: %d", ctx.Response.StatusCode())
	}
	line := buf.String()
	for _, want := range []string{"msg=access", "method=GET", "path=/v1/usage", "status=200", "bytes=", "us=", "client=", "request_id=req_"} {
		if !strings.Contains(line, want) {
			t.Errorf("access line lacks %q: %s", want, line)
		}
	}
	for _, secret := range []string{key, key[len(key)-8:], "someone@example.com", "Bearer"} {
		if strings.Contains(line, secret) {
			t.Fatalf("access line contains %q: %s", secret, line)
		}
	}
	if strings.Count(line, "\n") != 1 {
		t.Fatalf("want one line per request: %q", line)
	}
}

// BenchmarkAccessLog is the access log's cost per request: compare
// off (nil) with on (logfmt to a discarding writer).
func BenchmarkAccessLog(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "off"
		if on {
			name = "on"
		}
		b.Run(name, func(b *testing.B) {
			e := newTestEnv(&testing.T{})
			if on {
				e.srv.cfg.AccessLog = slog.New(slog.NewTextHandler(io.Discard, nil))
			}
			ctx := new(fasthttp.RequestCtx)
			ctx.Request.Header.SetMethod("GET")
			ctx.Request.SetRequestURI("/healthz")
			ctx.Request.Header.Set("User-Agent", "bench/1")
			b.ReportAllocs()
			for b.Loop() {
				ctx.Response.Reset()
				e.srv.serveHTTP(ctx)
			}
		})
	}
}

func TestAcceptsGzip(t *testing.T) {
	for ae, want := range map[string]bool{
		"gzip": true, "br, gzip;q=0.9": true, "GZIP": true, "deflate, *": true, "gzip, deflate, br": true,
		"": false, "br": false, "gzip;q=0": false, "gzip; q=0.000": false, "x-gzip2": false, "identity": false, "gzip;q=0.01": true,
	} {
		if got := acceptsGzip([]byte(ae)); got != want {
			t.Errorf("acceptsGzip(%q) = %v", ae, got)
		}
	}
}
