package fastapi

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/netip"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/bytedance/sonic"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/actors/iplimit"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/wire"
)

// mcpCallKey is the fasthttp user-value key under which handleMCP leaves what
// it decided about the request for the tool handlers (fasthttpadaptor hands
// the RequestCtx to net/http as the request's context).
const mcpCallKey = "fraudd.mcp.call"

// mcpCall is the caller and the pre-checked lookup of one MCP request.
type mcpCall struct {
	anonymous bool
	auth      accounts.Auth
	now       time.Time
	// checked: handleMCP read the request as one tools/call lookup_ip and
	// took its allowance for addr (or found ipErr). The SDK's tool handler
	// answers only a checked call, for that same address, once: whatever the
	// SDK's decoder reads differently from ours (case, duplicate keys,
	// trailing bytes) ends in an error, never in an unpaid or unchecked answer.
	checked bool
	addr    netip.Addr
	ipErr   error
	used    atomic.Bool
}

// rpcPeekJSON decodes the peek as the SDK decodes messages: object keys are
// case-sensitive (the SDK ignores "Method"; encoding/json-style matching would
// let it override "method" here and skip the allowance).
var rpcPeekJSON = sonic.Config{CaseSensitive: true, ValidateString: true}.Froze()

// errMCPUnchecked answers a lookup_ip the pre-check did not cover.
var errMCPUnchecked = errors.New("Invalid request: send one JSON-RPC request per POST.")

// JSON-RPC 2.0 error codes used on /mcp.
const rpcInvalidRequest = -32600

// mcpRoute is how an MCP request with a bearer authenticates: a live or test
// key or an OAuth token, the live allowlist applies, never the sandbox key.
var mcpRoute = &route{method: "POST", pattern: "/mcp", auth: authAPI}

// newMCP builds the stateless streamable-HTTP MCP endpoint with the SDK.
func (s *Server) newMCP() fasthttp.RequestHandler {
	srv := mcp.NewServer(&mcp.Implementation{Name: "fraudd", Version: s.cfg.Version}, nil)
	mcp.AddTool(srv, &mcp.Tool{
		Name: "lookup_ip",
		Description: "Look up a public IPv4 or IPv6 address: Tor exit or published cloud range, verdict (allow, review, block), " +
			"risk score and the network that owns it. The same answer as GET /v1/lookup/{ip}.",
	}, s.mcpLookup)
	mcp.AddTool(srv, &mcp.Tool{
		Name:        "service_status",
		Description: "The service's status: uptime, per-service health and version.",
	}, s.mcpStatus)
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
		Stateless:    true,
		JSONResponse: true,
		// The service authenticates callers itself and is usually reached
		// through a proxy on the same host, whose Host header is the public
		// name: the SDK's localhost DNS-rebinding guard would refuse those.
		DisableLocalhostProtection: true,
	})
	return fasthttpadaptor.NewFastHTTPHandler(h)
}

// LookupArgs is lookup_ip's input.
type LookupArgs struct {
	IP string `json:"ip" jsonschema:"the IPv4 or IPv6 address to look up (pasted forms such as 1.2.3.4:80 or a URL are read too)"`
}

// StatusArgs is service_status's (empty) input.
type StatusArgs struct{}

// mcpLookup is the SDK's lookup_ip handler. It answers only the lookup
// handleMCP checked and charged, and only for the address it charged.
func (s *Server) mcpLookup(ctx context.Context, _ *mcp.CallToolRequest, in LookupArgs) (*mcp.CallToolResult, wire.Lookup, error) {
	c, _ := ctx.Value(mcpCallKey).(*mcpCall)
	if c == nil || !c.checked || !c.used.CompareAndSwap(false, true) {
		return nil, wire.Lookup{}, errMCPUnchecked
	}
	if c.ipErr != nil {
		return nil, wire.Lookup{}, c.ipErr
	}
	if a, err := parsePublic(in.IP); err != nil || a != c.addr {
		return nil, wire.Lookup{}, errMCPUnchecked
	}
	return nil, s.lookupCall(c), nil
}

