package fastapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
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
	// id is the request's id as sent (valid, or nil when it has none): an
	// error the SDK raises for the request carries it back (rpcErrorWriter).
	id []byte
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

// JSON-RPC 2.0 error codes used on /mcp; -32000 (implementation-defined)
// marks transport errors, as the MCP reference SDK does.
const (
	rpcParseError     = -32700
	rpcInvalidRequest = -32600
	rpcMethodNotFound = -32601
	rpcTransportError = -32000
)

// mcpMethods are the methods /mcp answers: the lifecycle (initialize up to
// MCP 2025-11-25; server/discover, which replaces it in the stateless
// 2026-07-28 revision, SEP-2575), the capabilities the server declares
// (tools, logging), the empty prompt and resource listings clients ask for
// anyway, and the notifications a client sends. Everything else the SDK
// would take on (stream subscriptions, resource reads, completions) is
// -32601: a stateless lookup service offers none of it.
var mcpMethods = map[string]bool{
	"initialize": true, "server/discover": true, "ping": true,
	"tools/list": true, "tools/call": true, "logging/setLevel": true,
	"prompts/list": true, "resources/list": true, "resources/templates/list": true,
	"notifications/initialized": true, "notifications/cancelled": true,
	"notifications/progress": true, "notifications/roots/list_changed": true,
}

