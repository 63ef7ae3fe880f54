package fastapi

import (
	"encoding/json"
	"testing"
)

// README (Self-hosting, /mcp): "A page of a listed origin (a browser-based
// agent) can call it: its CORS preflight (OPTIONS /mcp) is answered, and
// every answer to it carries Access-Control-Allow-Origin". GET and DELETE
// /mcp (sent by browser MCP clients for the standalone SSE stream / session
// end) get the 405 without it, so the page cannot read the 405.
func TestMCP405CarriesCORS(t *testing.T) {
	e := newTestEnv(t)
	e.srv.cfg.MCPOrigins = []string{"https://agent.example"}
	for _, m := range []string{"GET", "DELETE"} {
		if ctx := e.serve(testRequest{method: m, uri: "/mcp", header: [][2]string{{"Origin", "https://evil.example"}}}); ctx.Response.StatusCode() != 403 ||
			len(ctx.Response.Header.Peek("Access-Control-Allow-Origin")) != 0 {
			t.Errorf("%s /mcp from an unlisted origin: %d, Access-Control-Allow-Origin %q", m, ctx.Response.StatusCode(), ctx.Response.Header.Peek("Access-Control-Allow-Origin"))
		}
		ctx := e.serve(testRequest{method: m, uri: "/mcp", header: [][2]string{{"Origin", "https://agent.example"}, {"Accept", "text/event-stream"}}})
		if got := string(ctx.Response.Header.Peek("Access-Control-Allow-Origin")); got != "https://agent.example" {
			t.Errorf("%s /mcp from a listed origin: %d, Access-Control-Allow-Origin %q: %s", m, ctx.Response.StatusCode(), got, ctx.Response.Body())
		}
	}
}

// README (API table): errors "on /mcp, JSON-RPC error objects". A body with
// a Content-Encoding that is not valid data, or one the server does not
// know, gets the REST {"error"} shape instead.
func TestMCPBodyCodingErrorIsJSONRPC(t *testing.T) {
	e := newTestEnv(t)
	for _, enc := range []string{"gzip", "compress"} {
		ctx := e.serve(testRequest{method: "POST", uri: "/mcp", body: []byte("not gzip"), header: [][2]string{
			{"Content-Type", "application/json"}, {"Accept", "application/json, text/event-stream"}, {"Content-Encoding", enc}}})
		var m struct {
			JSONRPC string          `json:"jsonrpc"`
			Error   json.RawMessage `json:"error"`
		}
		_ = json.Unmarshal(ctx.Response.Body(), &m)
		if m.JSONRPC != "2.0" || len(m.Error) == 0 || m.Error[0] != '{' {
			t.Errorf("Content-Encoding %s: %d %s, want a JSON-RPC error object", enc, ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
}
