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

	"github.com/fraudd/fraudd/actors/checks"
	"github.com/fraudd/fraudd/wire"
)

// mcpCallKey is the fasthttp user-value key under which handleMCP leaves what
// it decided about the request for the tool handlers (fasthttpadaptor hands
// the RequestCtx to net/http as the request's context).
const mcpCallKey = "fraudd.mcp.call"

// mcpCall is what handleMCP prepared for the SDK's tool handlers: the
// request's time and, for a tools/call lookup_ip, the pipeline's answer.
type mcpCall struct {
	now time.Time
	// checked: handleMCP read the request as one tools/call lookup_ip for
	// addr and got the pipeline's answer (charged): lookup, or toolErr when
	// the argument is not one public address. The SDK's tool handler answers
	// only a checked call, for that same address, once: whatever the SDK's
	// decoder reads differently from ours (case, duplicate keys, trailing
	// bytes) ends in an error, never in an unpaid or unchecked answer.
	checked bool
	addr    netip.Addr
	lookup  *wire.Lookup
	toolErr error
	used    atomic.Bool
}

// rpcPeekJSON decodes the peek as the SDK decodes messages: object keys are
// case-sensitive (the SDK ignores "Method"; encoding/json-style matching would
// let it override "method" here and skip the allowance).
var rpcPeekJSON = sonic.Config{CaseSensitive: true, ValidateString: true}.Froze()

// errMCPUnchecked answers a lookup_ip the pre-check did not cover.
var errMCPUnchecked = errors.New(checks.MsgRPCUnchecked)

// JSON-RPC 2.0 error codes used on /mcp.
const rpcInvalidRequest = -32600

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
	if c.toolErr != nil {
		return nil, wire.Lookup{}, c.toolErr
	}
	if t := checks.PastedTarget(in.IP); !t.OK() || t.Addr != c.addr {
		return nil, wire.Lookup{}, errMCPUnchecked
	}
	return nil, *c.lookup, nil
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
// one is 401, never anonymous), and for tools/call lookup_ip runs the
// pipeline's lookup before the SDK does anything: Lookup with a key,
// FreeLookup (the free tool's per-address limits) when anonymous — the same
// functions as GET /v1/lookup and POST /api/lookup. A refusal is a JSON-RPC
// error with the HTTP status and Retry-After (rpcRefusal). A JSON-RPC batch
// is refused whole: MCP 2025-06-18 removed batching, and one POST must cost
// one checked message.
func (s *Server) handleMCP(ctx *fasthttp.RequestCtx, r *request) {
	anonymous := true
	if len(bytes.TrimSpace(ctx.Request.Header.Peek("Authorization"))) > 0 {
		if ref := s.checks.Admit(&r.Call, credential(ctx.Request.Header.Peek("Authorization")), checks.AccessMCP); ref != nil {
			s.refuse(ctx, ref)
			return
		}
		anonymous = false
	}
	call := &mcpCall{now: r.Now}
	var peek rpcPeek
	body := bytes.TrimLeft(ctx.PostBody(), " \t\r\n")
	if len(body) > 0 && body[0] == '[' {
		s.rpcError(ctx, fasthttp.StatusBadRequest, nil, rpcInvalidRequest, checks.MsgRPCBatch)
		return
	}
	if len(body) > 0 && body[0] == '{' && rpcPeekJSON.Unmarshal(body, &peek) == nil &&
		peek.Method == "tools/call" && peek.Params.Name == "lookup_ip" {
		raw, isString := jsonString(peek.Params.Arguments.IP)
		if ref := s.mcpPrepare(r, call, anonymous, raw); ref != nil {
			s.rpcRefusal(ctx, peek.ID, ref)
			return
		}
		setRateLimit(&ctx.Response.Header, r.RateLimit)
		if isString && mcpFastPathFits(ctx, peek.ID) {
			if res, err := fastPathResult(call, peek.ID); err == nil {
				s.writeJSON(ctx, fasthttp.StatusOK, res)
				return
			}
		}
	}
	ctx.SetUserValue(mcpCallKey, call)
	s.mcp(ctx)
}