// newMCP builds the stateless streamable-HTTP MCP endpoint with the SDK.
func (s *Server) newMCP() fasthttp.RequestHandler {
	// The endpoint is stateless and answers GET with 405, so it has no
	// stream to send notifications/tools/list_changed on: the tools
	// capability must not claim listChanged, which the SDK infers when a
	// tool is added. Logging stays as the SDK's default declares it.
	srv := mcp.NewServer(&mcp.Implementation{Name: "fraudd", Version: s.cfg.Version}, &mcp.ServerOptions{
		Capabilities: &mcp.ServerCapabilities{Logging: &mcp.LoggingCapabilities{}, Tools: &mcp.ToolCapabilities{}},
	})
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
	return fasthttpadaptor.NewFastHTTPHandler(withRPCErrors(h))
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

// rpcPeek is the part of a JSON-RPC request handleMCP looks at before the
// SDK: raw members, so a member of the wrong type is an answer of ours, not
// a decode failure that lets the message through unread.
type rpcPeek struct {
	JSONRPC sonic.NoCopyRawMessage `json:"jsonrpc"`
	ID      sonic.NoCopyRawMessage `json:"id"`
	Method  sonic.NoCopyRawMessage `json:"method"`
	Params  sonic.NoCopyRawMessage `json:"params"`
	Result  sonic.NoCopyRawMessage `json:"result"`
	Error   sonic.NoCopyRawMessage `json:"error"`
}

// rpcCallParams are tools/call's params as far as handleMCP reads them.
type rpcCallParams struct {
	Name      string `json:"name"`
	Arguments struct {
		IP sonic.NoCopyRawMessage `json:"ip"`
	} `json:"arguments"`
	// Meta is the per-request _meta of MCP 2026-07-28 (SEP-2575).
	Meta struct {
		ProtocolVersion    sonic.NoCopyRawMessage `json:"io.modelcontextprotocol/protocolVersion"`
		ClientCapabilities sonic.NoCopyRawMessage `json:"io.modelcontextprotocol/clientCapabilities"`
	} `json:"_meta"`
}

// handleMCP is POST /mcp (SPEC 4.11). It authenticates a bearer (an invalid
// one is 401, never anonymous), and for tools/call lookup_ip runs the
// pipeline's lookup before the SDK does anything: Lookup with a key,
// FreeLookup (the free tool's per-address limits) when anonymous — the same
// functions as GET /v1/lookup and POST /api/lookup. Any other anonymous call
// takes the free tool's limit too (AccessMCPAnonymous). A refusal of an
// anonymous call, or of a charge, is a JSON-RPC error with the HTTP status
// and Retry-After (rpcRefusal). A bearer refused at admission (401, the
// allowlist's 403, the lockout's or the per-address limit's 429) is
// answered in the API's own error shape, as on /v1, before any JSON-RPC
// message is read: an agent's HTTP layer sees the status either way.
//
// Every other error on /mcp is a JSON-RPC error object. Malformed JSON is -32700
// and anything that is not one JSON-RPC request object is -32600, both HTTP
// 400 with a null id (the transport "cannot accept the input"). A batch is
// refused whole: MCP 2025-06-18 removed batching, and one POST must cost one
// checked message. A method the service does not offer is -32601 with the
// request's id and HTTP 200, the JSON-RPC answer to an accepted request; an
// unknown notification is accepted and ignored (202), as JSON-RPC asks.
func (s *Server) handleMCP(ctx *fasthttp.RequestCtx, r *request) {
	if !s.mcpOriginOK(ctx) {
		return
	}
	mcpCORS(ctx)
	anonymous := true
	if sentAuthorization(ctx) {
		access := checks.AccessMCP
		if mcpLookupCall(ctx) {
			// It goes on to Lookup: the limiters ride its charge's call.
			access = checks.AccessMCPLookup
		}
		if ref := s.checks.Admit(&r.Call, requestCredential(ctx), access); ref != nil {
			s.refuse(ctx, ref)
			return
		}
		anonymous = false
	} else if !mcpLookupCall(ctx) {
		// lookup_ip takes the free tool's limits in FreeLookup; every other
		// anonymous call (each a run of the SDK) takes the free tool's limit
		// for calls that look nothing up, refused as FreeLookup's are.
		if ref := s.checks.Admit(&r.Call, checks.Credential{}, checks.AccessMCPAnonymous); ref != nil {
			s.rpcRefusal(ctx, rpcRequestID(ctx.PostBody()), ref)
			return
		}
	}
	if !s.mcpTransportOK(ctx) {
		return
	}
	raw := ctx.PostBody()
	body := bytes.TrimLeft(raw, " \t\r\n")
	if len(body) == 0 || !rpcPeekJSON.Valid(raw) {
		s.rpcError(ctx, fasthttp.StatusBadRequest, nil, rpcParseError, checks.MsgRPCParse)
		return
	}
	switch body[0] {
	case '[':
		s.rpcError(ctx, fasthttp.StatusBadRequest, nil, rpcInvalidRequest, checks.MsgRPCBatch)
		return
	case '{':
	default:
		s.rpcError(ctx, fasthttp.StatusBadRequest, nil, rpcInvalidRequest, checks.MsgRPCNotObject)
		return
	}
	var peek rpcPeek
	if err := rpcPeekJSON.Unmarshal(raw, &peek); err != nil {
		s.rpcError(ctx, fasthttp.StatusBadRequest, nil, rpcParseError, checks.MsgRPCParse)
		return
	}
	id := rpcID(peek.ID)
	if v, ok := jsonString(peek.JSONRPC); !ok || v != "2.0" {
		s.rpcError(ctx, fasthttp.StatusBadRequest, id, rpcInvalidRequest, checks.MsgRPCVersion)
		return
	}
	// An id of another type is refused before anything reads the method:
	// the fast path would echo it as sent and charge the call, and the SDK
	// would answer with another id than the client's.
	if len(peek.ID) > 0 && !rpcIDValid(peek.ID) {
		s.rpcError(ctx, fasthttp.StatusBadRequest, nil, rpcInvalidRequest, checks.MsgRPCID)
		return
	}
	call := &mcpCall{now: r.Now, id: bytes.Clone(id)}
	if isAbsent(peek.Method) && (len(peek.Result) > 0) == (len(peek.Error) > 0) {
		// Without a method it is a response, which carries exactly one of
		// result and error (JSON-RPC 2.0 §5); anything else is no message
		// to accept with 202.
		s.rpcError(ctx, fasthttp.StatusBadRequest, id, rpcInvalidRequest, checks.MsgRPCResponse)
		return
	}
	if !isAbsent(peek.Method) {
		method, ok := jsonString(peek.Method)
		if !ok {
			s.rpcError(ctx, fasthttp.StatusBadRequest, id, rpcInvalidRequest, checks.MsgRPCMethodType)
			return
		}
		if !mcpMethods[method] {
			// MCP 2025-06-18 and later (transports): a request with an
			// unsupported MCP-Protocol-Version MUST get 400, whatever its
			// method. The SDK answers that for the methods it serves; these
			// never reach it.
			if !mcpVersionOK(ctx) {
				s.rpcError(ctx, fasthttp.StatusBadRequest, id, rpcInvalidRequest,
					fmt.Sprintf(checks.MsgRPCProtocolVersion, strings.Join(mcpProtocolVersions, ", ")))
				return
			}
			if isAbsent(peek.ID) {
				ctx.SetStatusCode(fasthttp.StatusAccepted)
				return
			}
			s.rpcError(ctx, fasthttp.StatusOK, id, rpcMethodNotFound, fmt.Sprintf(checks.MsgRPCMethodNotFound, truncate(method, 64)))
			return
		}
		// A tools/call without an id is a notification the SDK refuses:
		// nothing is looked up or charged for an answer never given. Nor is
		// one whose MCP-Protocol-Version the SDK does not speak, or whose
		// 2026-07-28 _meta and headers it refuses (mcpCallEra).
		var params rpcCallParams
		var chargeable, modern bool
		if method == "tools/call" && len(peek.ID) > 0 &&
			rpcPeekJSON.Unmarshal(peek.Params, &params) == nil && params.Name == "lookup_ip" {
			chargeable, modern = mcpCallEra(ctx, peek.Params, &params)
		}
		if chargeable {
			ip, isString := jsonString(params.Arguments.IP)
			if ref := s.mcpPrepare(r, call, anonymous, ip); ref != nil {
				if ref.Admission {
					s.refuse(ctx, ref) // Admit's refusal, taken with the charge
					return
				}
				s.rpcRefusal(ctx, peek.ID, ref)
				return
			}
			setRateLimit(&ctx.Response.Header, r.RateLimit)
			// A 2026-07-28 answer has more than the fast path writes
			// (resultType, which that revision's clients require, and the
			// server's _meta): the SDK writes it, from the lookup just made.
			if isString && !modern {
				if res, err := fastPathResult(call, peek.ID); err == nil {
					s.writeJSON(ctx, fasthttp.StatusOK, res)
					return
				}
			}
		}
	}
	ctx.SetUserValue(mcpCallKey, call)
	s.mcp(ctx)
}

// rpcRequestID is the id of the request in body for an answer given before
// handleMCP read it: nil (sent as null) unless body is one request object
// with a valid id.
func rpcRequestID(body []byte) sonic.NoCopyRawMessage {
	var peek rpcPeek
	if !rpcPeekJSON.Valid(body) || rpcPeekJSON.Unmarshal(body, &peek) != nil || !rpcIDValid(peek.ID) {
		return nil
	}
	return peek.ID
}

// mcpLookupCall reports whether handleMCP will take the request to
// mcpPrepare's Lookup: the transport is right and the body is one JSON-RPC
// 2.0 tools/call of lookup_ip with a valid id. It only reads; handleMCP checks the same
// again in order and answers what fails.
func mcpLookupCall(ctx *fasthttp.RequestCtx) bool {
	ct, _, _ := bytes.Cut(ctx.Request.Header.ContentType(), []byte(";"))
	if !bytes.EqualFold(bytes.TrimSpace(ct), []byte(contentTypeJSON)) {
		return false
	}
	if jsonOK, sseOK := mcpAccepts(ctx.Request.Header.Peek("Accept")); !jsonOK || !sseOK {
		return false
	}
	if !mcpVersionOK(ctx) {
		return false
	}
	raw := ctx.PostBody()
	body := bytes.TrimLeft(raw, " \t\r\n")
	if len(body) == 0 || body[0] != '{' || !rpcPeekJSON.Valid(raw) {
		return false
	}
	var peek rpcPeek
	if rpcPeekJSON.Unmarshal(raw, &peek) != nil {
		return false
	}
	if v, ok := jsonString(peek.JSONRPC); !ok || v != "2.0" {
		return false
	}
	if len(peek.ID) == 0 || !rpcIDValid(peek.ID) {
		return false
	}
	method, ok := jsonString(peek.Method)
	if !ok || method != "tools/call" || !mcpMethods[method] {
		return false
	}
	var params rpcCallParams
	if rpcPeekJSON.Unmarshal(peek.Params, &params) != nil || params.Name != "lookup_ip" {
		return false
	}
	chargeable, _ := mcpCallEra(ctx, peek.Params, &params)
	return chargeable
}

// mcpModernVersion is the first MCP revision without sessions (2026-07-28,
// SEP-2575): each request carries its version in params._meta and, over
// HTTP, in the MCP-Protocol-Version, Mcp-Method and Mcp-Name headers; each
// result carries resultType.
const mcpModernVersion = "2026-07-28"

// mcpCallEra reads a tools/call as the SDK's transport does before it runs
// the tool. ok: the SDK would run it, as far as the version, _meta and
// headers go: the MCP-Protocol-Version is one it speaks (mcpVersionOK);
// when the header names 2026-07-28 or later or _meta names a version, the
// two agree; and a call of 2026-07-28 or later (modern: its answer is the
// SDK's) declares the client's capabilities in _meta, repeats its method
// and tool in Mcp-Method and Mcp-Name, and passes lookup_ip's input schema
// (one string argument, ip, and no other: the fast path answers an earlier
// revision's call with more, the SDK refuses it). handleMCP charges a
// lookup only when ok: a call the SDK refuses costs nothing.
func mcpCallEra(ctx *fasthttp.RequestCtx, raw sonic.NoCopyRawMessage, params *rpcCallParams) (ok, modern bool) {
	if !mcpVersionOK(ctx) {
		return false, false
	}
	header := string(ctx.Request.Header.Peek("Mcp-Protocol-Version"))
	meta, _ := jsonString(params.Meta.ProtocolVersion)
	if header < mcpModernVersion && meta == "" {
		return true, false
	}
	if header == "" || header != meta {
		return false, false
	}
	if meta < mcpModernVersion {
		return true, false
	}
	h := &ctx.Request.Header
	caps := bytes.TrimSpace(params.Meta.ClientCapabilities)
	if len(caps) == 0 || caps[0] != '{' ||
		string(h.Peek("Mcp-Method")) != "tools/call" || string(h.Peek("Mcp-Name")) != params.Name {
		return false, false
	}
	var in struct {
		Arguments map[string]sonic.NoCopyRawMessage `json:"arguments"`
	}
	if _, isString := jsonString(params.Arguments.IP); !isString ||
		rpcPeekJSON.Unmarshal(raw, &in) != nil || len(in.Arguments) != 1 {
		return false, false
	}
	return true, true
}

// mcpProtocolVersions are the MCP-Protocol-Version values the SDK serves.
var mcpProtocolVersions = mcp.SupportedProtocolVersions()

// mcpVersionOK reports whether the request's MCP-Protocol-Version header is
// absent or one the SDK serves. MCP 2025-06-18 (transports): "If the server
// receives a request with an invalid or unsupported MCP-Protocol-Version, it
// MUST respond with 400 Bad Request". The SDK does; the lookup_ip fast path
// must not answer (and charge) such a request first.
func mcpVersionOK(ctx *fasthttp.RequestCtx) bool {
	v := ctx.Request.Header.Peek("Mcp-Protocol-Version")
	return len(v) == 0 || slices.Contains(mcpProtocolVersions, string(v))
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

// fastPathResult is the answer to a prepared lookup_ip call, with the bytes
// the SDK would send: through the SDK a stateless call costs ~370 µs of CPU
// (a session per request, JSON schema validation, large decode buffers),
// twenty times a whole GET /v1/lookup. handleMCP has checked the transport
// (content type, Accept) and that the call has an id; anything else unusual
// goes to the SDK, which knows every corner of the protocol. A test checks
// both paths give the same answer.
//
// The result carries the lookup as text and as structured content, or the
// tool error.
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
	s.countRefusal(ref)
	if len(id) == 0 {
		id = sonic.NoCopyRawMessage("null")
	}
	h := &ctx.Response.Header
	setRateLimit(h, ref.RateLimit)
	body := wire.RPCErrorBody{Code: -32000, Message: ref.Msg}
	if ref.RetryAfter > 0 {
		h.Set(headerRetryAfter, strconv.FormatInt(ref.RetryAfter, 10))
	}
	// The code and hint the HTTP body carries (SPEC §7: monthly exhaustion
	// is code monthly_quota_exceeded, an unreadable store storage_unavailable)
	// tell an agent what the message alone does not.
	if ref.RetryAfter > 0 || ref.Code != "" || ref.Hint != "" {
		body.Data = &wire.RPCRetry{RetryAfter: ref.RetryAfter, Code: ref.Code, Hint: ref.Hint}
	}
	s.writeJSON(ctx, ref.Status, &wire.RPCError{JSONRPC: "2.0", ID: []byte(id), Error: body})
}
