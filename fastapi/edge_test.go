package fastapi

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
)

// TestContentEncodedBodies: a body sent with a Content-Encoding is read
// decoded (RFC 9110 §8.4), to the same 64 KiB as a plain one; read as it
// came, a gzip-coded form was a body without its token, a degraded allow.
// An unknown coding is 415 with the codings read, a body that is not valid
// data in its coding 400, one that decodes past the limit 413.
func TestContentEncodedBodies(t *testing.T) {
	e := newTestEnv(t)
	post := func(ctype, enc string, body []byte) *fasthttp.RequestCtx {
		return e.serve(testRequest{method: "POST", uri: "/v1/evaluate", body: body, header: [][2]string{
			{"Authorization", "Bearer " + e.acct.LiveKey}, {"Content-Type", ctype}, {"Content-Encoding", enc},
		}})
	}
	decision := func(ctx *fasthttp.RequestCtx) string {
		var out struct {
			Decision string `json:"decision"`
		}
		_ = json.Unmarshal(ctx.Response.Body(), &out)
		return out.Decision
	}
	form := []byte("token=test_tor")
	js := []byte(`{"token":"test_tor"}`)
	for _, c := range []struct {
		enc, ctype string
		body       []byte
	}{
		{"gzip", "application/x-www-form-urlencoded", fasthttp.AppendGzipBytes(nil, form)},
		{"GZIP", "application/json", fasthttp.AppendGzipBytes(nil, js)},
		{"x-gzip", "application/json", fasthttp.AppendGzipBytes(nil, js)},
		{"deflate", "application/json", fasthttp.AppendDeflateBytes(nil, js)},
		{"br", "application/json", fasthttp.AppendBrotliBytes(nil, js)},
		{"zstd", "application/json", fasthttp.AppendZstdBytes(nil, js)},
		{"identity", "application/json", js},
	} {
		ctx := post(c.ctype, c.enc, c.body)
		if st := ctx.Response.StatusCode(); st != 200 || decision(ctx) != "block" {
			t.Errorf("%s %s: %d %s; want the test_tor block", c.enc, c.ctype, st, ctx.Response.Body())
		}
	}

	ctx := post("application/json", "compress", js)
	if st := ctx.Response.StatusCode(); st != 415 || !strings.Contains(string(ctx.Response.Body()), `"error":"Unsupported Content-Encoding."`) ||
		!strings.Contains(string(ctx.Response.Header.Peek("Accept-Encoding")), "gzip") {
		t.Errorf("compress: %d %s %q", st, ctx.Response.Body(), ctx.Response.Header.Peek("Accept-Encoding"))
	}
	ctx = post("application/json", "gzip", js)
	if st := ctx.Response.StatusCode(); st != 400 || !strings.Contains(string(ctx.Response.Body()), "not valid gzip") {
		t.Errorf("plain body labelled gzip: %d %s", st, ctx.Response.Body())
	}
	bomb := fasthttp.AppendGzipBytes(nil, bytes.Repeat([]byte(" "), maxAPIBody+1))
	if len(bomb) > maxAPIBody {
		t.Fatalf("the bomb is %d bytes coded", len(bomb))
	}
	ctx = post("application/json", "gzip", bomb)
	if st := ctx.Response.StatusCode(); st != 413 {
		t.Errorf("a body decoding past 64 KiB: %d %s", st, ctx.Response.Body())
	}
	ctx = post("application/json", "gzip", fasthttp.AppendGzipBytes(nil, append(js, bytes.Repeat([]byte(" "), maxAPIBody-len(js))...)))
	if st := ctx.Response.StatusCode(); st != 200 || decision(ctx) != "block" {
		t.Errorf("a body decoding to exactly 64 KiB: %d %s", st, ctx.Response.Body())
	}
}