// mcpPrepare runs lookup_ip's pipeline call for the address ip into call. A
// target that is not one public address is a tool error, not a refusal.
func (s *Server) mcpPrepare(r *request, call *mcpCall, anonymous bool, ip string) *checks.Refusal {
	t := checks.PastedTarget(ip)
	var ref *checks.Refusal
	if anonymous {
		call.lookup, ref = s.checks.FreeLookup(&r.Call, t)
	} else {
		call.lookup, ref = s.checks.Lookup(&r.Call, t)
	}
	if ref != nil && !t.OK() && ref.Status == fasthttp.StatusBadRequest {
		call.toolErr, ref = errors.New(t.Err()), nil
	}
	call.checked, call.addr = ref == nil, t.Addr
	return ref
}

// mcpFastPathFits reports whether a well-formed tools/call lookup_ip may be
// answered without the SDK, with the bytes the SDK would send: through the
// SDK a stateless call costs ~370 µs of CPU (a session per request, JSON
// schema validation, large decode buffers), twenty times a whole GET
// /v1/lookup. Anything unusual — a missing id, a client that does not
// accept both JSON and SSE, another content type — goes to the SDK, which
// knows every corner of the protocol. A test checks both paths give the
// same answer.
func mcpFastPathFits(ctx *fasthttp.RequestCtx, id sonic.NoCopyRawMessage) bool {
	accept := ctx.Request.Header.Peek("Accept")
	return !isAbsent(id) && bytes.Contains(accept, []byte("application/json")) && bytes.Contains(accept, []byte("text/event-stream")) &&
		bytes.HasPrefix(bytes.ToLower(ctx.Request.Header.ContentType()), []byte("application/json"))
}

// fastPathResult is the JSON-RPC result of a prepared lookup_ip call: the
// lookup as text and as structured content, or the tool error.
func fastPathResult(call *mcpCall, id sonic.NoCopyRawMessage) (*wire.RPCToolResult, error) {
	res := &wire.RPCToolResult{JSONRPC: "2.0", ID: []byte(id)}
	if call.toolErr != nil {
		res.Result.IsError = true
		res.Result.Content = []wire.RPCText{{Type: "text", Text: call.toolErr.Error()}}
		return res, nil
	}
	out := *call.lookup
	text, err := sonic.ConfigStd.Marshal(&out)
	if err != nil {
		return nil, err
	}
	res.Result.Content = []wire.RPCText{{Type: "text", Text: string(text)}}
	res.Result.StructuredContent = &out
	return res, nil
}

// rpcError answers a JSON-RPC error with the HTTP status; a nil id is sent as
// null (the request's id is unknown or unreadable).
func (s *Server) rpcError(ctx *fasthttp.RequestCtx, status int, id sonic.NoCopyRawMessage, code int, msg string) {
	if len(id) == 0 {
		id = sonic.NoCopyRawMessage("null")
	}
	s.writeJSON(ctx, status, &wire.RPCError{JSONRPC: "2.0", ID: []byte(id), Error: wire.RPCErrorBody{Code: code, Message: msg}})
}

// rpcRefusal renders a refusal over MCP: a JSON-RPC error carrying the wait,
// with the HTTP status, the X-RateLimit-* figures and Retry-After. It is the
// one place an MCP refusal is written. An internal cause is logged, never
// sent.
func (s *Server) rpcRefusal(ctx *fasthttp.RequestCtx, id sonic.NoCopyRawMessage, ref *checks.Refusal) {
	if ref.Cause != nil {
		s.log.Error("request failed", "status", ref.Status, "err", ref.Cause,
			"request_id", string(ctx.Response.Header.Peek(headerRequestID)))
	}
	if len(id) == 0 {
		id = sonic.NoCopyRawMessage("null")
	}
	h := &ctx.Response.Header
	setRateLimit(h, ref.RateLimit)
	body := wire.RPCErrorBody{Code: -32000, Message: ref.Msg}
	if ref.RetryAfter > 0 {
		h.Set(headerRetryAfter, strconv.FormatInt(ref.RetryAfter, 10))
		body.Data = &wire.RPCRetry{RetryAfter: ref.RetryAfter}
	}
	s.writeJSON(ctx, ref.Status, &wire.RPCError{JSONRPC: "2.0", ID: []byte(id), Error: body})
}
