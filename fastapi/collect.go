package fastapi

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"

	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/actors/checks"
	"github.com/fraudd/fraudd/fastapi/collector"
	"github.com/fraudd/fraudd/intel/device"
	"github.com/fraudd/fraudd/intel/nettoken"
)

// The browser collector's endpoints (COLLECTOR.md):
//
//	GET  /collector.js          the embedded script, cacheable
//	POST /v1/collect/network    → {"token", "expires_in"}
//	POST /v1/collect/device     → {"event_id"}
//	OPTIONS on both             CORS preflight
//
// Both POSTs take the publishable key in X-Publishable-Key or the body's
// "key", and answer CORS for the account's origins (any origin when it lists
// none). collector.js posts text/plain JSON, a "simple" CORS request, so a
// browser sends no preflight; the OPTIONS answer is for pages that call the
// endpoints with the header or application/json.

const (
	maxDeviceBody  = 32 << 10
	collectorCache = "public, max-age=3600, stale-while-revalidate=86400"
)

// handleCollectorJS serves the embedded collector with a strong ETag; an
// If-None-Match hit is a 304 with no body.
func (s *Server) handleCollectorJS(ctx *fasthttp.RequestCtx, r *request) {
	h := &ctx.Response.Header
	h.Set("Cache-Control", collectorCache)
	h.Set("ETag", collector.ETag)
	h.Set("Access-Control-Allow-Origin", "*")
	h.Set("X-Content-Type-Options", "nosniff")
	if inm := ctx.Request.Header.Peek("If-None-Match"); len(inm) > 0 && bytes.Contains(inm, []byte(collector.ETag)) {
		ctx.SetStatusCode(fasthttp.StatusNotModified)
		return
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType("application/javascript; charset=utf-8")
	ctx.SetBody(collector.JS)
}

// handleCollectPreflight answers the CORS preflight of both collect
// endpoints. It cannot know the key (a preflight carries no body and no
// custom header values), so it allows the asking origin; the POST itself
// enforces the account's origins.
func (s *Server) handleCollectPreflight(ctx *fasthttp.RequestCtx, r *request) {
	h := &ctx.Response.Header
	if o := ctx.Request.Header.Peek("Origin"); len(o) > 0 {
		h.SetBytesV("Access-Control-Allow-Origin", o)
	} else {
		h.Set("Access-Control-Allow-Origin", "*")
	}
	h.Set("Vary", "Origin")
	h.Set("Access-Control-Allow-Methods", "POST, OPTIONS")
	h.Set("Access-Control-Allow-Headers", "Content-Type, X-Publishable-Key")
	h.Set("Access-Control-Max-Age", "600")
	ctx.SetStatusCode(fasthttp.StatusNoContent)
}

// page is who a collector call comes from: the publishable key (the
// X-Publishable-Key header first, then the body's "key") and the Origin.
func page(ctx *fasthttp.RequestCtx, bodyKey string) checks.Page {
	p := checks.Page{Key: string(ctx.Request.Header.Peek("X-Publishable-Key")), Origin: string(ctx.Request.Header.Peek("Origin"))}
	if p.Key == "" {
		p.Key = bodyKey
	}
	return p
}

// collectRefusal answers a refused collector call; a page whose origin the
// account does not allow may not read the answer.
func (s *Server) collectRefusal(ctx *fasthttp.RequestCtx, ref *checks.Refusal) {
	if ref == checks.RefuseOrigin {
		ctx.Response.Header.Del("Access-Control-Allow-Origin")
	}
	s.refuse(ctx, ref)
}

// corsHeaders lets the calling page read the answer (errors included, so
// the collector can tell what went wrong).
func corsHeaders(ctx *fasthttp.RequestCtx) {
	h := &ctx.Response.Header
	if o := ctx.Request.Header.Peek("Origin"); len(o) > 0 {
		h.SetBytesV("Access-Control-Allow-Origin", o)
	} else {
		h.Set("Access-Control-Allow-Origin", "*")
	}
	h.Set("Vary", "Origin")
}

// collectNetworkBody is what collector.js reports with the network call.
type collectNetworkBody struct {
	Key    string `json:"key"`
	V      int    `json:"v"`
	WebRTC *struct {
		Status string   `json:"status"`
		Addrs  []string `json:"addrs"`
	} `json:"webrtc"`
}

// handleCollectNetwork is POST /v1/collect/network: a network token for the
// visitor's connection (actors/checks CollectNetwork).
func (s *Server) handleCollectNetwork(ctx *fasthttp.RequestCtx, r *request) {
	var body collectNetworkBody
	var rep checks.NetworkReport
	if raw := bytes.TrimSpace(ctx.PostBody()); len(raw) > 0 {
		if raw[0] != '{' || jsonBody.Unmarshal(raw, &body) != nil {
			s.refuse(ctx, checks.Invalid(checks.MsgBodyNotJSON))
			return
		}
		rep.Report = body.V >= 1
	}
	if w := body.WebRTC; w != nil {
		rep.WebRTCSent, rep.WebRTC, rep.WebRTCAddrs = true, w.Status, w.Addrs
	}
	rep.Headers, rep.Infra = s.proxyHeaders(ctx, r.Addr)
	tok, ref := s.checks.CollectNetwork(&r.Call, page(ctx, body.Key), &rep)
	if ref != nil {
		s.collectRefusal(ctx, ref)
		return
	}
	s.writeJSON(ctx, fasthttp.StatusOK, &struct {
		Token     string `json:"token"`
		ExpiresIn int    `json:"expires_in"`
	}{tok, int(nettoken.ExpiresIn.Seconds())})
}

// proxyHeaders reads the proxy evidence of the browser's request. From an
// untrusted peer (the visitor's side reached us directly) any proxy header
// counts: browsers never send Via, Forwarded or X-Forwarded-For themselves.
// Behind our own trusted proxies those headers may be theirs, so only an
// X-Forwarded-For hop to the left of the client address counts (the client
// itself forwarded for someone). infra is true when the caller address is
// one of our own proxies: the reading then measured our infrastructure.
func (s *Server) proxyHeaders(ctx *fasthttp.RequestCtx, client netip.Addr) (flags uint8, infra bool) {
	h := &ctx.Request.Header
	var peer netip.Addr
	if ta, ok := ctx.RemoteAddr().(*net.TCPAddr); ok {
		peer = ta.AddrPort().Addr().Unmap()
	}
	if !s.trusted(peer) {
		if len(h.Peek("Via")) > 0 {
			flags |= nettoken.HeaderVia
		}
		if len(h.Peek("Forwarded")) > 0 {
			flags |= nettoken.HeaderForwarded
		}
		if len(h.Peek("X-Forwarded-For")) > 0 {
			flags |= nettoken.HeaderXFF
		}
		for _, name := range []string{"X-Proxy-ID", "Proxy-Connection", "X-BlueCoat-Via", "Client-IP", "X-Real-IP"} {
			if len(h.Peek(name)) > 0 {
				flags |= nettoken.HeaderOther
				break
			}
		}
		return flags, false
	}
	if s.trusted(client) {
		return 0, true
	}
	// Walk X-Forwarded-For as clientAddr does; anything left of the client
	// hop is a forwarder beyond it.
	walkXFF(h.PeekAll("X-Forwarded-For"), func(a netip.Addr, err error, at xffPos) bool {
		if err != nil {
			return false
		}
		if a == client {
			if at.more() {
				flags |= nettoken.HeaderXFF
			}
			return false
		}
		return true
	})
	return flags, false
}

// collectDeviceBody is collector.js's device report: the signals plus the key.
type collectDeviceBody struct {
	Key string `json:"key"`
	device.Signals
}

// handleCollectDevice is POST /v1/collect/device: the device verdicts of
// the report, stored as an event (actors/checks CollectDevice).
func (s *Server) handleCollectDevice(ctx *fasthttp.RequestCtx, r *request) {
	raw := bytes.TrimSpace(ctx.PostBody())
	if len(raw) > maxDeviceBody {
		s.refuse(ctx, &checks.Refusal{Status: fasthttp.StatusRequestEntityTooLarge, Msg: checks.MsgTooLarge,
			Hint: fmt.Sprintf(checks.HintDeviceReport, maxDeviceBody)})
		return
	}
	var body collectDeviceBody
	if len(raw) == 0 || raw[0] != '{' || jsonBody.Unmarshal(raw, &body) != nil {
		s.refuse(ctx, checks.Invalid(checks.MsgDeviceReport))
		return
	}
	if body.Signals.UA == "" {
		// The collector always reports navigator.userAgent; a report
		// without one is assessed against the UA its request came with
		// (the browser's, or the script's that forged the report), so
		// that leaving it out does not leave the UA's checks undone.
		body.Signals.UA = string(ctx.UserAgent())
	}
	id, ref := s.checks.CollectDevice(&r.Call, page(ctx, body.Key), &checks.DeviceReport{Signals: &body.Signals})
	if ref != nil {
		s.collectRefusal(ctx, ref)
		return
	}
	s.writeJSON(ctx, fasthttp.StatusOK, &struct {
		EventID string `json:"event_id"`
	}{id})
}
