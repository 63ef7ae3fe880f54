package fastapi

import (
	"bytes"
	"encoding/json"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/actors/checks"
	"github.com/fraudd/fraudd/actors/iplimit"
)

// serveInMemory runs h behind a real fasthttp server on an in-memory
// listener (the SDK needs a RequestCtx that belongs to a server) and returns
// a function that sends one MCP lookup_ip call to it.
func serveInMemory(t *testing.T, h fasthttp.RequestHandler) func(ip string) *fasthttp.Response {
	t.Helper()
	ln := fasthttputil.NewInmemoryListener()
	srv := &fasthttp.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown() })
	c := &fasthttp.Client{Dial: func(string) (net.Conn, error) { return ln.Dial() }}
	return func(ip string) *fasthttp.Response {
		req, resp := fasthttp.AcquireRequest(), new(fasthttp.Response)
		defer fasthttp.ReleaseRequest(req)
		req.Header.SetMethod("POST")
		req.SetRequestURI("http://mem/mcp")
		req.Header.Set("User-Agent", "unit-test/1")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.SetContentType("application/json")
		req.SetBodyString(`{"jsonrpc":"2.0","id":"req-1","method":"tools/call","params":{"name":"lookup_ip","arguments":{"ip":"` + ip + `"}}}`)
		if err := c.Do(req, resp); err != nil {
			t.Fatal(err)
		}
		return resp
	}
}

// TestMCPFastPathMatchesSDK checks that the hand-written lookup_ip answer is
// the SDK's answer, for a result and for a tool error.
func TestMCPFastPathMatchesSDK(t *testing.T) {
	e := newTestEnv(t)
	fastPath := serveInMemory(t, e.srv.Handle)
	sdkPath := serveInMemory(t, func(ctx *fasthttp.RequestCtx) {
		var peek struct {
			Params rpcCallParams `json:"params"`
		}
		_ = json.Unmarshal(ctx.PostBody(), &peek)
		raw, _ := jsonString(peek.Params.Arguments.IP)
		call := &mcpCall{now: fixedNow}
		if ref := e.srv.mcpPrepare(&request{Call: checks.Call{Now: fixedNow}}, call, true, raw); ref != nil {
			t.Errorf("%s: refused: %+v", raw, ref)
		}
		ctx.SetUserValue(mcpCallKey, call)
		e.srv.mcp(ctx)
	})
	for _, ip := range []string{"52.95.110.1", "185.220.101.1", "10.0.0.1"} {
		fast, sdk := fastPath(ip), sdkPath(ip)
		if fast.StatusCode() != 200 || sdk.StatusCode() != 200 {
			t.Fatalf("%s: fast %d sdk %d %s", ip, fast.StatusCode(), sdk.StatusCode(), sdk.Body())
		}
		a, b := decodeRPC(t, fast.Body()), decodeRPC(t, sdk.Body())
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s differs:\nfast %s\nsdk  %s", ip, fast.Body(), sdk.Body())
		}
	}
}

// decodeRPC parses a response, decoding the text content too and zeroing the
// timing field.
func decodeRPC(t *testing.T, body []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(normalise(body), &m); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	res := m["result"].(map[string]any)
	for _, c := range res["content"].([]any) {
		cm := c.(map[string]any)
		var inner any
		if json.Unmarshal(normalise([]byte(cm["text"].(string))), &inner) == nil {
			cm["text"] = inner
		}
	}
	return m
}

// TestMCPLookupOnlyWhenChecked: a request the pre-check reads differently
// from the SDK (a key in another case, trailing bytes, a second "ip") used to
// reach the SDK's lookup_ip with nothing checked or charged, which looked up
// the zero address and answered allow. Each now ends in an error and never
// takes a lookup from the anonymous allowance it did not pay for.
func TestMCPLookupOnlyWhenChecked(t *testing.T) {
	e := newTestEnv(t)
	send := serveRaw(t, e.srv.Handle)
	const call = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup_ip","arguments":{"ip":"185.220.101.1"}}`
	for _, body := range []string{
		call + `}  trailing`,
		call + `,"Method":"ping"}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup_ip","Name":"x","arguments":{"ip":"185.220.101.1"}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup_ip","arguments":{"IP":"8.8.8.8","ip":"185.220.101.1"}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup_ip","arguments":{"ip":"8.8.8.8"}},"params":{"name":"lookup_ip","arguments":{"ip":"185.220.101.1"}}}`,
	} {
		resp := send(body)
		if b := string(resp.Body()); strings.Contains(b, `"verdict":"allow"`) || strings.Contains(b, `"ip":"invalid IP"`) {
			t.Fatalf("%s\nanswered a lookup it did not check: %d %s", body, resp.StatusCode(), b)
		}
	}
}

