package fastapi

import (
	"bytes"
	"encoding/json"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
)

// FuzzMCPAnonymous is FuzzMCPRequest without a credential (anyone may call
// /mcp), with the transport headers fuzzed too: Content-Type, Accept,
// MCP-Protocol-Version and Origin. Each call comes from a fresh public
// address so no per-address limit hides the paths. Never a 5xx, every
// answer but 202/204 is JSON, every error a JSON-RPC error object, and a
// lookup answers only the address the request's own lookup_ip names.
func FuzzMCPAnonymous(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup_ip","arguments":{"ip":"185.220.101.1"}}}`,
		`{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"lookup_ip","arguments":{"ip":"1.2.3.4:80"}},"Method":"ping"}`,
		`{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"f","version":"1"}}}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/list"}`, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, `{`, `[]`,
	} {
		f.Add([]byte(s), "application/json", "application/json, text/event-stream", "", "")
		f.Add([]byte(s), "Application/JSON; charset=utf-8", "*/*", "2025-06-18", "http://localhost")
	}
	e := newTestEnv(f)
	var n atomic.Uint32
	h := func(ctx *fasthttp.RequestCtx) {
		i := n.Add(1)
		ctx.SetRemoteAddr(net.TCPAddrFromAddrPort(netip.AddrPortFrom(netip.AddrFrom4([4]byte{73, byte(i >> 16), byte(i >> 8), byte(i)}), 5000)))
		e.srv.Handle(ctx)
	}
	ln := fasthttputil.NewInmemoryListener()
	srv := &fasthttp.Server{Handler: h}
	go srv.Serve(ln)
	f.Cleanup(func() { srv.Shutdown() })
	c := &fasthttp.Client{Dial: func(string) (net.Conn, error) { return ln.Dial() }}
	f.Fuzz(func(t *testing.T, body []byte, ctype, accept, version, origin string) {
		for _, v := range []string{ctype, accept, version, origin} {
			if strings.TrimSpace(v) != v || strings.IndexFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
				return // fasthttp refuses such a header before the handler runs
			}
		}
		req, resp := fasthttp.AcquireRequest(), new(fasthttp.Response)
		defer fasthttp.ReleaseRequest(req)
		req.Header.SetMethod("POST")
		req.SetRequestURI("http://mem/mcp")
		req.Header.Set("User-Agent", "unit-test/1")
		if ctype != "" {
			req.Header.SetContentType(ctype)
		}
		for _, kv := range [][2]string{{"Accept", accept}, {"Mcp-Protocol-Version", version}, {"Origin", origin}} {
			if kv[1] != "" {
				req.Header.Set(kv[0], kv[1])
			}
		}
		req.SetBody(body)
		if err := c.Do(req, resp); err != nil {
			t.Fatal(err)
		}
		st, out := resp.StatusCode(), resp.Body()
		if st == 202 || st == 204 {
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
		res, _ := m["result"].(map[string]any)
		sc, _ := res["structuredContent"].(map[string]any)
		if sc == nil && !bytes.Contains(out, []byte(`\"risk_score\":`)) {
			return
		}
		lookedUpAsked(t, body, out)
	})
}
