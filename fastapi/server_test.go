package fastapi

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/valyala/fasthttp"
	"golang.org/x/time/rate"

	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/actors/iplimit"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/intel/netlists"
	"github.com/fraudd/fraudd/internal/clock"
	"github.com/fraudd/fraudd/internal/secrets"
	"github.com/fraudd/fraudd/storage"
)

// fixedNow is the clock of every unit test and golden file.
var fixedNow = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

type fakeStore struct{ down bool }

func (f *fakeStore) Available() bool { return !f.down }

type testEnv struct {
	srv   *Server
	store *fakeStore
	accts *accounts.Service
	acct  *accounts.Created
}

func newTestEnv(t testing.TB) *testEnv {
	t.Helper()
	db, err := storage.Open("d", storage.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	sys := actor.NewActorSystem()
	clk := clock.Fixed{T: fixedNow}
	accts, err := accounts.Start(sys.Root, accounts.Config{DB: db, Master: secrets.FromBytes([]byte("unit")), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { accts.Stop(); sys.Shutdown(); db.Close() })
	c, err := accts.Create(accounts.NewAccount{Email: "unit@example.com", Plan: "starter"})
	if err != nil {
		t.Fatal(err)
	}
	st := &fakeStore{}
	limits := iplimit.New(sys.Root, iplimit.Config{Shards: 2})
	q := quota.New(sys.Root, quota.Config{Shards: 2})
	t.Cleanup(func() { limits.Stop(); q.Stop() })
	srv := New(Config{AdminToken: "adm", EdgeBlock: true, EdgeBlockAgents: DefaultEdgeBlockAgents, Version: "test", StartedAt: fixedNow},
		Deps{Accounts: accts, Store: st, Clock: clk, Limits: limits, Quota: q, Feeds: testFeeds(t)})
	return &testEnv{srv: srv, store: st, accts: accts, acct: c}
}

// do runs one request through the handler without a network.
func (e *testEnv) do(method, uri, auth string, body []byte) *fasthttp.RequestCtx {
	tr := testRequest{method: method, uri: uri, body: body}
	if auth != "" {
		tr.header = append(tr.header, [2]string{"Authorization", auth})
	}
	return e.serve(tr)
}

func TestStorageUnavailableAnswers503(t *testing.T) {
	e := newTestEnv(t)
	e.store.down = true
	ctx := e.do("GET", "/v1/usage", "Bearer "+e.acct.LiveKey, nil)
	if ctx.Response.StatusCode() != 503 || string(ctx.Response.Header.Peek("Retry-After")) != "30" {
		t.Fatalf("got %d Retry-After=%q %s", ctx.Response.StatusCode(), ctx.Response.Header.Peek("Retry-After"), ctx.Response.Body())
	}
	golden(t, "error_storage_unavailable", ctx.Response.Body())
	// Unauthenticated endpoints keep answering; status reports the degradation.
	ctx = e.do("GET", "/api/status", "", nil)
	if ctx.Response.StatusCode() != 200 {
		t.Fatalf("status while store down: %d", ctx.Response.StatusCode())
	}
	golden(t, "status_storage_down", ctx.Response.Body())
}

func TestErrorShapes(t *testing.T) {
	e := newTestEnv(t)
	for _, c := range []struct {
		name, method, uri, auth string
		status                  int
	}{
		{"error_missing_key", "GET", "/v1/usage", "", 401},
		{"error_empty_bearer", "GET", "/v1/usage", "Bearer", 401},
		{"error_invalid_key_undefined", "GET", "/v1/usage", "Bearer undefined", 401},
		{"error_not_found", "GET", "/nope", "", 404},
		{"error_method", "PUT", "/api/status", "", 405},
		{"error_admin_auth", "GET", "/admin/v1/mail", "Bearer wrong", 401},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := e.do(c.method, c.uri, c.auth, nil)
			if ctx.Response.StatusCode() != c.status {
				t.Fatalf("status %d, want %d: %s", ctx.Response.StatusCode(), c.status, ctx.Response.Body())
			}
			if len(ctx.Response.Header.Peek("X-Request-Id")) == 0 {
				t.Fatal("no X-Request-Id")
			}
			golden(t, c.name, ctx.Response.Body())
		})
	}
}