// serveRaw is serveInMemory for arbitrary bodies.
func serveRaw(t *testing.T, h fasthttp.RequestHandler) func(body string) *fasthttp.Response {
	t.Helper()
	ln := fasthttputil.NewInmemoryListener()
	srv := &fasthttp.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown() })
	c := &fasthttp.Client{Dial: func(string) (net.Conn, error) { return ln.Dial() }}
	return func(body string) *fasthttp.Response {
		req, resp := fasthttp.AcquireRequest(), new(fasthttp.Response)
		defer fasthttp.ReleaseRequest(req)
		req.Header.SetMethod("POST")
		req.SetRequestURI("http://mem/mcp")
		req.Header.Set("User-Agent", "unit-test/1")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.SetContentType("application/json")
		req.SetBodyString(body)
		if err := c.Do(req, resp); err != nil {
			t.Fatal(err)
		}
		return resp
	}
}

// FuzzMCPRequest sends any body to POST /mcp (as an uncapped account, so
// no limit hides the lookup path). The service never fails with 500, every
// answer but 202 is JSON, every error a JSON-RPC error object, and a lookup
// is answered only for the address the request's own lookup_ip argument
// names (read case-sensitively, as the SDK reads it).
func FuzzMCPRequest(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup_ip","arguments":{"ip":"185.220.101.1"}}}`,
		`{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"lookup_ip","arguments":{"ip":"1.2.3.4:80"}},"Method":"ping"}`,
		`[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]`,
		`{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"f","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"service_status","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":4,"method":"foo"}`, `{`, ``, `null`,
	} {
		f.Add([]byte(s))
	}
	e := newTestEnv(f)
	pi, err := e.accts.Create(accounts.NewAccount{Email: "fuzz@example.com", Plan: "public_interest"})
	if err != nil {
		f.Fatal(err)
	}
	ln := fasthttputil.NewInmemoryListener()
	srv := &fasthttp.Server{Handler: e.srv.Handle}
	go srv.Serve(ln)
	f.Cleanup(func() { srv.Shutdown() })
	c := &fasthttp.Client{Dial: func(string) (net.Conn, error) { return ln.Dial() }}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, resp := fasthttp.AcquireRequest(), new(fasthttp.Response)
		defer fasthttp.ReleaseRequest(req)
		req.Header.SetMethod("POST")
		req.SetRequestURI("http://mem/mcp")
		req.Header.Set("Authorization", "Bearer "+pi.LiveKey)
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.SetContentType("application/json")
		req.SetBody(body)
		if err := c.Do(req, resp); err != nil {
			t.Fatal(err)
		}
		st, out := resp.StatusCode(), resp.Body()
		if st == 202 {
			return
		}
		var m map[string]any
		if st >= 500 || json.Unmarshal(out, &m) != nil {
			t.Fatalf("%q: %d %s", body, st, out)
		}
		if st >= 400 {
			if e, ok := m["error"].(map[string]any); !ok || m["jsonrpc"] != "2.0" || e["code"] == nil {
				t.Fatalf("%q: error %d is not a JSON-RPC error: %s", body, st, out)
			}
		}
		if !bytes.Contains(out, []byte(`\"verdict\"`)) && !bytes.Contains(out, []byte(`"verdict"`)) {
			return
		}
		lookedUpAsked(t, body, out)
	})
}

// serveMCP is serveRaw with extra request headers (name, value, ...).
func serveMCP(t *testing.T, h fasthttp.RequestHandler) func(body string, hdr ...string) *fasthttp.Response {
	t.Helper()
	ln := fasthttputil.NewInmemoryListener()
	srv := &fasthttp.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown() })
	c := &fasthttp.Client{Dial: func(string) (net.Conn, error) { return ln.Dial() }}
	return func(body string, hdr ...string) *fasthttp.Response {
		req, resp := fasthttp.AcquireRequest(), new(fasthttp.Response)
		defer fasthttp.ReleaseRequest(req)
		req.Header.SetMethod("POST")
		req.SetRequestURI("http://mem/mcp")
		req.Header.Set("User-Agent", "unit-test/1")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.SetContentType("application/json")
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		req.SetBodyString(body)
		if err := c.Do(req, resp); err != nil {
			t.Fatal(err)
		}
		return resp
	}
}

