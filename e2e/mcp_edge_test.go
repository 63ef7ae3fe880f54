package e2e

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// mcpHeaders are what a streamable-HTTP MCP client sends with every POST.
func mcpHeaders(extra map[string]string) map[string]string {
	h := map[string]string{"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
	for k, v := range extra {
		h[k] = v
	}
	return h
}

// rpcError decodes a JSON-RPC error response and returns its code (failing
// the test when the body is anything else).
func rpcError(t *testing.T, r *Response) (code int, msg string) {
	t.Helper()
	var m struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  json.RawMessage `json:"result"`
		Error   *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.Body, &m); err != nil || m.JSONRPC != "2.0" || m.Error == nil || m.Result != nil || len(m.ID) == 0 {
		t.Fatalf("not a JSON-RPC error (status %d, %v): %s", r.Status, err, r.Body)
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("JSON-RPC error with Content-Type %q: %s", ct, r.Body)
	}
	return m.Error.Code, m.Error.Message
}

// feedTotal is today's total of the public threat feed once a control lookup
// made after the requests under test has been counted: the feed counts
// asynchronously, so waiting for the control makes "nothing else counted"
// deterministic.
func feedTotalAfterControl(t *testing.T, s *Server, key string, before int64) int64 {
	t.Helper()
	if r := s.Do(t, Req{Path: "/v1/lookup/8.8.8.8", Bearer: key}); r.Status != 200 {
		t.Fatalf("control lookup: %d %s", r.Status, r.Body)
	}
	var total int64
	for i := 0; i < 200; i++ {
		m := s.Do(t, Req{Path: "/api/threat-feed"}).JSON(t)
		total = num(t, m["today"].(map[string]any), "total")
		if total > before {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return total
}

// TestMCPBatchRefused: MCP 2025-06-18 removed JSON-RPC batching. A batch used
// to skip the allowance and the address check, so lookup_ip answered allow
// for a Tor exit, charged nothing and still counted into the threat feed.
// Every batch now gets one small -32600 error, whatever it holds.
func TestMCPBatchRefused(t *testing.T) {
	s := Start(t, bin)
	a := s.CreateAccount(t, map[string]any{"email": "batch@example.com", "plan": "starter"})
	tor := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup_ip","arguments":{"ip":"185.220.101.1"}}}`
	for _, tc := range []struct {
		name, bearer, xff, body string
	}{
		{"keyed", a.LiveKey, "", "[" + tor + "]"},
		{"anonymous", "", "198.51.100.70", "[" + tor + "]"},
		{"leading space", a.LiveKey, "", " \r\n\t[" + tor + "," + tor + "]"},
		{"empty", "", "198.51.100.70", "[]"},
	} {
		r := s.Do(t, Req{Method: "POST", Path: "/mcp", Bearer: tc.bearer, Header: mcpHeaders(map[string]string{"X-Forwarded-For": tc.xff}), Body: tc.body})
		if r.Status != 400 || strings.Contains(string(r.Body), "verdict") {
			t.Fatalf("%s: batch answered %d %s", tc.name, r.Status, r.Body)
		}
		if code, msg := rpcError(t, r); code != -32600 || !strings.Contains(strings.ToLower(msg), "batch") {
			t.Fatalf("%s: batch error %d %q", tc.name, code, msg)
		}
	}
	// Bodies our pre-check and the SDK's decoder used to read differently:
	// trailing bytes are never an unchecked answer; a key in another case is
	// ignored by both, so the call is checked and charged like any other.
	r := s.Do(t, Req{Method: "POST", Path: "/mcp", Bearer: a.LiveKey, Header: mcpHeaders(nil), Body: tor + ` garbage`})
	if strings.Contains(string(r.Body), "verdict") {
		t.Fatalf("trailing bytes: answered %d %s", r.Status, r.Body)
	}
	r = s.Do(t, Req{Method: "POST", Path: "/mcp", Bearer: a.LiveKey, Header: mcpHeaders(nil), Body: strings.TrimSuffix(tor, "}") + `,"Method":"ping"}`})
	if !strings.Contains(string(r.Body), `"verdict":"block"`) {
		t.Fatalf("a second key in another case: answered %d %s", r.Status, r.Body)
	}
	if u := s.Do(t, Req{Path: "/v1/usage", Bearer: a.LiveKey}).JSON(t); num(t, u, "month_lookups_used") != 1 || num(t, u, "total_evaluations") != 1 {
		t.Fatalf("only the one checked call is charged: %v", u)
	}
	if total := feedTotalAfterControl(t, s, a.LiveKey, 1); total != 2 {
		t.Fatalf("threat feed counted %d lookups, want the checked call and the control", total)
	}

	// The work one request can cause is one message: an anonymous 64 KB
	// batch of tools/list used to return megabytes.
	var big strings.Builder
	big.WriteString("[")
	for i := 0; big.Len() < 60<<10; i++ {
		if i > 0 {
			big.WriteString(",")
		}
		big.WriteString(`{"jsonrpc":"2.0","id":` + itoa(i) + `,"method":"tools/list"}`)
	}
	big.WriteString("]")
	r = s.Do(t, Req{Method: "POST", Path: "/mcp", Header: mcpHeaders(map[string]string{"X-Forwarded-For": "198.51.100.71"}), Body: big.String()})
	if r.Status != 400 || len(r.Body) > 512 {
		t.Fatalf("large batch: %d, %d bytes", r.Status, len(r.Body))
	}
}

// TestMCPJSONRPCErrors: every error on /mcp is a JSON-RPC error object (it
// used to be HTTP 400 with plain text): -32700 for malformed JSON and -32600
// for anything that is not one request object (HTTP 400, id null, as the
// transport cannot accept the input); -32601 with the request's id for an
// unknown method (HTTP 200, a JSON-RPC answer); transport refusals as -32000.
func TestMCPJSONRPCErrors(t *testing.T) {
	s := Start(t, bin)
	post := func(body string, h map[string]string) *Response {
		return s.Do(t, Req{Method: "POST", Path: "/mcp", Header: h, Body: body})
	}
	for _, tc := range []struct {
		name   string
		body   string
		header map[string]string
		status int
		code   int
		id     string
	}{
		{"malformed", `{"jsonrpc":"2.0","id":1,"method":`, mcpHeaders(nil), 400, -32700, "null"},
		{"empty", ``, mcpHeaders(nil), 400, -32700, "null"},
		{"trailing bytes", `{"jsonrpc":"2.0","id":1,"method":"ping"} x`, mcpHeaders(nil), 400, -32700, "null"},
		{"not an object", `5`, mcpHeaders(nil), 400, -32600, "null"},
		{"wrong version", `{"jsonrpc":"1.0","id":3,"method":"ping"}`, mcpHeaders(nil), 400, -32600, "3"},
		{"method not a string", `{"jsonrpc":"2.0","id":"a","method":7}`, mcpHeaders(nil), 400, -32600, `"a"`},
		{"unknown method", `{"jsonrpc":"2.0","id":5,"method":"foo/bar"}`, mcpHeaders(nil), 200, -32601, "5"},
		{"not offered", `{"jsonrpc":"2.0","id":"x","method":"subscriptions/listen","params":{}}`, mcpHeaders(nil), 200, -32601, `"x"`},
		{"request without id (SDK)", `{"jsonrpc":"2.0","method":"tools/list"}`, mcpHeaders(nil), 400, -32600, "null"},
		{"unsupported version (SDK)", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, mcpHeaders(map[string]string{"Mcp-Protocol-Version": "1999-01-01"}), 400, -32600, "1"},
		{"content type", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, map[string]string{"Accept": "application/json, text/event-stream", "Content-Type": "text/plain"}, 415, -32000, "null"},
		{"no content type", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, map[string]string{"Accept": "application/json, text/event-stream"}, 415, -32000, "null"},
		{"accept", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, map[string]string{"Accept": "application/json", "Content-Type": "application/json"}, 406, -32000, "null"},
		{"no accept", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, map[string]string{"Content-Type": "application/json"}, 406, -32000, "null"},
	} {
		r := post(tc.body, tc.header)
		if r.Status != tc.status {
			t.Fatalf("%s: status %d, want %d: %s", tc.name, r.Status, tc.status, r.Body)
		}
		code, _ := rpcError(t, r)
		var m struct {
			ID json.RawMessage `json:"id"`
		}
		json.Unmarshal(r.Body, &m)
		if code != tc.code || string(m.ID) != tc.id {
			t.Fatalf("%s: code %d id %s, want %d %s: %s", tc.name, code, m.ID, tc.code, tc.id, r.Body)
		}
	}
	for _, method := range []string{"GET", "DELETE", "PUT"} {
		r := s.Do(t, Req{Method: method, Path: "/mcp", Header: mcpHeaders(nil)})
		if r.Status != 405 || r.Header.Get("Allow") != "POST, OPTIONS" {
			t.Fatalf("%s /mcp: %d Allow=%q %s", method, r.Status, r.Header.Get("Allow"), r.Body)
		}
		if code, _ := rpcError(t, r); code != -32000 {
			t.Fatalf("%s /mcp: code %d", method, code)
		}
	}
	// An unknown notification is accepted and ignored; a known request works.
	if r := post(`{"jsonrpc":"2.0","method":"notifications/whatever"}`, mcpHeaders(nil)); r.Status != 202 || len(r.Body) != 0 {
		t.Fatalf("unknown notification: %d %s", r.Status, r.Body)
	}
	if r := post(`{"jsonrpc":"2.0","id":9,"method":"ping"}`, mcpHeaders(nil)); r.Status != 200 || !strings.Contains(string(r.Body), `"result"`) {
		t.Fatalf("ping: %d %s", r.Status, r.Body)
	}
}

// initializeBody is the conformance suite's initialize request.
const initializeBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"conformance-dns-rebinding-test","version":"1.0.0"}}}`

// TestMCPOriginAndHost: a foreign Origin and a foreign Host both used to get
// 200. The checks of the conformance scenario dns-rebinding-protection (Host
// and Origin both evil.example.com: 4xx; both the server's own loopback
// address: 2xx), the operator's --mcp-origins, and the Host check on direct
// loopback connections.
func TestMCPOriginAndHost(t *testing.T) {
	s := Start(t, bin, "--mcp-origins", "https://agent.example, http://localhost:3000")
	own := strings.TrimPrefix(s.URL, "http://")
	port := own[strings.LastIndexByte(own, ':'):]
	send := func(s *Server, host, origin string) *Response {
		h := mcpHeaders(nil)
		if host != "" {
			h["Host"] = host
		}
		if origin != "" {
			h["Origin"] = origin
		}
		return s.Do(t, Req{Method: "POST", Path: "/mcp", Header: h, Body: initializeBody})
	}
	refused := func(r *Response, what string) {
		t.Helper()
		if r.Status != 403 || strings.Contains(string(r.Body), `"result"`) {
			t.Fatalf("%s: %d %s", what, r.Status, r.Body)
		}
		if code, _ := rpcError(t, r); code != -32000 {
			t.Fatalf("%s: code %d", what, code)
		}
	}
	accepted := func(r *Response, what string) {
		t.Helper()
		if r.Status != 200 || !strings.Contains(string(r.Body), `"protocolVersion"`) {
			t.Fatalf("%s: %d %s", what, r.Status, r.Body)
		}
	}
	// The conformance scenario's two requests.
	refused(send(s, "evil.example.com", "http://evil.example.com"), "rebinding Host and Origin")
	accepted(send(s, own, "http://"+own), "own loopback Host and Origin")
	accepted(send(s, "localhost"+port, "http://localhost"+port), "localhost")
	// No Origin: a server-to-server client. The harness's peer is a trusted
	// proxy, whose Host is the public name.
	accepted(send(s, "", ""), "no Origin")
	accepted(send(s, "fraud.example.com", ""), "public name through a trusted proxy")
	// The operator's origins, compared canonically; nothing else.
	accepted(send(s, "fraud.example.com", "https://agent.example"), "listed origin")
	accepted(send(s, "fraud.example.com", "https://AGENT.example:443"), "listed origin, spelled otherwise")
	accepted(send(s, "fraud.example.com", "http://localhost:3000"), "listed localhost origin")
	refused(send(s, "fraud.example.com", "https://agent.example.evil.com"), "lookalike origin")
	refused(send(s, "fraud.example.com", "http://agent.example"), "listed host, other scheme")
	refused(send(s, "fraud.example.com", "null"), "null origin")
	refused(send(s, "fraud.example.com", "https://agent.example/path"), "not an origin")
	refused(send(s, own, "http://127.0.0.1:1"), "another loopback port")
	refused(send(s, "evil.example.com", "http://"+own), "own origin, foreign Host")

	// A browser-based agent of a listed origin: its preflight is allowed
	// with the headers an MCP client sends, and the page may read the
	// answer (errors too) with the headers it needs; another origin's
	// preflight is refused, and a server-to-server call gets no CORS.
	preflight := func(origin string) *Response {
		return s.Do(t, Req{Method: "OPTIONS", Path: "/mcp", Header: map[string]string{"Host": "fraud.example.com", "Origin": origin,
			"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization, content-type, mcp-protocol-version"}})
	}
	if r := preflight("https://agent.example"); r.Status != 204 || r.Header.Get("Access-Control-Allow-Origin") != "https://agent.example" ||
		!strings.Contains(r.Header.Get("Access-Control-Allow-Methods"), "POST") ||
		!strings.Contains(r.Header.Get("Access-Control-Allow-Headers"), "Authorization") ||
		!strings.Contains(r.Header.Get("Access-Control-Allow-Headers"), "MCP-Protocol-Version") {
		t.Fatalf("preflight of a listed origin: %d %v", r.Status, r.Header)
	}
	if r := preflight("https://agent.example.evil.com"); r.Status != 403 || r.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("preflight of another origin: %d %v", r.Status, r.Header)
	}
	r := send(s, "fraud.example.com", "https://agent.example")
	if r.Header.Get("Access-Control-Allow-Origin") != "https://agent.example" ||
		!strings.Contains(r.Header.Get("Access-Control-Expose-Headers"), "Mcp-Session-Id") {
		t.Fatalf("answer to a listed origin: %v", r.Header)
	}
	if r := send(s, "fraud.example.com", ""); r.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("a call without Origin got CORS headers: %v", r.Header)
	}

	// A browser reaching a loopback listener directly (no trusted proxy in
	// between) must name the loopback in Host, with or without an Origin.
	d := Start(t, bin, "--trusted-proxies", "192.0.2.0/24")
	dOwn := strings.TrimPrefix(d.URL, "http://")
	dPort := dOwn[strings.LastIndexByte(dOwn, ':'):]
	refused(send(d, "evil.example.com", ""), "foreign Host, direct to loopback")
	refused(send(d, "evil.example.com"+dPort, ""), "foreign Host with port")
	accepted(send(d, dOwn, ""), "own address")
	accepted(send(d, "localhost"+dPort, ""), "localhost")
	accepted(send(d, "[::1]"+dPort, ""), "[::1]")
	// The API elsewhere is not affected.
	if r := d.Do(t, Req{Path: "/api/status", Header: map[string]string{"Host": "evil.example.com"}}); r.Status != 200 {
		t.Fatalf("status with another Host: %d", r.Status)
	}

	// A malformed --mcp-origins stops the start with one clear line.
	out, err := exec.Command(bin, "serve", "--data-dir", t.TempDir(), "--mcp-origins", "https://agent.example/app").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "--mcp-origins") {
		t.Fatalf("bad --mcp-origins: %v %s", err, out)
	}
}

// TestMCPConformanceDNSRebinding runs the official MCP conformance scenario
// dns-rebinding-protection against a loopback fraudd. It needs node and npx
// (and npm's registry, or the package in npx's cache) and skips without them.
// 0.1.12 is the newest release that runs on Node 20 (later ones need Node
// 22's fs.globSync); its scenario is the one 0.1.16 ships.
func TestMCPConformanceDNSRebinding(t *testing.T) {
	npx, err := exec.LookPath("npx")
	if err != nil {
		t.Skip("npx not found: the MCP conformance suite (npm @modelcontextprotocol/conformance) needs Node.js; TestMCPOriginAndHost repeats its checks")
	}
	s := Start(t, bin)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npx, "--yes", "@modelcontextprotocol/conformance@0.1.12",
		"server", "--url", s.URL+"/mcp", "--scenario", "dns-rebinding-protection")
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	text := string(out)
	if err != nil && !strings.Contains(text, "Test Results:") {
		for _, offline := range []string{"ENOTFOUND", "EAI_AGAIN", "ETIMEDOUT", "ECONNREFUSED", "ENETUNREACH", "npm error code E"} {
			if strings.Contains(text, offline) {
				t.Skipf("the conformance suite could not be fetched (%s):\n%s", offline, text)
			}
		}
		t.Fatalf("conformance suite did not run: %v\n%s", err, text)
	}
	if err != nil || !strings.Contains(text, "Passed: 2/2, 0 failed") {
		t.Fatalf("dns-rebinding-protection: %v\n%s\n%s", err, text, s.Logs())
	}
}
