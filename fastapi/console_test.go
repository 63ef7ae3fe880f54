package fastapi

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/actors/iplimit"
	"github.com/fraudd/fraudd/actors/mailer"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/actors/recent"
	"github.com/fraudd/fraudd/fastapi/console"
	"github.com/fraudd/fraudd/intel/score"
	"github.com/fraudd/fraudd/internal/clock"
	"github.com/fraudd/fraudd/internal/secrets"
	"github.com/fraudd/fraudd/storage"
	"github.com/fraudd/fraudd/wire"
)

// consoleEnv is a server with a real store behind quota, the recent
// evaluations and the daily counts.
type consoleEnv struct {
	*testEnv
	recent *recent.Client
	quota  *quota.Client
}

// newConsoleEnv builds the server; the recent list flushes when listed, or
// every flush when given.
func newConsoleEnv(t *testing.T, separate bool, flush ...time.Duration) *consoleEnv {
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
	c, err := accts.Create(accounts.NewAccount{Email: "unit@example.com", Plan: "starter"})
	if err != nil {
		t.Fatal(err)
	}
	limits := iplimit.New(sys.Root, iplimit.Config{Shards: 2})
	q := quota.New(sys.Root, quota.Config{Shards: 2, Store: db})
	every := time.Hour
	if len(flush) > 0 {
		every = flush[0]
	}
	rec, err := recent.New(sys.Root, recent.Config{Store: db, FlushEvery: every})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		rec.Stop()
		limits.Stop()
		q.Stop()
		accts.Stop()
		sys.Shutdown()
		db.Close()
	})
	st := &fakeStore{}
	srv := New(Config{AdminToken: "adm", EdgeBlock: true, EdgeBlockAgents: DefaultEdgeBlockAgents, Version: "test", StartedAt: fixedNow, AdminSeparate: separate},
		Deps{Accounts: accts, Store: st, Clock: clk, Limits: limits, Quota: q, Feeds: testFeeds(t), Recent: rec})
	return &consoleEnv{testEnv: &testEnv{srv: srv, store: st, accts: accts, acct: c}, recent: rec, quota: q}
}

// doAdmin runs one request through the admin listener's handler.
func (e *consoleEnv) doAdmin(method, uri, auth string) *fasthttp.RequestCtx {
	ctx := new(fasthttp.RequestCtx)
	ctx.Request.Header.SetMethod(method)
	ctx.Request.SetRequestURI(uri)
	ctx.Request.Header.Set("User-Agent", "unit-test/1")
	if auth != "" {
		ctx.Request.Header.Set("Authorization", auth)
	}
	e.srv.HandleAdmin(ctx)
	return ctx
}

func TestConsoleAssetsServedWithStrictHeaders(t *testing.T) {
	e := newConsoleEnv(t, false)
	for _, c := range []struct{ path, ctype, needle string }{
		{"/console", "text/html; charset=utf-8", `<script src="/console/console.js" defer></script>`},
		{"/console/", "text/html; charset=utf-8", "<dialog"},
		{"/console/console.js", "application/javascript; charset=utf-8", "sessionStorage"},
		{"/console/console.css", "text/css; charset=utf-8", "font"},
	} {
		ctx := e.do("GET", c.path, "", nil)
		h := &ctx.Response.Header
		if ctx.Response.StatusCode() != 200 || string(h.ContentType()) != c.ctype || !strings.Contains(string(ctx.Response.Body()), c.needle) {
			t.Fatalf("%s: %d %s", c.path, ctx.Response.StatusCode(), h.ContentType())
		}
		for k, want := range map[string]string{
			"Content-Security-Policy": console.CSP, "X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff",
			"Referrer-Policy": "no-referrer", "Cache-Control": "no-cache",
		} {
			if got := string(h.Peek(k)); got != want {
				t.Errorf("%s: %s = %q, want %q", c.path, k, got, want)
			}
		}
		etag := string(h.Peek("ETag"))
		ctx = new(fasthttp.RequestCtx)
		ctx.Request.Header.SetMethod("GET")
		ctx.Request.SetRequestURI(c.path)
		ctx.Request.Header.Set("User-Agent", "unit-test/1")
		ctx.Request.Header.Set("If-None-Match", etag)
		e.srv.Handle(ctx)
		if ctx.Response.StatusCode() != 304 {
			t.Errorf("%s with its ETag: %d", c.path, ctx.Response.StatusCode())
		}
	}
	for _, p := range []string{"/console/index.html", "/console/../admin", "/console/a/b"} {
		if ctx := e.do("GET", p, "", nil); ctx.Response.StatusCode() != 404 {
			t.Errorf("%s: %d", p, ctx.Response.StatusCode())
		}
	}
	// The policy itself: nothing inline, nothing from elsewhere, no framing.
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'", "connect-src 'self'"} {
		if !strings.Contains(console.CSP, want) {
			t.Errorf("CSP lacks %s", want)
		}
	}
	if strings.Contains(console.CSP, "unsafe") {
		t.Error("CSP allows unsafe-*")
	}
}