// lookupCall answers a checked lookup_ip call.
func (s *Server) lookupCall(c *mcpCall) wire.Lookup {
	start := time.Now()
	var ls lookupState
	b := s.deps.Feeds.Current().Bare(c.addr)
	fillLookup(&ls, c.addr, &b)
	if !c.anonymous {
		applyPins(&ls, c.addr, &c.auth.View.Policy)
		ls.resp.Test = c.auth.Kind == accounts.KeyTest
		if !ls.resp.Test {
			s.recordLookup(&request{now: c.now}, &b)
		}
	}
	ls.resp.LatencyMs = msSince(start)
	// The pointers in ls outlive this call inside the result; ls is not reused.
	return ls.resp
}

func (s *Server) mcpStatus(ctx context.Context, _ *mcp.CallToolRequest, _ StatusArgs) (*mcp.CallToolResult, wire.Status, error) {
	now := s.deps.Clock.Now()
	if c, _ := ctx.Value(mcpCallKey).(*mcpCall); c != nil {
		now = c.now
	}
	return nil, s.statusPayload(now), nil
}

// rpcPeek is the part of a JSON-RPC request handleMCP looks at before the SDK.
type rpcPeek struct {
	ID     sonic.NoCopyRawMessage `json:"id"`
	Method string                 `json:"method"`
	Params struct {
		Name      string `json:"name"`
		Arguments struct {
			IP sonic.NoCopyRawMessage `json:"ip"`
		} `json:"arguments"`
	} `json:"params"`
}

// handleMCP is POST /mcp (SPEC 4.11). It authenticates a bearer (an invalid
// one is 401, never anonymous), and for tools/call lookup_ip takes the same
// allowance as the HTTP lookups before the SDK runs the call: the account's
// quota for a key, the free tool's per-address limits when anonymous. A
// refusal is HTTP 429 with Retry-After and a JSON-RPC error carrying the wait.
// A JSON-RPC batch is refused whole: MCP 2025-06-18 removed batching, and one
// POST must cost one checked message.
func (s *Server) handleMCP(ctx *fasthttp.RequestCtx, r *request) {
	call := &mcpCall{anonymous: true, now: r.now}
	if len(bytes.TrimSpace(ctx.Request.Header.Peek("Authorization"))) > 0 {
		if !s.authenticate(ctx, r, mcpRoute) {
			return
		}
		call.anonymous, call.auth = false, r.auth
	}
	var peek rpcPeek
	body := bytes.TrimLeft(ctx.PostBody(), " \t\r\n")
	if len(body) > 0 && body[0] == '[' {
		s.rpcError(ctx, fasthttp.StatusBadRequest, nil, rpcInvalidRequest, "Batch requests are not supported.")
		return
	}
	if len(body) > 0 && body[0] == '{' && rpcPeekJSON.Unmarshal(body, &peek) == nil &&
		peek.Method == "tools/call" && peek.Params.Name == "lookup_ip" {
		raw, isString := jsonString(peek.Params.Arguments.IP)
		call.addr, call.ipErr = parsePublic(raw)
		call.checked = true
		if !s.mcpAllow(ctx, r, call, peek.ID) {
			return
		}
		if isString && s.mcpFastPath(ctx, call, peek.ID) {
			return
		}
	}
	ctx.SetUserValue(mcpCallKey, call)
	s.mcp(ctx)
}

