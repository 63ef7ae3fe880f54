package fastapi

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// TestHandlerPanicKeepsItsRequestID: a handler that panics is answered 500
// with the X-Request-Id the request was given, and the ERROR line naming the
// panic and the access line both carry that id, so that the id a client
// quotes leads the operator to the cause.
func TestHandlerPanicKeepsItsRequestID(t *testing.T) {
	e := newTestEnv(t)
	var logs, access bytes.Buffer
	e.srv.log = slog.New(slog.NewTextHandler(&logs, nil))
	e.srv.cfg.AccessLog = slog.New(slog.NewTextHandler(&access, nil))
	var given string
	for _, rt := range e.srv.routes {
		if rt.pattern == "/healthz" {
			rt.handler = func(ctx *fasthttp.RequestCtx, _ *request) {
				given = string(ctx.Response.Header.Peek(headerRequestID))
				panic("boom")
			}
		}
	}
	ctx := e.serveHTTP("GET", "/healthz", nil)
	id := string(ctx.Response.Header.Peek(headerRequestID))
	if ctx.Response.StatusCode() != 500 || !strings.HasPrefix(id, "req_") {
		t.Fatalf("panic answered %d, request id %q", ctx.Response.StatusCode(), id)
	}
	if id != given {
		t.Fatalf("the answer's request id %s is not the one the handler ran under, %s", id, given)
	}
	if l := logs.String(); !strings.Contains(l, `msg="handler panic"`) || !strings.Contains(l, "panic=boom") || !strings.Contains(l, "request_id="+id) {
		t.Fatalf("panic line lacks the cause or request_id=%s:\n%s", id, l)
	}
	if a := access.String(); !strings.Contains(a, "status=500") || !strings.Contains(a, "request_id="+id) {
		t.Fatalf("access line lacks request_id=%s:\n%s", id, a)
	}
}
