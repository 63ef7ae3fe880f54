package fastapi

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/actors/quota"
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

// TestRequestFailureLinesCarryTheRequestID: the WARN or ERROR line a request
// writes when a part behind it fails (here the admin usage view, its quota
// shard failing) carries the request's id, as the access line and the
// answer's X-Request-Id do, so that the operator finds the cause of the 503
// a client quotes.
func TestRequestFailureLinesCarryTheRequestID(t *testing.T) {
	e := newTestEnv(t)
	var logs bytes.Buffer
	e.srv.log = slog.New(slog.NewTextHandler(&logs, nil))
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	q := quota.New(sys.Root, quota.Config{Shards: 1, Store: panicStore{}, Timeout: time.Second, Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { q.Stop() })
	e.srv.deps.Quota = q
	e.srv.checks = pipeline(&e.srv.deps, e.srv.log)
	ctx := e.do("GET", "/admin/v1/accounts/"+e.acct.View.ID+"/usage", "Bearer adm", nil)
	id := string(ctx.Response.Header.Peek(headerRequestID))
	if ctx.Response.StatusCode() != 503 {
		t.Fatalf("usage view with a failing quota shard: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	if l := logs.String(); !strings.Contains(l, `msg="quota usage failed"`) || !strings.Contains(l, "request_id="+id) {
		t.Fatalf("the failure line lacks request_id=%s:\n%s", id, l)
	}
}