// mcpFastPath answers a well-formed tools/call lookup_ip itself, with the
// bytes the SDK would send: through the SDK a stateless call costs ~370 µs of
// CPU (a session per request, JSON schema validation, large decode buffers),
// twenty times a whole GET /v1/lookup. Anything unusual — a missing id, a
// client that does not accept both JSON and SSE, another content type — goes
// to the SDK, which knows every corner of the protocol. A test checks both
// paths give the same answer.
func (s *Server) mcpFastPath(ctx *fasthttp.RequestCtx, call *mcpCall, id sonic.NoCopyRawMessage) bool {
	accept := ctx.Request.Header.Peek("Accept")
	if isAbsent(id) || !bytes.Contains(accept, []byte("application/json")) || !bytes.Contains(accept, []byte("text/event-stream")) ||
		!bytes.HasPrefix(bytes.ToLower(ctx.Request.Header.ContentType()), []byte("application/json")) {
		return false
	}
	res := wire.RPCToolResult{JSONRPC: "2.0", ID: []byte(id)}
	if call.ipErr != nil {
		res.Result.IsError = true
		res.Result.Content = []wire.RPCText{{Type: "text", Text: call.ipErr.Error()}}
	} else {
		out := s.lookupCall(call)
		text, err := sonic.ConfigStd.Marshal(&out)
		if err != nil {
			return false
		}
		res.Result.Content = []wire.RPCText{{Type: "text", Text: string(text)}}
		res.Result.StructuredContent = &out
	}
	s.writeJSON(ctx, fasthttp.StatusOK, &res)
	return true
}

// mcpAllow takes the lookup's allowance; on a refusal it answers and returns false.
func (s *Server) mcpAllow(ctx *fasthttp.RequestCtx, r *request, call *mcpCall, id sonic.NoCopyRawMessage) bool {
	valid := call.ipErr == nil
	if call.anonymous {
		kind := iplimit.LookupFree
		if !valid {
			kind = iplimit.LookupFreeInvalid
		}
		v, err := s.deps.Limits.Take(iplimit.Of(kind), r.client, r.now)
		if err != nil {
			s.serverError(ctx, "mcp limits", err)
			return false
		}
		if !v.Allowed {
			s.rpcRefusal(ctx, id, fasthttp.StatusTooManyRequests, v.RetryAfter, msgTooMany)
		}
		return v.Allowed
	}
	res, err := s.chargeOnly(r, quota.Lookup, valid, valid && r.auth.Kind != accounts.KeyTest)
	if err != nil {
		s.log.Error("quota charge failed", "err", err, "account", r.auth.View.ID)
		s.rpcRefusal(ctx, id, fasthttp.StatusServiceUnavailable, retryAfterStorage, msgStorage)
		return false
	}
	if res.Capped {
		h := &ctx.Response.Header
		h.Set(headerRLLimit, strconv.FormatInt(res.Limit, 10))
		h.Set(headerRLRemaining, strconv.FormatInt(res.Remaining, 10))
		h.Set(headerRLReset, strconv.FormatInt(res.Reset, 10))
	}
	switch res.Refusal {
	case quota.RefusedMonthly:
		s.rpcRefusal(ctx, id, fasthttp.StatusTooManyRequests, res.RetryAfter, "Monthly lookup allowance used up.")
		return false
	case quota.RefusedHourly:
		s.rpcRefusal(ctx, id, fasthttp.StatusTooManyRequests, res.RetryAfter, "Hourly request limit reached.")
		return false
	}
	return true
}

// rpcError answers a JSON-RPC error with the HTTP status; a nil id is sent as
// null (the request's id is unknown or unreadable).
func (s *Server) rpcError(ctx *fasthttp.RequestCtx, status int, id sonic.NoCopyRawMessage, code int, msg string) {
	if len(id) == 0 {
		id = sonic.NoCopyRawMessage("null")
	}
	s.writeJSON(ctx, status, &wire.RPCError{JSONRPC: "2.0", ID: []byte(id), Error: wire.RPCErrorBody{Code: code, Message: msg}})
}

// rpcRefusal answers a JSON-RPC error with the HTTP status and Retry-After.
func (s *Server) rpcRefusal(ctx *fasthttp.RequestCtx, id sonic.NoCopyRawMessage, status int, retryAfter int64, msg string) {
	if len(id) == 0 {
		id = sonic.NoCopyRawMessage("null")
	}
	ctx.Response.Header.Set(headerRetryAfter, strconv.FormatInt(retryAfter, 10))
	s.writeJSON(ctx, status, &wire.RPCError{JSONRPC: "2.0", ID: []byte(id), Error: wire.RPCErrorBody{
		Code: -32000, Message: msg, Data: &wire.RPCRetry{RetryAfter: retryAfter},
	}})
}
