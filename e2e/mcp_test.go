package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// bearerTransport adds headers to every request of the MCP client.
type bearerTransport struct {
	token string
	xff   string
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	if b.xff != "" {
		r.Header.Set("X-Forwarded-For", b.xff)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func mcpSession(t *testing.T, s *Server, token, xff string) *mcp.ClientSession {
	t.Helper()
	return mcpSessionAt(t, s, token, xff, "")
}

// mcpSessionAt is mcpSession at a protocol version ("" is the SDK's latest:
// 2026-07-28's server/discover, falling back to initialize).
func mcpSessionAt(t *testing.T, s *Server, token, xff, version string) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	c := mcp.NewClient(&mcp.Implementation{Name: "fraudd-e2e", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: s.URL + "/mcp", DisableStandaloneSSE: true, MaxRetries: -1,
		HTTPClient: &http.Client{Transport: bearerTransport{token, xff}, Timeout: 20 * time.Second},
	}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, s.Logs())
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func callLookup(t *testing.T, cs *mcp.ClientSession, ip string) (*mcp.CallToolResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return cs.CallTool(ctx, &mcp.CallToolParams{Name: "lookup_ip", Arguments: map[string]any{"ip": ip}})
}

func TestMCPLookupAndStatus(t *testing.T) {
	s := Start(t, bin)
	a := s.CreateAccount(t, map[string]any{"email": "mcp@example.com", "plan": "starter"})

	cs := mcpSession(t, s, a.LiveKey, "")
	// The SDK's client speaks the current revision (2026-07-28, stateless:
	// server/discover, no initialize) when the server answers server/discover.
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("negotiated %s, want 2026-07-28", v)
	}
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{}
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	if strings.Join(names, ",") != "lookup_ip,service_status" && strings.Join(names, ",") != "service_status,lookup_ip" {
		t.Fatalf("tools: %v", names)
	}
	res, err := callLookup(t, cs, "52.95.110.1")
	if err != nil || res.IsError {
		t.Fatalf("lookup_ip: %v %+v", err, res)
	}
	// Structured content and text content carry the same lookup JSON.
	sc, _ := json.Marshal(res.StructuredContent)
	var got map[string]any
	json.Unmarshal(sc, &got)
	if got["verdict"] != "review" || got["network"].(map[string]any)["cloud"] != "aws" {
		t.Fatalf("structured content: %s", sc)
	}
	if len(res.Content) == 0 || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, `"verdict":"review"`) {
		t.Fatalf("text content: %+v", res.Content)
	}
	// It is charged like GET /v1/lookup.
	if u := s.Do(t, Req{Path: "/v1/usage", Bearer: a.LiveKey}).JSON(t); num(t, u, "month_lookups_used") != 1 {
		t.Fatalf("usage after an MCP lookup: %v", u)
	}
	res, err = callLookup(t, cs, "10.1.2.3")
	if err != nil || !res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "Private or reserved") {
		t.Fatalf("private address: %v %+v", err, res)
	}
	st, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "service_status", Arguments: map[string]any{}})
	if err != nil || st.IsError || !strings.Contains(st.Content[0].(*mcp.TextContent).Text, `"status":"operational"`) {
		t.Fatalf("service_status: %v %+v", err, st)
	}
	// A client of the previous revision (initialize) gets the same answer.
	legacy := mcpSessionAt(t, s, a.LiveKey, "", "2025-11-25")
	if v := legacy.InitializeResult().ProtocolVersion; v != "2025-11-25" {
		t.Fatalf("2025-11-25 client negotiated %s", v)
	}
	res, err = callLookup(t, legacy, "52.95.110.1")
	if err != nil || res.IsError {
		t.Fatalf("2025-11-25 lookup_ip: %v %+v", err, res)
	}
	if sc, _ := json.Marshal(res.StructuredContent); !strings.Contains(string(sc), `"verdict":"review"`) {
		t.Fatalf("2025-11-25 structured content: %s", sc)
	}
	if u := s.Do(t, Req{Path: "/v1/usage", Bearer: a.LiveKey}).JSON(t); num(t, u, "month_lookups_used") != 2 {
		t.Fatalf("usage after two MCP lookups: %v", u)
	}

	// Anonymous use shares the free tool's per-address limit (12 a minute).
	anon := mcpSession(t, s, "", "198.51.100.60")
	for i := 0; i < 12; i++ {
		if res, err := callLookup(t, anon, "1.1.1.1"); err != nil || res.IsError {
			t.Fatalf("anonymous lookup %d: %v %+v", i, err, res)
		}
	}
	if _, err := callLookup(t, anon, "1.1.1.1"); err == nil || !strings.Contains(strings.ToLower(err.Error()), "too many") {
		t.Fatalf("13th anonymous lookup should be refused: %v", err)
	}
	// The refusal on the wire: HTTP 429, Retry-After, a JSON-RPC error with the wait.
	r := s.Do(t, Req{Method: "POST", Path: "/mcp", Header: map[string]string{"X-Forwarded-For": "198.51.100.60", "Accept": "application/json, text/event-stream", "Content-Type": "application/json"},
		Body: `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"lookup_ip","arguments":{"ip":"1.1.1.1"}}}`})
	if r.Status != 429 || r.Header.Get("Retry-After") == "" || !strings.Contains(string(r.Body), `"retry_after"`) || !strings.Contains(string(r.Body), `"id":7`) {
		t.Fatalf("raw refusal: %d %v %s", r.Status, r.Header, r.Body)
	}
	// An invalid bearer is 401, never anonymous.
	r = s.Do(t, Req{Method: "POST", Path: "/mcp", Bearer: "sk_live_wrong", Body: `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`})
	if r.Status != 401 {
		t.Fatalf("invalid bearer: %d %s", r.Status, r.Body)
	}
	// No User-Agent is fine on /mcp (agent clients often send none).
	r = s.Do(t, Req{Method: "POST", Path: "/mcp", NoAgent: true, Header: map[string]string{"Accept": "application/json, text/event-stream", "Content-Type": "application/json"},
		Body: `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`})
	if r.Status != 200 {
		t.Fatalf("no user agent on /mcp: %d %s", r.Status, r.Body)
	}
}
