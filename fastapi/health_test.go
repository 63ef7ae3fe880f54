package fastapi

import (
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/intel/netlists"
)

type fakeShards struct{ down []string }

func (f *fakeShards) Down() []string { return f.down }

func TestHealthzAndReadyz(t *testing.T) {
	e := newTestEnv(t)
	shards := &fakeShards{}
	e.srv.deps.Shards = shards
	probe := func(path string) *fasthttp.RequestCtx {
		ctx := new(fasthttp.RequestCtx)
		ctx.Request.Header.SetMethod("GET")
		ctx.Request.SetRequestURI(path)
		// No User-Agent: probes pass the edge block.
		e.srv.Handle(ctx)
		return ctx
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if ctx := probe(p); ctx.Response.StatusCode() != 200 {
			t.Fatalf("%s: %d %s", p, ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
	if ctx := probe("/api/status"); ctx.Response.StatusCode() != edgeBlockStatus {
		t.Fatalf("edge block no longer applies elsewhere: %d", ctx.Response.StatusCode())
	}

	e.store.down = true
	shards.down = []string{"quota shard 1 stopped"}
	ctx := probe("/readyz")
	if ctx.Response.StatusCode() != 503 {
		t.Fatalf("readyz with storage and a shard down: %d", ctx.Response.StatusCode())
	}
	body := string(ctx.Response.Body())
	if !strings.Contains(body, `"code":"not_ready"`) || !strings.Contains(body, "storage unavailable; quota shard 1 stopped") {
		t.Fatalf("readyz body: %s", body)
	}
	// Liveness does not follow readiness: the process still serves.
	if ctx := probe("/healthz"); ctx.Response.StatusCode() != 200 {
		t.Fatalf("healthz while not ready: %d", ctx.Response.StatusCode())
	}

	e.store.down, shards.down = false, nil
	e.srv.deps.Feeds = netlists.NewStore(nil)
	if ctx := probe("/readyz"); ctx.Response.StatusCode() != 503 || !strings.Contains(string(ctx.Response.Body()), "feeds not loaded") {
		t.Fatalf("readyz without feeds: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
}

func TestReadyzAllocations(t *testing.T) {
	e := newTestEnv(t)
	e.srv.deps.Shards = &fakeShards{}
	ctx := new(fasthttp.RequestCtx)
	ctx.Request.Header.SetMethod("GET")
	ctx.Request.SetRequestURI("/readyz")
	ctx.Request.Header.Set("User-Agent", "probe/1")
	n := testing.AllocsPerRun(100, func() {
		ctx.Response.Reset()
		e.srv.Handle(ctx)
	})
	if n > 0 {
		t.Fatalf("readyz allocates %.1f times per probe", n)
	}
}
