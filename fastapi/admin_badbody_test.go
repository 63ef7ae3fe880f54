package fastapi

import (
	"strings"
	"testing"
	"time"

	"github.com/fraudd/fraudd/internal/clock"
)

// TestAdminCreatedAtOutOfRange: the store keeps created_at as Unix
// nanoseconds; a date it cannot hold is a 400, not a 201 whose date (and
// grandfathering) changes on the next restart.
func TestAdminCreatedAtOutOfRange(t *testing.T) {
	e := newTestEnv(t)
	for _, at := range []string{"1600-01-01T00:00:00Z", "2300-01-01T00:00:00Z", "0001-01-01T00:00:00Z"} {
		ctx := e.do("POST", "/admin/v1/accounts", "Bearer adm", []byte(`{"email":"`+strings.ReplaceAll(at, ":", "")+`@example.com","created_at":"`+at+`"}`))
		if ctx.Response.StatusCode() != 400 || !strings.Contains(string(ctx.Response.Body()), "created_at must be") {
			t.Errorf("created_at %s: %d %s", at, ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
	ctx := e.do("POST", "/admin/v1/accounts", "Bearer adm", []byte(`{"email":"ok@example.com","created_at":"2026-09-01T00:00:00Z"}`))
	if ctx.Response.StatusCode() != 201 {
		t.Fatalf("a date in range: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
}

// TestAdminNullBodyIsNotAnEmptySet: PUT rules and exceptions take an array;
// null is a 400 that keeps the set, not a 200 that deletes it. [] clears.
func TestAdminNullBodyIsNotAnEmptySet(t *testing.T) {
	e := newTestEnv(t)
	id := e.acct.View.ID
	e.do("PUT", "/admin/v1/accounts/"+id+"/rules", "Bearer adm", []byte(`[{"signal":"vpn","action":"block"}]`))
	e.do("PUT", "/admin/v1/accounts/"+id+"/exceptions", "Bearer adm", []byte(`[{"ip":"203.0.113.7","action":"block","label":"x"}]`))
	for _, p := range []string{"rules", "exceptions"} {
		ctx := e.do("PUT", "/admin/v1/accounts/"+id+"/"+p, "Bearer adm", []byte(`null`))
		got := e.do("GET", "/admin/v1/accounts/"+id+"/"+p, "Bearer adm", nil)
		if ctx.Response.StatusCode() != 400 || string(got.Response.Body()) == "[]" {
			t.Errorf("PUT %s null: %d %s; GET now %s", p, ctx.Response.StatusCode(), ctx.Response.Body(), got.Response.Body())
		}
		if ctx := e.do("PUT", "/admin/v1/accounts/"+id+"/"+p, "Bearer adm", []byte(`[]`)); ctx.Response.StatusCode() != 200 || string(ctx.Response.Body()) != "[]" {
			t.Errorf("PUT %s []: %d %s", p, ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
}

// TestAdminWebhookBodyWithoutURL: only an explicit "url": null removes the
// receiver; {} or a bare null is a 400 that keeps it.
func TestAdminWebhookBodyWithoutURL(t *testing.T) {
	e := newTestEnv(t)
	uri := "/admin/v1/accounts/" + e.acct.View.ID + "/webhook"
	const hook = "https://hooks.example.com/in"
	for _, body := range []string{`{}`, `null`} {
		if ctx := e.do("PUT", uri, "Bearer adm", []byte(`{"url":"`+hook+`"}`)); ctx.Response.StatusCode() != 200 {
			t.Fatalf("set: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
		ctx := e.do("PUT", uri, "Bearer adm", []byte(body))
		if ctx.Response.StatusCode() != 400 || e.accts.Get(e.acct.View.ID).WebhookURL != hook {
			t.Errorf("PUT webhook %s: %d %s (receiver now %q)", body, ctx.Response.StatusCode(), ctx.Response.Body(), e.accts.Get(e.acct.View.ID).WebhookURL)
		}
	}
	if ctx := e.do("PUT", uri, "Bearer adm", []byte(`{"url":null}`)); ctx.Response.StatusCode() != 200 || e.accts.Get(e.acct.View.ID).WebhookURL != "" {
		t.Fatalf(`PUT webhook {"url":null}: %d %s`, ctx.Response.StatusCode(), ctx.Response.Body())
	}
}

// TestAdminAccountShowsLimitsInForce: GET account's limits are the ones in
// force — the plan's (SPEC §8), the custom ones, or none — while
// hourly_limit and monthly_limit stay the custom figures a PATCH sets.
func TestAdminAccountShowsLimitsInForce(t *testing.T) {
	e := newTestEnv(t) // the account is on starter
	uri := "/admin/v1/accounts/" + e.acct.View.ID
	get := func() (map[string]any, map[string]any) {
		m := decodeJSON[map[string]any](t, e.do("GET", uri, "Bearer adm", nil))
		l, _ := m["limits"].(map[string]any)
		return m, l
	}
	m, l := get()
	if m["hourly_limit"] != nil || l["hourly"] != float64(5000) || l["monthly"] != float64(50000) || l["monthly_lookups"] != float64(500000) {
		t.Fatalf("starter: hourly_limit %v, limits %v", m["hourly_limit"], l)
	}
	e.do("PATCH", uri, "Bearer adm", []byte(`{"plan":"custom","hourly_limit":7,"monthly_limit":null}`))
	if m, l = get(); m["hourly_limit"] != float64(7) || l["hourly"] != float64(7) || l["monthly"] != nil {
		t.Fatalf("custom: hourly_limit %v, limits %v", m["hourly_limit"], l)
	}
}

// TestAdminPreviousKeyShownOnlyInItsGrace: after a live rotation the
// account shows the previous key until its 24-hour grace ends, and from the
// moment it is refused (401) no more — it was shown as working until a
// time that had passed, with a Revoke button in the console.
func TestAdminPreviousKeyShownOnlyInItsGrace(t *testing.T) {
	e := newTestEnv(t)
	uri := "/admin/v1/accounts/" + e.acct.View.ID
	if ctx := e.do("POST", uri+"/keys/live/rotate", "Bearer adm", nil); ctx.Response.StatusCode() != 200 {
		t.Fatalf("rotate: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	at := func(d time.Duration) (prev any, listed any, usage int) {
		e.srv.deps.Clock = clock.Fixed{T: fixedNow.Add(d)}
		m := decodeJSON[map[string]any](t, e.do("GET", uri, "Bearer adm", nil))
		l := decodeJSON[[]map[string]any](t, e.do("GET", "/admin/v1/accounts?q="+e.acct.View.ID, "Bearer adm", nil))
		return m["previous_live_key"], l[0]["previous_live_key"], e.do("GET", "/v1/usage", "Bearer "+e.acct.LiveKey, nil).Response.StatusCode()
	}
	prev, listed, usage := at(24*time.Hour - time.Second)
	p, _ := prev.(map[string]any)
	if p == nil || p["valid_until"] != "2026-11-23T12:00:00Z" || listed == nil || usage != 200 {
		t.Fatalf("in the grace: previous_live_key %v, listed %v, the old key gets %d", prev, listed, usage)
	}
	for _, d := range []time.Duration{24 * time.Hour, 25 * time.Hour} {
		if prev, listed, usage := at(d); prev != nil || listed != nil || usage != 401 {
			t.Fatalf("%v after the rotation: previous_live_key %v, listed %v, the old key gets %d", d, prev, listed, usage)
		}
	}
}

// TestBadKeysDoNotLockOutTheOperator: the operator API has a lockout of its
// own (ADMIN.md: a wrong admin token is 401; CLARIFICATIONS: the keys'
// lockout is /v1/* and /oauth/token). Twenty bad API keys from an address
// leave its operator token working, and twenty wrong operator tokens leave
// its API keys working.
func TestBadKeysDoNotLockOutTheOperator(t *testing.T) {
	e := newTestEnv(t)
	for i := 0; i < 20; i++ {
		e.do("GET", "/v1/usage", "Bearer sk_live_bad", nil)
	}
	if ctx := e.do("GET", "/v1/usage", "Bearer "+e.acct.LiveKey, nil); ctx.Response.StatusCode() != 429 {
		t.Fatalf("the keys' lockout did not lock: %d", ctx.Response.StatusCode())
	}
	if ctx := e.do("GET", "/admin/v1/accounts/"+e.acct.View.ID, "Bearer adm", nil); ctx.Response.StatusCode() != 200 {
		t.Fatalf("the operator after 20 bad API keys: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	f := newTestEnv(t)
	for i := 0; i < 20; i++ {
		f.do("GET", "/admin/v1/accounts", "Bearer wrong", nil)
	}
	if ctx := f.do("GET", "/admin/v1/accounts", "Bearer adm", nil); ctx.Response.StatusCode() != 429 {
		t.Fatalf("the operator's lockout did not lock: %d", ctx.Response.StatusCode())
	}
	if ctx := f.do("GET", "/v1/usage", "Bearer "+f.acct.LiveKey, nil); ctx.Response.StatusCode() != 200 {
		t.Fatalf("an API key after 20 wrong operator tokens: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
}

// TestAdminAnswersNotStored: operator answers carry secrets (a new
// account's keys, a rotated key) and are never kept by a cache nor sniffed,
// refusals included.
func TestAdminAnswersNotStored(t *testing.T) {
	e := newTestEnv(t)
	for _, c := range []struct{ method, uri, auth, body string }{
		{"POST", "/admin/v1/accounts", "Bearer adm", `{"email":"nostore@example.com"}`},
		{"POST", "/admin/v1/accounts/" + e.acct.View.ID + "/keys/live/rotate", "Bearer adm", ""},
		{"GET", "/admin/v1/accounts", "Bearer wrong", ""},
	} {
		ctx := e.do(c.method, c.uri, c.auth, []byte(c.body))
		if cc, ns := string(ctx.Response.Header.Peek("Cache-Control")), string(ctx.Response.Header.Peek("X-Content-Type-Options")); cc != "no-store" || ns != "nosniff" {
			t.Errorf("%s %s (%d): Cache-Control %q, X-Content-Type-Options %q", c.method, c.uri, ctx.Response.StatusCode(), cc, ns)
		}
	}
}

// TestAdminBodyKeyGivenTwice: an operator body that gives one key twice in
// an object (or in two cases: encoding/json matches keys whatever their
// case and keeps the last) is refused, not stored as something the body did
// not show: a removed receiver, a rule on another signal, a pin on another
// address.
func TestAdminBodyKeyGivenTwice(t *testing.T) {
	e := newTestEnv(t)
	id := e.acct.View.ID
	uri := "/admin/v1/accounts/" + id + "/webhook"
	const hook = "https://hooks.example.com/in"
	if ctx := e.do("PUT", uri, "Bearer adm", []byte(`{"url":"`+hook+`"}`)); ctx.Response.StatusCode() != 200 {
		t.Fatalf("set: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	ctx := e.do("PUT", uri, "Bearer adm", []byte(`{"url":"`+hook+`","URL":null}`))
	if got := e.accts.Get(id).WebhookURL; ctx.Response.StatusCode() != 400 || got != hook {
		t.Fatalf(`PUT {"url":%q,"URL":null}: %d %s; receiver now %q`, hook, ctx.Response.StatusCode(), ctx.Response.Body(), got)
	}
	for _, c := range []struct{ path, body string }{
		{"rules", `[{"signal":"vpn","action":"block","Signal":"tor"}]`},
		{"rules", `[{"signal":"vpn","action":"block","action":"allow"}]`},
		{"exceptions", `[{"ip":"203.0.113.7","action":"block","IP":"198.51.100.1"}]`},
	} {
		ctx := e.do("PUT", "/admin/v1/accounts/"+id+"/"+c.path, "Bearer adm", []byte(c.body))
		if ctx.Response.StatusCode() != 400 || !strings.Contains(string(ctx.Response.Body()), "appears twice") {
			t.Errorf("PUT %s %s: %d %s", c.path, c.body, ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
	// The same key in two objects, and nested objects, are fine.
	ctx = e.do("PUT", "/admin/v1/accounts/"+id+"/rules", "Bearer adm", []byte(`[{"signal":"vpn","action":"block"},{"signal":"tor","action":"block"}]`))
	if ctx.Response.StatusCode() != 200 {
		t.Fatalf("two rules: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
}

func TestDuplicateKey(t *testing.T) {
	for body, want := range map[string]string{
		`{"a":1,"b":{"a":2},"c":[{"a":1},{"a":2}]}`: "",
		`{"a":1,"A":2}`:                    "A",
		`[{"x":{"y":1,"y":2}}]`:            "y",
		`{"a":[1,{"b":1}],"b":2,"a":3}`:    "a",
		`{"a":{},"b":[],"c":null,"d":"a"}`: "",
	} {
		k, dup := duplicateKey([]byte(body))
		if k != want || dup != (want != "") {
			t.Errorf("%s: %q %v, want %q", body, k, dup, want)
		}
	}
}

// TestAdminNullBodyRefused: a body of null is not a patch nor any other admin
// request (ADMIN.md: JSON in; PATCH takes "any of" the account's fields):
// PATCH answered 200 having changed nothing. It is a 400, and the account
// is unchanged.
func TestAdminNullBodyRefused(t *testing.T) {
	e := newTestEnv(t)
	uri := "/admin/v1/accounts/" + e.acct.View.ID
	before := string(e.do("GET", uri, "Bearer adm", nil).Response.Body())
	for _, c := range []struct{ method, path string }{
		{"PATCH", uri}, {"POST", "/admin/v1/accounts"}, {"PUT", uri + "/webhook"}, {"PUT", uri + "/rules"}, {"PUT", uri + "/exceptions"},
	} {
		for _, body := range []string{`null`, " null\n"} {
			ctx := e.do(c.method, c.path, "Bearer adm", []byte(body))
			if ctx.Response.StatusCode() != 400 || !strings.Contains(string(ctx.Response.Body()), `"error"`) {
				t.Errorf("%s %s %q: %d %s", c.method, c.path, body, ctx.Response.StatusCode(), ctx.Response.Body())
			}
		}
	}
	if after := string(e.do("GET", uri, "Bearer adm", nil).Response.Body()); after != before {
		t.Errorf("account changed:\n%s\n%s", before, after)
	}
}

// TestAdminPatchNullFieldRefused: PATCH's plan, suspended, allowlist,
// origins and device_evidence_beta take a value, not null (ADMIN.md:
// suspended (bool), allowlist (array; empty = no allowlist)). A null read as
// the field left out, so {"allowlist": null} answered 200 with the allowlist
// still in force. It is a 400 that keeps the account as it was; the limits
// still take null (no limit).
func TestAdminPatchNullFieldRefused(t *testing.T) {
	e := newTestEnv(t)
	uri := "/admin/v1/accounts/" + e.acct.View.ID
	if ctx := e.do("PATCH", uri, "Bearer adm", []byte(`{"suspended":true,"allowlist":["203.0.113.0/24"],"origins":["https://shop.example"],"device_evidence_beta":true}`)); ctx.Response.StatusCode() != 200 {
		t.Fatalf("set: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	before := string(e.do("GET", uri, "Bearer adm", nil).Response.Body())
	for _, body := range []string{`{"allowlist":null}`, `{"Allowlist":null}`, `{"origins":null}`, `{"suspended":null}`,
		`{"device_evidence_beta":null}`, `{"plan":null}`, `{"suspended":false,"allowlist":null}`} {
		ctx := e.do("PATCH", uri, "Bearer adm", []byte(body))
		if ctx.Response.StatusCode() != 400 || !strings.Contains(string(ctx.Response.Body()), "cannot be null") {
			t.Errorf("PATCH %s: %d %s", body, ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
	if after := string(e.do("GET", uri, "Bearer adm", nil).Response.Body()); after != before {
		t.Errorf("account changed:\n%s\n%s", before, after)
	}
	if ctx := e.do("PATCH", uri, "Bearer adm", []byte(`{"plan":"custom","hourly_limit":null,"monthly_limit":null}`)); ctx.Response.StatusCode() != 200 {
		t.Errorf("null limits: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
}

// TestAdminCreatedAtNotInTheFuture: created_at is for imports and
// grandfathering (ADMIN.md), a date that has passed; 2062-09-01 (a typo for
// 2026) was stored, and the account listed first, newest, for decades.
// The present instant itself is accepted.
func TestAdminCreatedAtNotInTheFuture(t *testing.T) {
	e := newTestEnv(t)
	for _, at := range []string{"2062-09-01T00:00:00Z", fixedNow.Add(time.Second).Format(time.RFC3339)} {
		ctx := e.do("POST", "/admin/v1/accounts", "Bearer adm", []byte(`{"email":"f`+strings.ReplaceAll(at, ":", "")+`@example.com","created_at":"`+at+`"}`))
		if ctx.Response.StatusCode() != 400 || !strings.Contains(string(ctx.Response.Body()), "future") {
			t.Errorf("created_at %s: %d %s", at, ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
	for i, at := range []string{fixedNow.Format(time.RFC3339), "2026-09-01T00:00:00Z"} {
		ctx := e.do("POST", "/admin/v1/accounts", "Bearer adm", []byte(`{"email":"ok`+string(rune('a'+i))+`@example.com","created_at":"`+at+`"}`))
		if ctx.Response.StatusCode() != 201 {
			t.Errorf("created_at %s: %d %s", at, ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
}