func TestLockoutAfterTwentyFailures(t *testing.T) {
	e := newTestEnv(t)
	for i := 0; i < 20; i++ {
		if ctx := e.do("GET", "/v1/usage", "Bearer sk_live_bad", nil); ctx.Response.StatusCode() != 401 {
			t.Fatalf("failure %d: %d", i, ctx.Response.StatusCode())
		}
	}
	ctx := e.do("GET", "/v1/usage", "Bearer "+e.acct.LiveKey, nil)
	if ctx.Response.StatusCode() != 429 || string(ctx.Response.Header.Peek("Retry-After")) != "900" {
		t.Fatalf("after 20 failures: %d %q", ctx.Response.StatusCode(), ctx.Response.Header.Peek("Retry-After"))
	}
	golden(t, "error_lockout", ctx.Response.Body())
	// The lockout holds on every /v1/* route (CLARIFICATIONS, Auth: "lock
	// that caller out for 15 minutes (429, Retry-After: 900) on /v1/*"),
	// those that take no key included.
	for _, tc := range []struct{ method, path string }{{"GET", "/v1/evaluate/sample"}, {"POST", "/v1/collect/network"}, {"POST", "/v1/collect/device"}} {
		ctx := e.do(tc.method, tc.path, "", []byte(`{}`))
		if ctx.Response.StatusCode() != 429 || string(ctx.Response.Header.Peek("Retry-After")) != "900" {
			t.Errorf("%s %s after 20 failures: %d %q", tc.method, tc.path, ctx.Response.StatusCode(), ctx.Response.Header.Peek("Retry-After"))
		}
	}
}

func TestRouteMatching(t *testing.T) {
	e := newTestEnv(t)
	r := &request{}
	rt, _ := e.srv.match([]byte("GET"), []byte("/admin/v1/accounts/acc_1/rules"), r)
	if rt == nil || rt.pattern != "/admin/v1/accounts/{id}/rules" || r.param(0) != "acc_1" {
		t.Fatalf("match: %+v %q", rt, r.param(0))
	}
	if rt, allow := e.srv.match([]byte("DELETE"), []byte("/admin/v1/accounts/acc_1/rules"), r); rt != nil || allow != "GET, HEAD, PUT" {
		t.Fatalf("405 allow: %q", allow)
	}
	if rt, allow := e.srv.match([]byte("GET"), []byte("/admin/v1/accounts//rules"), r); rt != nil || allow != "" {
		t.Fatal("empty parameter matched")
	}
}

var (
	feedsOnce sync.Once
	feedsSnap *netlists.Snapshot
	feedsErr  error
)

// testFeeds loads the embedded feeds once for the whole package.
func testFeeds(t testing.TB) *netlists.Store {
	t.Helper()
	feedsOnce.Do(func() { feedsSnap, feedsErr = netlists.LoadEmbedded() })
	if feedsErr != nil {
		t.Fatal(feedsErr)
	}
	return netlists.NewStore(feedsSnap)
}

func accountsPatchPlan(p string) accounts.Patch { return accounts.Patch{Plan: &p} }

