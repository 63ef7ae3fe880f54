package fastapi

import (
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/actors/checks"
	"github.com/fraudd/fraudd/internal/weborigin"
)

// ParseMCPOrigins checks and canonicalises the operator's list of browser
// origins allowed to call /mcp: scheme://host[:port], http or https, no path;
// lower case, a default port dropped (browsers never send one).
func ParseMCPOrigins(list []string) ([]string, error) {
	out := make([]string, 0, len(list))
	for _, o := range list {
		c, ok := weborigin.Canonical(strings.TrimSpace(o))
		if !ok {
			return nil, fmt.Errorf("%q is not an origin like https://agent.example", o)
		}
		out = append(out, c)
	}
	return out, nil
}

// isLoopbackHost reports whether a Host header names this machine's loopback:
// localhost or a loopback address, with or without a port.
func isLoopbackHost(host string) bool {
	h, _, err := net.SplitHostPort(host)
	if err != nil {
		h = strings.Trim(host, "[]")
	}
	if strings.EqualFold(h, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(h)
	return err == nil && a.Unmap().IsLoopback()
}

// mcpOriginOK is the MCP transport's DNS-rebinding guard (MCP 2025-06-18,
// transports: servers MUST validate Origin; 403 when it is invalid). A request
// without Origin is a server-to-server client and passes. A browser's Origin
// must be one the operator listed (--mcp-origins), or the server's own
// loopback origin (a page served by this very address: the rebinding attack
// always arrives with the attacker's name instead).
//
// The Host is checked where rebinding can reach: a connection to a loopback
// address straight from a browser, not through a trusted proxy (whose Host is
// the public name). There it must name the loopback too.
func (s *Server) mcpOriginOK(ctx *fasthttp.RequestCtx) bool {
	host := string(ctx.Request.Header.Host())
	if o := ctx.Request.Header.Peek("Origin"); len(o) > 0 && !s.mcpOriginAllowed(string(o), host) {
		s.rpcError(ctx, fasthttp.StatusForbidden, nil, rpcTransportError, checks.MsgRPCOrigin)
		return false
	}
	if s.directToLoopback(ctx) && !isLoopbackHost(host) {
		s.rpcError(ctx, fasthttp.StatusForbidden, nil, rpcTransportError, checks.MsgRPCHost)
		return false
	}
	return true
}

func (s *Server) mcpOriginAllowed(origin, host string) bool {
	c, ok := weborigin.Canonical(origin)
	if !ok {
		return false
	}
	for _, o := range s.cfg.MCPOrigins {
		if c == o {
			return true
		}
	}
	scheme, ohost, _ := strings.Cut(c, "://")
	return isLoopbackHost(host) && ohost == weborigin.HostWithoutDefaultPort(strings.ToLower(host), scheme)
}

// directToLoopback: the connection was made to a loopback address by a peer
// that is not a trusted proxy.
func (s *Server) directToLoopback(ctx *fasthttp.RequestCtx) bool {
	local, ok := ctx.LocalAddr().(*net.TCPAddr)
	if !ok || !local.IP.IsLoopback() {
		return false
	}
	var peer netip.Addr
	if ta, ok := ctx.RemoteAddr().(*net.TCPAddr); ok {
		peer = ta.AddrPort().Addr().Unmap()
	}
	return !s.trusted(peer)
}

// The CORS answer of /mcp to a page of an origin that passed mcpOriginOK
// (--mcp-origins lists the browser-based agents allowed to call it): the
// headers a client sends and the ones it must be able to read.
const (
	mcpAllowHeaders  = "Authorization, Content-Type, Accept, MCP-Protocol-Version, Mcp-Session-Id, Mcp-Method, Last-Event-ID"
	mcpExposeHeaders = "Mcp-Session-Id, MCP-Protocol-Version, X-Request-Id, Retry-After, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset, WWW-Authenticate"
)

// mcpCORS lets the calling page read the answer (errors included) when the
// request came with an Origin that mcpOriginOK let through.
func mcpCORS(ctx *fasthttp.RequestCtx) {
	o := ctx.Request.Header.Peek("Origin")
	if len(o) == 0 {
		return
	}
	h := &ctx.Response.Header
	h.SetBytesV("Access-Control-Allow-Origin", o)
	h.Set("Vary", "Origin")
	h.Set("Access-Control-Expose-Headers", mcpExposeHeaders)
}

// handleMCPPreflight answers the CORS preflight a browser sends before its
// POST to /mcp (an Authorization or JSON Content-Type header needs one):
// allowed for the origins /mcp itself serves, 403 for the others, as the
// POST would be.
func (s *Server) handleMCPPreflight(ctx *fasthttp.RequestCtx, r *request) {
	if len(ctx.Request.Header.Peek("Origin")) == 0 {
		// Not a browser's preflight: there is nothing to allow.
		ctx.Response.Header.Set("Allow", "POST, OPTIONS")
		ctx.SetStatusCode(fasthttp.StatusNoContent)
		return
	}
	if !s.mcpOriginOK(ctx) {
		return
	}
	mcpCORS(ctx)
	h := &ctx.Response.Header
	h.Set("Access-Control-Allow-Methods", "POST, OPTIONS")
	h.Set("Access-Control-Allow-Headers", mcpAllowHeaders)
	h.Set("Access-Control-Max-Age", "600")
	ctx.SetStatusCode(fasthttp.StatusNoContent)
}