// TestMultipartIsNotRead: SPEC 4.1 "Multipart is not read": a body
// labelled multipart is neither parsed nor refused before authentication.
func TestMultipartIsNotRead(t *testing.T) {
	e := newTestEnv(t)
	addr := serveOnLoopback(t, e)
	for _, c := range []struct {
		auth string
		want int
	}{{"", 401}, {"Authorization: Bearer " + e.acct.LiveKey + "\r\n", 200}} {
		resp := rawRoundTrip(t, addr, "POST /v1/evaluate HTTP/1.1\r\nHost: x\r\nUser-Agent: a\r\n"+c.auth+
			"Content-Type: multipart/form-data; boundary=XX\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
		if resp.status != c.want {
			t.Errorf("auth %q, multipart Content-Type: %d %s; want %d", c.auth, resp.status, resp.body, c.want)
		}
	}
}

// TestAllowListsHEAD: a 405's Allow names HEAD beside GET: every GET route
// answers HEAD (RFC 9110 §10.2.1).
func TestAllowListsHEAD(t *testing.T) {
	e := newTestEnv(t)
	for _, p := range []string{"/api/status", "/v1/usage", "/v1/lookup/8.8.8.8", "/v1/evaluate/sample"} {
		ctx := e.do("PUT", p, "", nil)
		if allow := string(ctx.Response.Header.Peek("Allow")); ctx.Response.StatusCode() != 405 || allow != "GET, HEAD" {
			t.Errorf("PUT %s: %d Allow %q; want 405 with GET, HEAD", p, ctx.Response.StatusCode(), allow)
		}
	}
}

// TestChargedRefusalsShowTheAllowance: an evaluate or lookup answered 400
// used the hourly allowance (SPEC 8), so it carries the X-RateLimit-*
// figures, as OpenAPI's BadRequest says.
func TestChargedRefusalsShowTheAllowance(t *testing.T) {
	e := newTestEnv(t)
	for _, c := range []struct{ method, uri, body string }{
		{"POST", "/v1/evaluate", `{"token":"not-a-real-token"}`},
		{"POST", "/v1/evaluate", `{"token":12}`},
		{"GET", "/v1/lookup/10.0.0.1", ""},
	} {
		var body []byte
		if c.body != "" {
			body = []byte(c.body)
		}
		ctx := e.do(c.method, c.uri, "Bearer "+e.acct.LiveKey, body)
		if ctx.Response.StatusCode() != 400 {
			t.Fatalf("%s %s %s: %d %s", c.method, c.uri, c.body, ctx.Response.StatusCode(), ctx.Response.Body())
		}
		for _, h := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
			if len(ctx.Response.Header.Peek(h)) == 0 {
				t.Errorf("%s %s %s: 400 without %s", c.method, c.uri, c.body, h)
			}
		}
	}
}

// serveOnLoopback serves e's public listener on an in-memory listener and
// returns it for rawRoundTrip.
func serveOnLoopback(t *testing.T, e *testEnv) *fasthttputil.InmemoryListener {
	t.Helper()
	ln := fasthttputil.NewInmemoryListener()
	go e.srv.Serve(ln)
	t.Cleanup(func() { ln.Close() })
	return ln
}

type rawAnswer struct {
	status int
	body   string
}

// rawRoundTrip writes req as it is and reads one answer.
func rawRoundTrip(t *testing.T, ln *fasthttputil.InmemoryListener, req string) rawAnswer {
	t.Helper()
	c, err := ln.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	var resp fasthttp.Response
	if err := resp.Read(bufio.NewReader(c)); err != nil {
		t.Fatal(err)
	}
	return rawAnswer{status: resp.StatusCode(), body: string(resp.Body())}
}

// TestBodyAfterABOM: a UTF-8 byte order mark before a body is passed over
// (RFC 8259 §8.1), not read as a body that is not a JSON object.
func TestBodyAfterABOM(t *testing.T) {
	e := newTestEnv(t)
	ctx := e.serve(testRequest{method: "POST", uri: "/v1/evaluate", body: []byte("\xef\xbb\xbf" + `{"token":"test_tor"}`), header: [][2]string{
		{"Authorization", "Bearer " + e.acct.LiveKey}, {"Content-Type", "application/json"},
	}})
	if st := ctx.Response.StatusCode(); st != 200 || !strings.Contains(string(ctx.Response.Body()), `"decision":"block"`) {
		t.Fatalf("a JSON body after a BOM: %d %s", st, ctx.Response.Body())
	}
}
