package fastapi

import (
	"encoding/json"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/fraudd/fraudd/actors/events"
	"github.com/fraudd/fraudd/intel/nettoken"
)

// FuzzPublicRequest sends what anyone on the internet can send, without an
// API key (with the account's publishable key when withPK): any method,
// path, body and the headers the unauthenticated routes read, through a
// real fasthttp server (the MCP SDK needs one). Each call comes from a
// fresh public address, or from a trusted proxy that forwards for whoever
// X-Forwarded-For names. The service never answers 5xx but 503 (a handler
// panic is a 500), and every JSON error body is JSON.
func FuzzPublicRequest(f *testing.F) {
	for _, s := range []struct{ m, path, ct, accept, origin, body string }{
		{"POST", "/api/lookup", "application/json", "", "", `{"ip":"1.1.1.1"}`},
		{"POST", "/api/lookup-bulk", "", "", "", `{"ips":["1.1.1.1","8.8.8.8:53"]}`},
		{"GET", "/v1/lookup/1.1.1.1", "", "", "", ""},
		{"POST", "/v1/collect/network", "text/plain", "", "https://shop.example", `{"v":1,"webrtc":{"status":"ok","addrs":["1.1.1.1","2606:4700::1111"]}}`},
		{"POST", "/v1/collect/device", "text/plain", "", "https://shop.example", `{"v":1,"ua":"Mozilla/5.0","screen":[1,2,3,4],"uad":{"brands":[{"brand":"x"}]}}`},
		{"POST", "/mcp", "application/json", "application/json, text/event-stream", "", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup_ip","arguments":{"ip":"1.1.1.1"}}}`},
		{"OPTIONS", "/mcp", "", "", "http://localhost:8080", ""},
		{"POST", "/oauth/token", "application/x-www-form-urlencoded", "", "", "grant_type=client_credentials"},
		{"GET", "/console/app.js", "", "", "", ""},
		{"POST", "/v1/evaluate", "application/json", "", "", `{"token":"nt1.x"}`},
	} {
		f.Add(s.m, s.path, s.ct, s.accept, s.origin, "gzip;q=0.5", "203.0.113.9, 10.0.0.2", false, true, []byte(s.body))
	}
	e := newTestEnv(f)
	sys := actor.NewActorSystem()
	devs := events.New(sys.Root, events.Config{Shards: 2})
	f.Cleanup(func() { devs.Stop(); sys.Shutdown() })
	e.srv.deps.NetTokens = nettoken.New([]byte("network-token-unit-key-000000000"))
	e.srv.deps.Devices = devs
	e.srv.deps.VisitorKey = []byte("visitor-id-unit-key")
	e.srv.cfg.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	e.srv.rewire()
	pk := e.acct.PublishableKey
	var calls atomic.Uint32
	h := func(ctx *fasthttp.RequestCtx) {
		i := calls.Add(1)
		remote := netip.AddrFrom4([4]byte{73, byte(i >> 16), byte(i >> 8), byte(i)})
		if len(ctx.Request.Header.Peek("X-Test-Proxy")) > 0 {
			remote = netip.AddrFrom4([4]byte{10, 0, 0, 2})
		}
		ctx.SetRemoteAddr(net.TCPAddrFromAddrPort(netip.AddrPortFrom(remote, 4000)))
		e.srv.Handle(ctx)
	}
	ln := fasthttputil.NewInmemoryListener()
	srv := &fasthttp.Server{Handler: h, ErrorHandler: e.srv.handleParseError}
	go srv.Serve(ln)
	f.Cleanup(func() { srv.Shutdown() })
	c := &fasthttp.Client{Dial: func(string) (net.Conn, error) { return ln.Dial() }}
	f.Fuzz(func(t *testing.T, method, path, ctype, accept, origin, acceptEnc, xff string, viaProxy, withPK bool, body []byte) {
		if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, "?# ") || len(path) > 200 {
			return
		}
		switch method {
		case "GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS":
		default:
			return
		}
		for _, v := range []string{path, ctype, accept, origin, acceptEnc, xff} {
			if strings.TrimSpace(v) != v || strings.IndexFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
				return // fasthttp refuses such a request line or header before any handler
			}
		}
		req, resp := fasthttp.AcquireRequest(), new(fasthttp.Response)
		defer fasthttp.ReleaseRequest(req)
		req.Header.SetMethod(method)
		req.SetRequestURI("http://api.example" + path)
		req.Header.Set("User-Agent", "Mozilla/5.0 fuzz")
		if ctype != "" {
			req.Header.SetContentType(ctype)
		}
		for _, kv := range [][2]string{{"Accept", accept}, {"Origin", origin}, {"Accept-Encoding", acceptEnc}, {"X-Forwarded-For", xff}} {
			if kv[1] != "" {
				req.Header.Set(kv[0], kv[1])
			}
		}
		if viaProxy {
			req.Header.Set("X-Test-Proxy", "1")
		}
		if withPK {
			req.Header.Set("X-Publishable-Key", pk)
		}
		req.SetBody(body)
		if err := c.Do(req, resp); err != nil {
			t.Fatal(err)
		}
		st := resp.StatusCode()
		if st >= 500 && st != 503 {
			t.Fatalf("%s %s %q: %d %s", method, path, body, st, resp.Body())
		}
		if st >= 400 && len(resp.Header.ContentEncoding()) == 0 && strings.HasPrefix(string(resp.Header.ContentType()), "application/json") && !json.Valid(resp.Body()) {
			t.Fatalf("%s %s: %d with a body that is not JSON: %q", method, path, st, resp.Body())
		}
	})
}