// TestAdminListenerSeparate: with --admin-addr the public listener has no
// admin API and no console, the admin listener nothing but those and the
// read-only status pages the console shows.
func TestAdminListenerSeparate(t *testing.T) {
	e := newConsoleEnv(t, true)
	for _, c := range []struct {
		method, path  string
		public, admin int
	}{
		{"GET", "/admin/v1/mail", 404, 200},
		{"GET", "/admin/v1/accounts", 404, 200},
		{"POST", "/admin/v1/accounts", 404, 400},
		{"GET", "/console", 404, 200},
		{"GET", "/console/console.js", 404, 200},
		{"GET", "/api/status", 200, 200},
		{"GET", "/api/threat-feed", 200, 200},
		{"GET", "/v1/usage", 200, 404},
		{"POST", "/v1/evaluate", 200, 404},
		{"GET", "/collector.js", 200, 404},
	} {
		pub := e.do(c.method, c.path, "Bearer "+e.acct.LiveKey, nil)
		if c.path == "/admin/v1/mail" || strings.HasPrefix(c.path, "/admin/v1/accounts") {
			pub = e.do(c.method, c.path, "Bearer adm", nil)
		}
		if pub.Response.StatusCode() != c.public {
			t.Errorf("public %s %s: %d, want %d", c.method, c.path, pub.Response.StatusCode(), c.public)
		}
		if adm := e.doAdmin(c.method, c.path, "Bearer adm"); adm.Response.StatusCode() != c.admin {
			t.Errorf("admin %s %s: %d, want %d %s", c.method, c.path, adm.Response.StatusCode(), c.admin, adm.Response.Body())
		}
	}
	// Without the split one listener serves both.
	one := newConsoleEnv(t, false)
	if ctx := one.do("GET", "/admin/v1/mail", "Bearer adm", nil); ctx.Response.StatusCode() != 200 {
		t.Fatalf("admin on the single listener: %d", ctx.Response.StatusCode())
	}
	if err := one.srv.ServeAdmin(nil); err == nil {
		t.Fatal("ServeAdmin without AdminSeparate")
	}
}

func decodeJSON[T any](t *testing.T, ctx *fasthttp.RequestCtx) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(ctx.Response.Body(), &v); err != nil {
		t.Fatalf("%v: %s", err, ctx.Response.Body())
	}
	return v
}