func TestHandlerPanicIsA500(t *testing.T) {
	e := newTestEnv(t)
	e.srv.routes = append(e.srv.routes, &route{method: "GET", pattern: "/boom", segs: []string{"boom"}, nsegs: 1,
		handler: func(*fasthttp.RequestCtx, *request) { panic("boom") }})
	e.srv.index()
	ctx := e.do("GET", "/boom", "", nil)
	if ctx.Response.StatusCode() != 500 || string(ctx.Response.Body()) != `{"error":"Server error."}` || len(ctx.Response.Header.Peek("X-Request-Id")) == 0 {
		t.Fatalf("panic: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	// The sandbox key is refused outside POST /v1/evaluate.
	if ctx := e.do("GET", "/v1/usage", "Bearer "+SandboxKey, nil); ctx.Response.StatusCode() != 401 {
		t.Fatalf("sandbox on usage: %d", ctx.Response.StatusCode())
	}
}

// TestFasthttpLoggerRedactsAndLimits: connection errors quote request bytes;
// none reach the log, and a flood logs a burst and then counts what it drops.
func TestFasthttpLoggerRedactsAndLimits(t *testing.T) {
	var buf bytes.Buffer
	f := newFasthttpLogger(slog.New(slog.NewTextHandler(&buf, nil)))
	f.lim.SetLimit(0) // no refill while the test runs: the count is exact
	local, remote := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}, &net.TCPAddr{IP: net.IPv4(203, 0, 113, 9), Port: 4000}
	for i := 0; i < 100; i++ {
		f.Printf("error when serving connection %q<->%q: %v", local, remote,
			errors.New(`error when reading request headers: missing colon: "Authorization Bearer sk_live_SECRET\"x": buffer size=9, contents: "Authorization: Bearer sk_live_SECRET"`))
	}
	f.Printf("some %s of fasthttp: %q", "other line", "adm_SECRET")
	out := buf.String()
	if strings.Contains(out, "SECRET") {
		t.Fatalf("secret in the log:\n%s", out)
	}
	if n := strings.Count(out, "\n"); n != fasthttpLogBurst {
		t.Fatalf("%d lines for a flood, want the burst of %d:\n%s", n, fasthttpLogBurst, out)
	}
	if !strings.Contains(out, "remote=203.0.113.9:4000") {
		t.Fatalf("the remote address is kept:\n%s", out)
	}
	f.lim.SetLimitAt(time.Now(), rate.Inf)
	buf.Reset()
	f.Printf("Permanent error when accepting new connections: %v", errors.New("too many open files"))
	if out := buf.String(); !strings.Contains(out, "suppressed=91") || !strings.Contains(out, "too many open files") {
		t.Fatalf("the next line counts what was dropped:\n%s", out)
	}
}

// TestPinsStoredCanonicalStillRead: pins stored before they were kept as
// sent (canonical prefixes such as 8.8.4.4/32) still read back and match.
func TestPinsStoredCanonicalStillRead(t *testing.T) {
	e := newTestEnv(t)
	id := e.acct.View.ID
	if _, err := e.accts.SetPins(id, []accounts.Pin{{IP: "8.8.4.4/32", Action: "block"}, {IP: "2606:4700::/32", Action: "review"}}); err != nil {
		t.Fatal(err)
	}
	ctx := e.do("GET", "/admin/v1/accounts/"+id+"/exceptions", "Bearer adm", nil)
	if b := string(ctx.Response.Body()); ctx.Response.StatusCode() != 200 || !strings.Contains(b, `"ip":"8.8.4.4/32"`) || !strings.Contains(b, `"ip":"2606:4700::/32"`) {
		t.Fatalf("old pins: %d %s", ctx.Response.StatusCode(), b)
	}
	ctx = e.do("GET", "/v1/lookup/8.8.4.4", "Bearer "+e.acct.LiveKey, nil)
	if b := string(ctx.Response.Body()); !strings.Contains(b, `"verdict":"block"`) || !strings.Contains(b, `"verdict_source":"exception"`) {
		t.Fatalf("old pin does not match: %s", b)
	}
}

// TestRouteIndexMatchesTheScan checks that the index of exact paths answers
// every request as the scan over all routes does: same route, same
// parameters, same Allow list.
func TestRouteIndexMatchesTheScan(t *testing.T) {
	e := newTestEnv(t)
	set := &e.srv.all
	scan := &routeSet{list: set.list}
	var paths []string
	for _, rt := range set.list {
		p := strings.NewReplacer("{id}", "acct_1", "{key}", "k1").Replace(rt.pattern)
		p = regexp.MustCompile(`\{[^}]*\}`).ReplaceAllString(p, "x")
		paths = append(paths, p, p+"/", "/"+strings.Trim(p, "/")+"/extra")
	}
	paths = append(paths, "/", "", "/nope", "/v1", "/v1/evaluate/", "//v1/evaluate",
		"/v1/lookup/8.8.8.8", "/v1/lookup/10.0.0.0/8", "/v1/lookup/", "/v1//lookup/1.1.1.1", "/v1/nope/x",
		"/admin/v1/accounts/acct_1/keys/live/rotate/x")
	if len(set.exact) < 10 {
		t.Fatalf("only %d exact paths indexed", len(set.exact))
	}
	if rs := set.heads["v1/lookup"]; len(rs) == 0 || len(rs) > 3 {
		t.Fatalf("v1/lookup heads %d routes, want the lookup's", len(rs))
	}
	sameMatch(t, set, scan, paths)

	// A table where a parameterised route also fits a static one's path,
	// before and after it in the order.
	var list []*route
	for _, rt := range []struct{ m, p string }{{"GET", "/a/{id}"}, {"POST", "/a/b"}, {"DELETE", "/a/{id}"}, {"GET", "/a/b"}, {"PUT", "/{x}/b"},
		{"GET", "/a/b/{id}"}, {"POST", "/a/{r...}"}, {"GET", "/{x}/b/c"}, {"PUT", "/a/b/c"}, {"GET", "/c"}} {
		segs := strings.Split(strings.Trim(rt.p, "/"), "/")
		list = append(list, &route{method: rt.m, pattern: rt.p, segs: segs, nsegs: len(segs), rest: isRestSeg(segs[len(segs)-1])})
	}
	synth := newRouteSet(list)
	if got := len(synth.exact["a/b"]); got != 6 {
		t.Fatalf("a/b indexes %d routes, want 6", got)
	}
	if got := len(synth.heads["a/b"]); got != 4 {
		t.Fatalf("a/b/… heads %d routes, want 4", got)
	}
	sameMatch(t, &synth, &routeSet{list: list}, []string{"/a/b", "/a/c", "/c/b", "/a/b/", "/a/b/c", "/a/b/d", "/a/b/c/d",
		"/a/c/d", "/c/b/c", "/a", "/c", "/c/d/e"})
}

func sameMatch(t *testing.T, set, scan *routeSet, paths []string) {
	t.Helper()
	for _, p := range paths {
		for _, m := range []string{"GET", "HEAD", "POST", "PATCH", "PUT", "DELETE"} {
			var ra, rb request
			a, allowA := matchIn(set, []byte(m), []byte(p), &ra)
			b, allowB := matchIn(scan, []byte(m), []byte(p), &rb)
			if a != b || allowA != allowB || ra.nparams != rb.nparams || ra.params != rb.params {
				t.Errorf("%s %s: index %v %q %v, scan %v %q %v", m, p, a, allowA, ra.params, b, allowB, rb.params)
			}
		}
	}
}

// BenchmarkMatch is the router's share of a POST /v1/evaluate and of a
// GET /v1/lookup/{ip}: through the indexes, and through the scan over every
// route they replaced.
func BenchmarkMatch(b *testing.B) {
	e := newTestEnv(&testing.T{})
	for _, req := range []struct{ name, method, path string }{{"evaluate", "POST", "/v1/evaluate"}, {"lookup", "GET", "/v1/lookup/8.8.8.8"}} {
		for _, c := range []struct {
			name string
			set  *routeSet
		}{{"index", &e.srv.all}, {"scan", &routeSet{list: e.srv.all.list}}} {
			b.Run(req.name+"/"+c.name, func(b *testing.B) {
				var r request
				method, path := []byte(req.method), []byte(req.path)
				for b.Loop() {
					if rt, _ := matchIn(c.set, method, path, &r); rt == nil {
						b.Fatal("no route")
					}
				}
			})
		}
	}
}