// rpcErrorOf decodes a JSON-RPC error answer: its code and raw id.
func rpcErrorOf(t *testing.T, resp *fasthttp.Response) (int, string) {
	t.Helper()
	var m struct {
		ID    json.RawMessage `json:"id"`
		Error *struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(resp.Body(), &m); err != nil || m.Error == nil {
		t.Fatalf("not a JSON-RPC error: %d %s", resp.StatusCode(), resp.Body())
	}
	return m.Error.Code, string(m.ID)
}

// TestMCPInvalidIDRefused: MCP requests carry a string or integer id, never
// null. A lookup_ip with an id of another type used to be answered by the
// fast path with that value echoed as its id (`"id":true`) and charged; with
// an unknown method it got -32601 instead of -32600, and with a null id 202
// as if it were a notification. A fractional or out-of-range number went to
// the SDK, which answers with another id (1.5 as 1, 12345678901234567890 as
// -9223372036854775808), so the client cannot match the answer. Each is now
// -32600 (HTTP 400, id null) before anything is charged.
func TestMCPInvalidIDRefused(t *testing.T) {
	e := newTestEnv(t)
	send := serveMCP(t, e.srv.Handle)
	auth := "Bearer " + e.acct.LiveKey
	for _, id := range []string{`true`, `{"a":1}`, `[1]`, `null`, `1.5`, `12345678901234567890`, `9007199254740993`} {
		for _, rest := range []string{
			`"method":"tools/call","params":{"name":"lookup_ip","arguments":{"ip":"185.220.101.1"}}`,
			`"method":"foo/bar"`,
			`"method":"ping"`,
		} {
			body := `{"jsonrpc":"2.0","id":` + id + `,` + rest + `}`
			resp := send(body, "Authorization", auth)
			if code, gotID := rpcErrorOf(t, resp); resp.StatusCode() != 400 || code != rpcInvalidRequest || gotID != "null" {
				t.Errorf("%s: %d code %d id %s, want 400 -32600 null: %s", body, resp.StatusCode(), code, gotID, resp.Body())
			}
		}
	}
	if resp := send(`{"jsonrpc":"2.0", "id" : 7 , "method":"ping"}`); resp.StatusCode() != 200 || !bytes.Contains(resp.Body(), []byte(`"id":7`)) {
		t.Fatalf("id with spaces around it: %d %s", resp.StatusCode(), resp.Body())
	}
	// Nothing above was charged; string and integer ids are answered as sent.
	for _, id := range []string{`"7"`, `7`, `-3`} {
		resp := send(`{"jsonrpc":"2.0","id":`+id+`,"method":"tools/call","params":{"name":"lookup_ip","arguments":{"ip":"8.8.8.8"}}}`, "Authorization", auth)
		if resp.StatusCode() != 200 || !bytes.Contains(resp.Body(), []byte(`"id":`+id+`,`)) {
			t.Fatalf("id %s: %d %s", id, resp.StatusCode(), resp.Body())
		}
		if id == `"7"` {
			if rem := string(resp.Header.Peek("X-RateLimit-Remaining")); rem != "4999" {
				t.Fatalf("refused requests were charged: remaining %s after one lookup", rem)
			}
		}
	}
}

// TestMCPLookupWithoutIDNotCharged: a tools/call lookup_ip without an id is
// a notification the SDK refuses (a tools/call needs an id to be answered).
// It used to run the lookup first: charged to the key's hourly and monthly
// allowance, or to the anonymous caller's free-tool limit, for an answer
// never given. It is now refused without a lookup.
func TestMCPLookupWithoutIDNotCharged(t *testing.T) {
	e := newTestEnv(t)
	send := serveMCP(t, e.srv.Handle)
	const note = `{"jsonrpc":"2.0","method":"tools/call","params":{"name":"lookup_ip","arguments":{"ip":"8.8.8.8"}}}`
	const call = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup_ip","arguments":{"ip":"8.8.8.8"}}}`
	auth := "Bearer " + e.acct.LiveKey
	for i := 0; i < 3; i++ {
		if resp := send(note, "Authorization", auth); resp.StatusCode() == 200 || bytes.Contains(resp.Body(), []byte("verdict")) {
			t.Fatalf("notification answered: %d %s", resp.StatusCode(), resp.Body())
		}
	}
	resp := send(call, "Authorization", auth)
	if rem := string(resp.Header.Peek("X-RateLimit-Remaining")); resp.StatusCode() != 200 || rem != "4999" {
		t.Fatalf("after 3 notifications and one call: %d remaining %q (want 4999)", resp.StatusCode(), rem)
	}
	// Anonymous: the free tool's 12 a minute are left for calls.
	for i := 0; i < 12; i++ {
		send(note)
	}
	if resp := send(call); resp.StatusCode() != 200 {
		t.Fatalf("anonymous call after 12 notifications: %d %s", resp.StatusCode(), resp.Body())
	}
}

// TestMCPUnsupportedProtocolVersion: MCP 2025-06-18 (transports): "If the
// server receives a request with an invalid or unsupported
// MCP-Protocol-Version, it MUST respond with 400 Bad Request". The SDK does,
// but lookup_ip's fast path answered such a request 200 and charged it.
func TestMCPUnsupportedProtocolVersion(t *testing.T) {
	e := newTestEnv(t)
	send := serveMCP(t, e.srv.Handle)
	auth := "Bearer " + e.acct.LiveKey
	const call = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup_ip","arguments":{"ip":"185.220.101.1"}}}`
	for _, v := range []string{"1999-01-01", "2025-6-18"} {
		resp := send(call, "Authorization", auth, "MCP-Protocol-Version", v)
		if code, _ := rpcErrorOf(t, resp); resp.StatusCode() != 400 || code != rpcInvalidRequest {
			t.Fatalf("version %q: %d code %d: %s", v, resp.StatusCode(), code, resp.Body())
		}
	}
	resp := send(call, "Authorization", auth, "MCP-Protocol-Version", "2025-06-18")
	if rem := string(resp.Header.Peek("X-RateLimit-Remaining")); resp.StatusCode() != 200 || rem != "4999" {
		t.Fatalf("supported version after two refusals: %d remaining %q (want 4999): %s", resp.StatusCode(), rem, resp.Body())
	}
}

// TestEdgeExemptWithTrailingSlash: the router serves /mcp/ as /mcp and
// /healthz/ as /healthz, but the edge block's exemption compared the path
// exactly, so an agent posting to /mcp/ without a User-Agent got the plain
// 403 "error code: 1010" (CLARIFICATIONS: the edge block "does not apply to
// /mcp"), and a probe of /healthz/ was blocked too.
func TestEdgeExemptWithTrailingSlash(t *testing.T) {
	e := newTestEnv(t)
	noAgent := [2]string{"User-Agent", ""}
	for _, tr := range []testRequest{
		{method: "POST", uri: "/mcp/", body: []byte(`[]`), header: [][2]string{noAgent,
			{"Content-Type", "application/json"}, {"Accept", "application/json, text/event-stream"}}},
		{method: "GET", uri: "/healthz/", header: [][2]string{noAgent}},
		{method: "GET", uri: "/readyz/", header: [][2]string{noAgent}},
	} {
		ctx := e.serve(tr)
		if ctx.Response.StatusCode() == edgeBlockStatus || string(ctx.Response.Body()) == edgeBlockBody {
			t.Errorf("%s %s without a User-Agent: %d %s", tr.method, tr.uri, ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
	// The block itself still applies elsewhere, with or without the slash.
	for _, uri := range []string{"/api/status", "/api/status/"} {
		if ctx := e.serve(testRequest{method: "GET", uri: uri, header: [][2]string{noAgent}}); ctx.Response.StatusCode() != edgeBlockStatus {
			t.Errorf("GET %s without a User-Agent: %d", uri, ctx.Response.StatusCode())
		}
	}
}

// TestMCPMethodNotAllowedWithTrailingSlash: /mcp/ is routed as /mcp, but a
// GET or DELETE there got the plain {"error"} body instead of the JSON-RPC
// error every other /mcp refusal is (the 405 compared the path exactly).
func TestMCPMethodNotAllowedWithTrailingSlash(t *testing.T) {
	e := newTestEnv(t)
	for _, method := range []string{"GET", "DELETE"} {
		ctx := e.serve(testRequest{method: method, uri: "/mcp/"})
		var m struct {
			JSONRPC string `json:"jsonrpc"`
			Error   struct {
				Code int `json:"code"`
			} `json:"error"`
		}
		_ = json.Unmarshal(ctx.Response.Body(), &m)
		if ctx.Response.StatusCode() != 405 || m.JSONRPC != "2.0" || m.Error.Code != rpcTransportError ||
			string(ctx.Response.Header.Peek("Allow")) != "POST, OPTIONS" {
			t.Errorf("%s /mcp/: %d Allow=%q %s", method, ctx.Response.StatusCode(), ctx.Response.Header.Peek("Allow"), ctx.Response.Body())
		}
	}
}

// TestMCPRefusalKeepsCode: SPEC §7, 429: "Monthly exhaustion: body code =
// monthly_quota_exceeded". A lookup_ip refused for the month was rendered as
// a JSON-RPC error with the message and retry_after only: the code (and any
// hint) GET /v1/lookup sends was dropped, so an agent could not tell the
// month's allowance from the hour's. The error's data now carries them.
func TestMCPRefusalKeepsCode(t *testing.T) {
	e := newTestEnv(t)
	month, hour := int64(1), int64(1000)
	c, err := e.accts.Create(accounts.NewAccount{Email: "month@example.com", Plan: "custom", MonthlyLimit: &month, HourlyLimit: &hour})
	if err != nil {
		t.Fatal(err)
	}
	send := serveMCP(t, e.srv.Handle)
	auth := "Bearer " + c.LiveKey
	const call = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup_ip","arguments":{"ip":"8.8.8.8"}}}`
	var resp *fasthttp.Response
	for i := 0; i < 50; i++ {
		if resp = send(call, "Authorization", auth); resp.StatusCode() != 200 {
			break
		}
	}
	var m struct {
		Error struct {
			Code int `json:"code"`
			Data struct {
				Code       string `json:"code"`
				RetryAfter int64  `json:"retry_after"`
			} `json:"data"`
		} `json:"error"`
	}
	if err := json.Unmarshal(resp.Body(), &m); err != nil || resp.StatusCode() != 429 {
		t.Fatalf("no monthly refusal: %d %s", resp.StatusCode(), resp.Body())
	}
	if m.Error.Data.Code != checks.CodeMonthly || m.Error.Data.RetryAfter <= 0 || len(resp.Header.Peek("Retry-After")) == 0 {
		t.Fatalf("monthly refusal over MCP: %s", resp.Body())
	}
	// GET /v1/lookup says the same.
	if ctx := e.do("GET", "/v1/lookup/8.8.8.8", auth, nil); !bytes.Contains(ctx.Response.Body(), []byte(`"code":"`+checks.CodeMonthly+`"`)) {
		t.Fatalf("GET /v1/lookup: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
}

// TestMCPResponseNeedsResultOrError: a message without a method is a
// response, and JSON-RPC 2.0 §5 asks of one exactly one of "result" and
// "error" ("Either the result member or error member MUST be included, but
// both members MUST NOT be included"). A body like {"jsonrpc":"2.0","id":1}
// or one with both was accepted with 202 as if it were a response; it is now
// -32600 (HTTP 400). Real responses are still accepted.
func TestMCPResponseNeedsResultOrError(t *testing.T) {
	e := newTestEnv(t)
	send := serveMCP(t, e.srv.Handle)
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":1}`,
		`{"jsonrpc":"2.0","id":"a","result":{},"error":{"code":-32603,"message":"x"}}`,
	} {
		resp := send(body)
		if code, _ := rpcErrorOf(t, resp); resp.StatusCode() != 400 || code != rpcInvalidRequest {
			t.Errorf("%s: %d code %d: %s", body, resp.StatusCode(), code, resp.Body())
		}
	}
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":1,"result":{}}`,
		`{"jsonrpc":"2.0","id":1,"result":null}`,
		`{"jsonrpc":"2.0","id":"a","error":{"code":-32603,"message":"x"}}`,
	} {
		if resp := send(body); resp.StatusCode() != 202 || len(resp.Body()) != 0 {
			t.Errorf("%s: %d %s", body, resp.StatusCode(), resp.Body())
		}
	}
}

// TestMCPAnonymousCallsTakeTheFreeToolLimit: SPEC 4.11, "anonymous use
// shares the free tool's per-IP limits". An anonymous initialize or
// tools/list (each a run of the SDK) took no limit at all, so a caller
// without a key could send them without bound. Every anonymous call that is
// not a lookup_ip now takes the free tool's limit for calls that look
// nothing up (60 a minute, LookupFreeInvalid); past it the answer is a
// JSON-RPC error with 429 and Retry-After, as an anonymous lookup_ip's
// refusal is. The lookup allowance itself is left to lookups, and a caller
// with a key is not held by it.
func TestMCPAnonymousCallsTakeTheFreeToolLimit(t *testing.T) {
	e := newTestEnv(t)
	// From one real address: the in-memory listener's peer is none.
	peer := net.TCPAddrFromAddrPort(netip.MustParseAddrPort("198.51.100.7:4000"))
	send := serveMCP(t, func(ctx *fasthttp.RequestCtx) { ctx.SetRemoteAddr(peer); e.srv.Handle(ctx) })
	const initialize = `{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	const list = `{"jsonrpc":"2.0","id":"l","method":"tools/list"}`
	limit := iplimit.Rules[iplimit.LookupFreeInvalid].Windows[0].PerAddr
	for i := int64(0); i < limit; i++ {
		body := initialize
		if i%2 == 1 {
			body = list
		}
		if resp := send(body); resp.StatusCode() != 200 {
			t.Fatalf("call %d: %d %s", i+1, resp.StatusCode(), resp.Body())
		}
	}
	for _, c := range []struct{ body, id string }{{initialize, "7"}, {list, `"l"`}, {`{`, "null"}} {
		resp := send(c.body)
		code, id := rpcErrorOf(t, resp)
		if resp.StatusCode() != 429 || code != rpcTransportError || id != c.id {
			t.Fatalf("%s past the limit: %d code %d id %s, want 429 -32000 %s: %s", c.body, resp.StatusCode(), code, id, c.id, resp.Body())
		}
		if ra, err := strconv.Atoi(string(resp.Header.Peek("Retry-After"))); err != nil || ra < 1 || ra > 60 {
			t.Fatalf("Retry-After %q", resp.Header.Peek("Retry-After"))
		}
	}
	// The lookup allowance is the lookups': an anonymous lookup_ip still
	// passes, and a key's calls are not held by the anonymous limit.
	if resp := send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup_ip","arguments":{"ip":"8.8.8.8"}}}`); resp.StatusCode() != 200 || !bytes.Contains(resp.Body(), []byte(`"verdict"`)) {
		t.Fatalf("anonymous lookup_ip: %d %s", resp.StatusCode(), resp.Body())
	}
	if resp := send(list, "Authorization", "Bearer "+e.acct.LiveKey); resp.StatusCode() != 200 {
		t.Fatalf("tools/list with a key: %d %s", resp.StatusCode(), resp.Body())
	}
}

// TestMCPSDKErrorKeepsID: an error the SDK raises for a request whose id was
// read (initialize or tools/call without params) carries that id back
// (JSON-RPC 2.0 §5: null only when the id could not be detected).
func TestMCPSDKErrorKeepsID(t *testing.T) {
	e := newTestEnv(t)
	send := serveMCP(t, e.srv.Handle)
	for body, want := range map[string]string{
		`{"jsonrpc":"2.0","id":41,"method":"initialize"}`:     "41",
		`{"jsonrpc":"2.0","id":"x-42","method":"tools/call"}`: `"x-42"`,
	} {
		resp := send(body)
		if code, id := rpcErrorOf(t, resp); resp.StatusCode() != 400 || code != rpcInvalidRequest || id != want {
			t.Errorf("%s: %d code %d id %s, want 400 -32600 id %s: %s", body, resp.StatusCode(), code, id, want, resp.Body())
		}
	}
}

// lookedUpAsked fails t unless the lookup answer out is for the address the
// tools/call body asked about.
func lookedUpAsked(t *testing.T, body, out []byte) {
	t.Helper()
	var in struct {
		Params struct {
			Arguments map[string]json.RawMessage `json:"arguments"`
		} `json:"params"`
	}
	_ = json.Unmarshal(body, &in)
	var ip string
	_ = json.Unmarshal(in.Params.Arguments["ip"], &ip)
	want := checks.PastedTarget(ip)
	if !want.OK() || !strings.Contains(string(out), `"ip":"`+want.Addr.String()+`"`) {
		t.Fatalf("%q: answered a lookup for another address than %q: %s", body, ip, out)
	}
}

// TestMCPModernLookupIsTheSDKs: MCP 2026-07-28 (basic, result responses):
// "The result MUST include a resultType field"; its requests carry their
// version in _meta and in the MCP-Protocol-Version, Mcp-Method and Mcp-Name
// headers, which the SDK checks. lookup_ip's fast path answered a call of
// that revision without resultType (the SDK's clients reject such a result),
// and answered and charged one the SDK refuses (no _meta, no Mcp-Method, a
// Mcp-Name of another tool, no client capabilities), or whose arguments its
// input schema refuses (an extra argument). The first is now the SDK's
// answer; the others get the SDK's refusal or tool error, uncharged.
func TestMCPModernLookupIsTheSDKs(t *testing.T) {
	e := newTestEnv(t)
	send := serveMCP(t, e.srv.Handle)
	auth := "Bearer " + e.acct.LiveKey
	const v = "2026-07-28"
	call := func(meta string) string {
		return `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup_ip","arguments":{"ip":"185.220.101.1"}` + meta + `}}`
	}
	const meta = `,"_meta":{"io.modelcontextprotocol/protocolVersion":"` + v + `","io.modelcontextprotocol/clientCapabilities":{}}`
	for _, c := range []struct {
		name, body string
		hdr        []string
	}{
		{"no _meta", call(""), []string{"Mcp-Method", "tools/call", "Mcp-Name", "lookup_ip"}},
		{"no Mcp-Method", call(meta), []string{"Mcp-Name", "lookup_ip"}},
		{"Mcp-Name of another tool", call(meta), []string{"Mcp-Method", "tools/call", "Mcp-Name", "service_status"}},
		{"no client capabilities", call(`,"_meta":{"io.modelcontextprotocol/protocolVersion":"` + v + `"}`), []string{"Mcp-Method", "tools/call", "Mcp-Name", "lookup_ip"}},
		{"_meta of another version", call(`,"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}`), []string{"Mcp-Method", "tools/call", "Mcp-Name", "lookup_ip"}},
	} {
		resp := send(c.body, append([]string{"Authorization", auth, "MCP-Protocol-Version", v}, c.hdr...)...)
		if resp.StatusCode() != 400 || bytes.Contains(resp.Body(), []byte("verdict")) {
			t.Errorf("%s: %d %s, want the SDK's 400", c.name, resp.StatusCode(), resp.Body())
		}
	}
	// Arguments lookup_ip's input schema refuses are the SDK's tool error,
	// with nothing looked up.
	for _, args := range []string{`{"ip":"185.220.101.1","extra":1}`, `{"ip":5}`} {
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup_ip","arguments":` + args + meta + `}}`
		resp := send(body, "Authorization", auth, "MCP-Protocol-Version", v, "Mcp-Method", "tools/call", "Mcp-Name", "lookup_ip")
		if resp.StatusCode() != 200 || !bytes.Contains(resp.Body(), []byte(`"isError":true`)) || bytes.Contains(resp.Body(), []byte("verdict")) {
			t.Errorf("arguments %s: %d %s, want the SDK's tool error", args, resp.StatusCode(), resp.Body())
		}
	}
	resp := send(call(meta), "Authorization", auth, "MCP-Protocol-Version", v, "Mcp-Method", "tools/call", "Mcp-Name", "lookup_ip")
	var m struct {
		Result struct {
			ResultType        string         `json:"resultType"`
			StructuredContent map[string]any `json:"structuredContent"`
		} `json:"result"`
	}
	if err := json.Unmarshal(resp.Body(), &m); err != nil || resp.StatusCode() != 200 ||
		m.Result.ResultType != "complete" || m.Result.StructuredContent["verdict"] != "block" {
		t.Fatalf("2026-07-28 call: %d %s", resp.StatusCode(), resp.Body())
	}
	if rem := string(resp.Header.Peek("X-RateLimit-Remaining")); rem != "4999" {
		t.Fatalf("refused calls were charged: remaining %q after one answered lookup", rem)
	}
	// An earlier revision's call is still the fast path's, with no resultType.
	resp = send(call(""), "Authorization", auth, "MCP-Protocol-Version", "2025-11-25")
	if resp.StatusCode() != 200 || bytes.Contains(resp.Body(), []byte("resultType")) || !bytes.Contains(resp.Body(), []byte(`"verdict":"block"`)) {
		t.Fatalf("2025-11-25 call: %d %s", resp.StatusCode(), resp.Body())
	}
}

// TestMCPServerDiscover: MCP 2026-07-28 replaces the initialize handshake
// with server/discover (SEP-2575), and a server of that revision answers it.
// The SDK serves the revision and handleMCP accepted its headers, but
// mcpMethods refused server/discover with -32601, so a client pinned to
// 2026-07-28 (the TypeScript SDK 2.4's versionNegotiation pin) could not
// connect, and the Go SDK 1.8 client fell back to 2025-11-25. It is now
// answered, with a key and anonymously.
func TestMCPServerDiscover(t *testing.T) {
	e := newTestEnv(t)
	send := serveMCP(t, e.srv.Handle)
	const body = `{"jsonrpc":"2.0","id":"d","method":"server/discover","params":{"_meta":{` +
		`"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	for _, auth := range []string{"Bearer " + e.acct.LiveKey, ""} {
		hdr := []string{"MCP-Protocol-Version", "2026-07-28", "Mcp-Method", "server/discover"}
		if auth != "" {
			hdr = append(hdr, "Authorization", auth)
		}
		resp := send(body, hdr...)
		var m struct {
			Result *struct {
				ResultType        string   `json:"resultType"`
				SupportedVersions []string `json:"supportedVersions"`
				Capabilities      struct {
					Tools json.RawMessage `json:"tools"`
				} `json:"capabilities"`
			} `json:"result"`
		}
		if err := json.Unmarshal(resp.Body(), &m); err != nil || resp.StatusCode() != 200 || m.Result == nil ||
			m.Result.ResultType != "complete" || !slices.Contains(m.Result.SupportedVersions, "2026-07-28") ||
			!slices.Contains(m.Result.SupportedVersions, "2025-11-25") || len(m.Result.Capabilities.Tools) == 0 {
			t.Fatalf("server/discover (auth %t): %d %s", auth != "", resp.StatusCode(), resp.Body())
		}
	}
}

// TestMCPUnsupportedVersionOfUnknownMethod: MCP 2025-06-18 and later
// (transports): "If the server receives a request with an invalid or
// unsupported MCP-Protocol-Version, it MUST respond with 400 Bad Request".
// The SDK does for the methods it serves, but a method /mcp does not offer
// was answered first, whatever the header: 200 with -32601, or 202 for a
// notification. Both are now 400 (-32600, naming the versions it speaks).
func TestMCPUnsupportedVersionOfUnknownMethod(t *testing.T) {
	e := newTestEnv(t)
	send := serveMCP(t, e.srv.Handle)
	for body, usual := range map[string]int{
		`{"jsonrpc":"2.0","id":1,"method":"foo/bar"}`:    200, // -32601
		`{"jsonrpc":"2.0","method":"notifications/foo"}`: 202,
	} {
		resp := send(body, "MCP-Protocol-Version", "1999-01-01")
		if code, _ := rpcErrorOf(t, resp); resp.StatusCode() != 400 || code != rpcInvalidRequest {
			t.Errorf("%s with version 1999-01-01: %d %s", body, resp.StatusCode(), resp.Body())
		}
		// A version the SDK speaks: the usual answer.
		if resp = send(body, "MCP-Protocol-Version", "2025-11-25"); resp.StatusCode() != usual {
			t.Errorf("%s with version 2025-11-25: %d %s, want %d", body, resp.StatusCode(), resp.Body(), usual)
		}
	}
	for _, v := range []string{"2099-01-01", "not-a-version"} {
		resp := send(`{"jsonrpc":"2.0","id":1,"method":"foo/bar"}`, "MCP-Protocol-Version", v, "Mcp-Method", "foo/bar")
		if code, id := rpcErrorOf(t, resp); resp.StatusCode() != 400 || code != rpcInvalidRequest || id != "1" {
			t.Errorf("foo/bar with version %s: %d %s", v, resp.StatusCode(), resp.Body())
		}
	}
}

// TestMCPCapabilitiesPromiseNoNotifications: the endpoint is stateless and
// has no stream (GET is 405), so initialize must not declare a tools
// capability with listChanged — a notification it can never send — while
// still declaring tools and logging.
func TestMCPCapabilitiesPromiseNoNotifications(t *testing.T) {
	e := newTestEnv(t)
	send := serveMCP(t, e.srv.Handle)
	for _, v := range []string{"2025-06-18", "2025-11-25"} {
		resp := send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"`+v+`","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
			"Authorization", "Bearer "+e.acct.LiveKey)
		var m struct {
			Result struct {
				Capabilities map[string]map[string]any `json:"capabilities"`
			} `json:"result"`
		}
		if resp.StatusCode() != 200 || json.Unmarshal(resp.Body(), &m) != nil {
			t.Fatalf("%s: %d %s", v, resp.StatusCode(), resp.Body())
		}
		caps := m.Result.Capabilities
		tools, ok := caps["tools"]
		if _, logging := caps["logging"]; !ok || !logging || tools["listChanged"] == true {
			t.Fatalf("%s: capabilities %v", v, caps)
		}
	}
}
