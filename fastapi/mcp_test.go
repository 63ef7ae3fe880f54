package fastapi

import (
	"encoding/json"
	"net"
	"reflect"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/fraudd/fraudd/actors/checks"
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