func TestAdminListAccounts(t *testing.T) {
	e := newConsoleEnv(t, false)
	for _, m := range []string{"shop@example.org", "Billing@Example.com", "ops@other.net"} {
		if _, err := e.accts.Create(accounts.NewAccount{Email: m, Plan: "free"}); err != nil {
			t.Fatal(err)
		}
	}
	type acct struct {
		ID, Email string
		LiveKey   *struct{ Prefix string } `json:"live_key"`
	}
	emails := func(as []acct) string {
		var out []string
		for _, a := range as {
			out = append(out, a.Email)
		}
		return strings.Join(out, " ")
	}
	ctx := e.do("GET", "/admin/v1/accounts", "Bearer adm", nil)
	all := decodeJSON[[]acct](t, ctx)
	if len(all) != 4 || string(ctx.Response.Header.Peek("X-Total-Count")) != "4" || all[0].LiveKey == nil || all[0].LiveKey.Prefix == "" {
		t.Fatalf("all: %s", ctx.Response.Body())
	}
	if strings.Contains(string(ctx.Response.Body()), "sk_live_") && !strings.Contains(string(ctx.Response.Body()), `"prefix"`) {
		t.Fatal("a secret in the list")
	}
	for _, c := range []struct {
		q    string
		want string
	}{
		{"example.", "Billing@Example.com shop@example.org unit@example.com"},
		{"BILLING", "Billing@Example.com"},
		{"acc_", "Billing@Example.com ops@other.net shop@example.org unit@example.com"},
		{"nobody", ""},
	} {
		got := strings.Fields(emails(decodeJSON[[]acct](t, e.do("GET", "/admin/v1/accounts?q="+c.q, "Bearer adm", nil))))
		// All were created in the same (fixed) second: compare as sets.
		slices.Sort(got)
		if strings.Join(got, " ") != c.want {
			t.Errorf("q=%s: %v, want %s", c.q, got, c.want)
		}
	}
	byID := decodeJSON[[]acct](t, e.do("GET", "/admin/v1/accounts?q="+e.acct.View.ID, "Bearer adm", nil))
	if len(byID) != 1 || byID[0].ID != e.acct.View.ID {
		t.Fatalf("by id: %v", byID)
	}
	if got := decodeJSON[[]acct](t, e.do("GET", "/admin/v1/accounts?limit=2", "Bearer adm", nil)); len(got) != 2 {
		t.Fatalf("limit: %d", len(got))
	}
	for _, bad := range []string{"0", "201", "x", "-1"} {
		ctx := e.do("GET", "/admin/v1/accounts?limit="+bad, "Bearer adm", nil)
		if ctx.Response.StatusCode() != 400 || !strings.Contains(string(ctx.Response.Body()), "limit must be an integer from 1 to 200") {
			t.Errorf("limit=%s: %d %s", bad, ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
	if ctx := e.do("GET", "/admin/v1/accounts", "Bearer nope", nil); ctx.Response.StatusCode() != 401 {
		t.Fatalf("no token: %d", ctx.Response.StatusCode())
	}
}

func TestAdminEvaluations(t *testing.T) {
	e := newConsoleEnv(t, false)
	pin, err := score.ParsePin("89.187.178.24", "", "allow", "office")
	if err != nil {
		t.Fatal(err)
	}
	entries := []recent.Entry{
		{At: fixedNow.Add(-8 * 24 * time.Hour), Decision: score.Block, Engine: score.Block}, // past 7 days
		{At: fixedNow.Add(-time.Hour), IP: netip.MustParseAddr("89.187.178.24"), Decision: score.Review, Engine: score.Block,
			Source: score.SourceRules, Rule: score.SignalVPN, RuleMatched: 1 << score.SignalVPN, Risk: 85,
			Reasons: 1<<score.ReasonVPNDetected | 1<<score.ReasonDatacenterASN | 1<<score.ReasonAnonymousNetwork},
		{At: fixedNow.Add(-time.Minute), IP: netip.MustParseAddr("89.187.178.24"), Decision: score.Allow, Engine: score.Block,
			Source: score.SourceException, Pin: pin, Risk: 85, Test: true, Reasons: 1 << score.ReasonVPNDetected},
		{At: fixedNow, Decision: score.Allow, Engine: score.Allow},
	}
	for i := range entries {
		en := &entries[i]
		en.Account = e.acct.View.ID
		en.SetRequestID(fmt.Appendf(nil, "req_test%04d", i))
		if en.IP.IsValid() {
			en.SetCountry("NL")
		}
		e.recent.Record(*en)
	}
	e.recent.Record(recent.Entry{Account: "acc_other", At: fixedNow, Decision: score.Block})
	ctx := e.do("GET", "/admin/v1/accounts/"+e.acct.View.ID+"/evaluations", "Bearer adm", nil)
	if ctx.Response.StatusCode() != 200 {
		t.Fatalf("%d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	golden(t, "admin_evaluations", ctx.Response.Body())
	if got := decodeJSON[[]map[string]any](t, e.do("GET", "/admin/v1/accounts/"+e.acct.View.ID+"/evaluations?limit=1", "Bearer adm", nil)); len(got) != 1 || got[0]["request_id"] != "req_test0003" {
		t.Fatalf("limit=1: %v", got)
	}
	for _, c := range []struct {
		uri    string
		status int
	}{
		{"/admin/v1/accounts/" + e.acct.View.ID + "/evaluations?limit=201", 400},
		{"/admin/v1/accounts/" + e.acct.View.ID + "/evaluations?limit=0", 400},
		{"/admin/v1/accounts/acc_nope/evaluations", 404},
	} {
		if ctx := e.do("GET", c.uri, "Bearer adm", nil); ctx.Response.StatusCode() != c.status {
			t.Errorf("%s: %d", c.uri, ctx.Response.StatusCode())
		}
	}
}

func TestAdminUsage(t *testing.T) {
	e := newConsoleEnv(t, false)
	v := e.accts.Get(e.acct.View.ID)
	l := quota.LimitsFor(v.Plan, v.HourlyLimit, v.MonthlyLimit, v.CreatedAt, fixedNow)
	charge := func(at time.Time, b quota.Bucket, kind quota.Kind) {
		t.Helper()
		if r, err := e.quota.Charge(quota.Charge{Account: v.ID, Bucket: b, Kind: kind, Limits: l, Hourly: true, Monthly: true, Total: b == quota.Live, Now: at}); err != nil || !r.Allowed {
			t.Fatalf("charge: %+v %v", r, err)
		}
	}
	charge(fixedNow.Add(-48*time.Hour), quota.Live, quota.Evaluate)
	charge(fixedNow, quota.Live, quota.Evaluate)
	charge(fixedNow, quota.Live, quota.Lookup)
	charge(fixedNow, quota.Test, quota.Evaluate)
	ctx := e.do("GET", "/admin/v1/accounts/"+e.acct.View.ID+"/usage", "Bearer adm", nil)
	if ctx.Response.StatusCode() != 200 {
		t.Fatalf("%d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	golden(t, "admin_usage", ctx.Response.Body())
	if ctx := e.do("GET", "/admin/v1/accounts/acc_nope/usage", "Bearer adm", nil); ctx.Response.StatusCode() != 404 {
		t.Fatalf("unknown account: %d", ctx.Response.StatusCode())
	}
}

func TestAdminFeeds(t *testing.T) {
	e := newConsoleEnv(t, false)
	got := decodeJSON[[]struct {
		Name    string
		Date    *string
		AgeDays *int `json:"age_days"`
		Entries int
		Source  string
	}](t, e.do("GET", "/admin/v1/feeds", "Bearer adm", nil))
	if len(got) < 5 {
		t.Fatalf("%d feeds", len(got))
	}
	dated := 0
	for _, f := range got {
		if f.Name == "" || f.Source == "" {
			t.Fatalf("feed without name or source: %+v", f)
		}
		if f.Date != nil {
			dated++
			d, err := time.Parse(time.DateOnly, *f.Date)
			if err != nil || f.AgeDays == nil || *f.AgeDays != int(fixedNow.Truncate(24*time.Hour).Sub(d)/(24*time.Hour)) && *f.AgeDays != 0 {
				t.Fatalf("age of %+v (%v)", f, err)
			}
		}
	}
	if dated == 0 {
		t.Fatal("no feed carries a date")
	}
}

// TestEvaluationListedWithItsRequestID: an answered visitor check is in the
// account's recent list under the X-Request-Id its answer carried, with the
// policy that decided. The list is stored, so what SPEC says is never stored
// is not listed: a test token's evaluation (2.9), the bare degraded allow
// (2.8.6), the sandbox's.
func TestEvaluationListedWithItsRequestID(t *testing.T) {
	e := newConsoleEnv(t, false)
	id := e.acct.View.ID
	if ctx := e.do("PUT", "/admin/v1/accounts/"+id+"/rules", "Bearer adm", []byte(`[{"signal":"vpn","action":"block"},{"signal":"disposable_email","action":"block"}]`)); ctx.Response.StatusCode() != 200 {
		t.Fatalf("rules: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	for _, body := range []string{`{"token":"test_vpn"}`, `{}`} {
		if ctx := e.do("POST", "/v1/evaluate", "Bearer "+e.acct.LiveKey, []byte(body)); ctx.Response.StatusCode() != 200 {
			t.Fatalf("evaluate %s: %d %s", body, ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
	ev := e.do("POST", "/v1/evaluate", "Bearer "+e.acct.LiveKey, []byte(`{"email":"a@mailinator.com"}`))
	if ev.Response.StatusCode() != 200 {
		t.Fatalf("evaluate: %d %s", ev.Response.StatusCode(), ev.Response.Body())
	}
	reqID := string(ev.Response.Header.Peek("X-Request-Id"))
	// The sandbox is no account's evaluation.
	if ctx := e.do("POST", "/v1/evaluate", "Bearer "+SandboxKey, []byte(`{"token":"test_tor"}`)); ctx.Response.StatusCode() != 200 {
		t.Fatalf("sandbox: %d", ctx.Response.StatusCode())
	}
	got := decodeJSON[[]map[string]any](t, e.do("GET", "/admin/v1/accounts/"+id+"/evaluations", "Bearer adm", nil))
	if len(got) != 1 {
		t.Fatalf("%d listed: %v", len(got), got)
	}
	g := got[0]
	if g["request_id"] != reqID || len(reqID) != 28 || g["decision"] != "block" || g["decision_source"] != "rules" || g["rule"] != "disposable_email" ||
		g["engine_decision"] != "review" || g["ip"] != "unknown" || g["test"] != false {
		t.Fatalf("listed %v (request id %s)", g, reqID)
	}
}

// BenchmarkEvaluateRecent is the evaluate handler without and with the
// recent-evaluations ring wired in, side by side: the difference is what
// the ring costs an evaluation (its owner's batch work runs elsewhere).
func BenchmarkEvaluateRecent(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "off"
		if on {
			name = "on"
		}
		b.Run(name, func(b *testing.B) {
			// The ring as served: flushed to its owner every 20 ms.
			e := newConsoleEnv(&testing.T{}, false, 20*time.Millisecond)
			if !on {
				e.srv.deps.Recent = nil
				e.srv.rewire()
			}
			id := e.acct.View.ID
			if _, err := e.accts.Update(id, accountsPatchPlan("public_interest")); err != nil {
				b.Fatal(err)
			}
			ctx := new(fasthttp.RequestCtx)
			b.ReportAllocs()
			for b.Loop() {
				ctx.Request.Reset()
				ctx.Response.Reset()
				ctx.Request.Header.SetMethod("POST")
				ctx.Request.SetRequestURI("/v1/evaluate")
				ctx.Request.Header.Set("User-Agent", "bench/1")
				ctx.Request.Header.Set("Authorization", "Bearer "+e.acct.LiveKey)
				ctx.Request.SetBodyString(`{"token":"test_vpn","email":"a@b.co","tz":"Europe/Berlin"}`)
				e.srv.Handle(ctx)
				if ctx.Response.StatusCode() != 200 {
					b.Fatalf("%d %s", ctx.Response.StatusCode(), ctx.Response.Body())
				}
			}
		})
	}
}

// TestAdminMailOfAccount: GET /admin/v1/mail?account= lists that account's
// mail however many of other accounts' are newer (the console's account
// page reads it; filtering the 200 most recent of all in the page said "No
// mail sent" for an account whose mail was older); without it the list is
// the 200 most recent of all, as before; limit caps either.
func TestAdminMailOfAccount(t *testing.T) {
	e := newConsoleEnv(t, false)
	db, err := storage.Open("m", storage.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	sys := actor.NewActorSystem()
	m, err := mailer.New(sys.Root, mailer.Config{DB: db, Accounts: e.accts, Clock: clock.Fixed{T: fixedNow}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Stop(); sys.Shutdown(); db.Close() })
	e.srv.deps.Mail = m
	other, err := e.accts.Create(accounts.NewAccount{Email: "other@example.com", Plan: "free"})
	if err != nil {
		t.Fatal(err)
	}
	mine := e.acct.View.ID
	put := func(id, account string, at time.Time) {
		if err := db.PutMail(&storage.Mail{ID: id, At: at, Account: account, To: "x@example.com", Kind: "usage_monthly_80", Subject: "s", Body: "b", Status: "recorded"}); err != nil {
			t.Fatal(err)
		}
	}
	put("mine-1", mine, fixedNow.Add(-2*time.Hour))
	put("mine-2", mine, fixedNow.Add(-time.Hour))
	for i := range 250 {
		put(fmt.Sprintf("other-%03d", i), other.View.ID, fixedNow.Add(-time.Hour+time.Duration(i+1)*time.Second))
	}
	list := func(uri string) []wire.Mail {
		t.Helper()
		ctx := e.do("GET", uri, "Bearer adm", nil)
		if ctx.Response.StatusCode() != 200 {
			t.Fatalf("%s: %d %s", uri, ctx.Response.StatusCode(), ctx.Response.Body())
		}
		return decodeJSON[[]wire.Mail](t, ctx)
	}
	ids := func(ms []wire.Mail) string {
		var out []string
		for _, m := range ms {
			out = append(out, m.ID)
		}
		return strings.Join(out, " ")
	}

	all := list("/admin/v1/mail")
	if len(all) != 200 || all[0].ID != "other-249" || all[199].ID != "other-050" {
		t.Fatalf("unfiltered: %d mails, %s … %s", len(all), all[0].ID, all[len(all)-1].ID)
	}
	if got := ids(list("/admin/v1/mail?account=" + mine)); got != "mine-2 mine-1" {
		t.Fatalf("the account's mail: %q", got)
	}
	if got := list("/admin/v1/mail?account=" + mine); got[0].Account != mine || got[0].To != "x@example.com" || got[0].Kind != "usage_monthly_80" {
		t.Fatalf("a mail listed: %+v", got[0])
	}
	if got := ids(list("/admin/v1/mail?account=" + mine + "&limit=1")); got != "mine-2" {
		t.Fatalf("limit=1: %q", got)
	}
	if got := ids(list("/admin/v1/mail?limit=3&account=" + other.View.ID)); got != "other-249 other-248 other-247" {
		t.Fatalf("the other account's, limit=3: %q", got)
	}
	if got := ids(list("/admin/v1/mail?limit=2")); got != "other-249 other-248" {
		t.Fatalf("unfiltered, limit=2: %q", got)
	}
	for uri, status := range map[string]int{
		"/admin/v1/mail?account=acc_nope":         404,
		"/admin/v1/mail?account=":                 404,
		"/admin/v1/mail?limit=0":                  400,
		"/admin/v1/mail?limit=201":                400,
		"/admin/v1/mail?limit=x&account=acc_nope": 400,
	} {
		if ctx := e.do("GET", uri, "Bearer adm", nil); ctx.Response.StatusCode() != status {
			t.Errorf("%s: %d %s, want %d", uri, ctx.Response.StatusCode(), ctx.Response.Body(), status)
		}
	}
}
