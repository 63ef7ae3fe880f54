package fastapi

import (
	"bytes"
	"net"
	"net/netip"
	"strconv"

	"github.com/bytedance/sonic"
	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/actors/events"
	"github.com/fraudd/fraudd/fastapi/collector"
	"github.com/fraudd/fraudd/intel/device"
	"github.com/fraudd/fraudd/intel/nettoken"
	"github.com/fraudd/fraudd/storage"
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
	msgPublishableKey  = "Invalid publishable key."
	hintPublishableKey = "Set data-key to the account's publishable key (pk_live_…); secret keys never go in a page."
	msgOrigin          = "Origin not allowed for this key."
	maxDeviceBody      = 32 << 10
	collectorCache     = "public, max-age=3600, stale-while-revalidate=86400"
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

// collectAccount resolves the publishable key (header first, then body) and
// checks the page's origin, setting the CORS answer headers. It answers the
// error itself and returns nil when the call may not proceed.
func (s *Server) collectAccount(ctx *fasthttp.RequestCtx, bodyKey string) *accounts.View {
	h := &ctx.Response.Header
	origin := ctx.Request.Header.Peek("Origin")
	corsHeaders(ctx)
	key := string(ctx.Request.Header.Peek("X-Publishable-Key"))
	if key == "" {
		key = bodyKey
	}
	var v *accounts.View
	if len(key) > len(accounts.PrefixPublishable) && key[:len(accounts.PrefixPublishable)] == accounts.PrefixPublishable {
		v = s.deps.Accounts.ByPublishableKey(key)
	}
	if v == nil {
		s.writeError(ctx, fasthttp.StatusUnauthorized, msgPublishableKey, "", hintPublishableKey)
		return nil
	}
	if v.Suspended {
		s.writeError(ctx, fasthttp.StatusForbidden, msgSuspended, "", "The account is suspended; contact the operator.")
		return nil
	}
	if !originAllowed(v.Origins, origin) {
		h.Del("Access-Control-Allow-Origin")
		s.writeError(ctx, fasthttp.StatusForbidden, msgOrigin, "",
			"Add the page's origin (scheme://host[:port]) to the account's origins, or send the request from a listed one.")
		return nil
	}
	return v
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

// originAllowed: any origin when the account lists none; otherwise the
// request must come from a listed origin (a request without Origin — not a
// browser page — is refused too, since the list confines the key to sites).
func originAllowed(list []string, origin []byte) bool {
	if len(list) == 0 {
		return true
	}
	for _, o := range list {
		if len(origin) > 0 && bytes.EqualFold([]byte(o), origin) {
			return true
		}
	}
	return false
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

// handleCollectNetwork is POST /v1/collect/network: it measures the
// visitor's address and mints a network token (intel/nettoken documents the
// format and how each fact counts).
func (s *Server) handleCollectNetwork(ctx *fasthttp.RequestCtx, r *request) {
	var body collectNetworkBody
	raw := bytes.TrimSpace(ctx.PostBody())
	report := false
	if len(raw) > 0 {
		if raw[0] != '{' || sonic.ConfigStd.Unmarshal(raw, &body) != nil {
			corsHeaders(ctx)
			s.writeError(ctx, fasthttp.StatusBadRequest, "The request body is not valid JSON.", "", "")
			return
		}
		report = body.V >= 1
	}
	v := s.collectAccount(ctx, body.Key)
	if v == nil {
		return
	}
	if s.deps.NetTokens == nil {
		s.serverError(ctx, "collect network", errNoTokens)
		return
	}
	f := nettoken.Facts{Issued: r.now, Addr: r.client, Report: report}
	f.Headers, f.Infra = s.proxyHeaders(ctx, r.client)
	if w := body.WebRTC; w != nil {
		f.WebRTC = webrtcStatus(w.Status)
		for _, a := range w.Addrs {
			if ip, err := netip.ParseAddr(a); err == nil && ip.Zone() == "" {
				f.AddCandidate(ip, nettoken.IsPublic)
			}
		}
	}
	tok := s.deps.NetTokens.Sign(v.ID, &f)
	s.writeJSON(ctx, fasthttp.StatusOK, &struct {
		Token     string `json:"token"`
		ExpiresIn int    `json:"expires_in"`
	}{tok, int(nettoken.ExpiresIn.Seconds())})
}

type collectError string

func (e collectError) Error() string { return string(e) }

const errNoTokens = collectError("network tokens are not configured (Deps.NetTokens is nil)")

func webrtcStatus(s string) nettoken.WebRTC {
	switch s {
	case "ok":
		return nettoken.WebRTCOK
	case "unsupported":
		return nettoken.WebRTCUnsupported
	case "error":
		return nettoken.WebRTCError
	case "timeout":
		return nettoken.WebRTCTimeout
	}
	return nettoken.WebRTCNotRun
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
	// Walk X-Forwarded-For from the right like clientAddr; anything left of
	// the client hop is a forwarder beyond it.
	xff := h.Peek("X-Forwarded-For")
	for len(xff) > 0 {
		var hop []byte
		if i := bytes.LastIndexByte(xff, ','); i >= 0 {
			hop, xff = xff[i+1:], xff[:i]
		} else {
			hop, xff = xff, nil
		}
		a, err := netip.ParseAddr(string(bytes.TrimSpace(hop)))
		if err != nil {
			break
		}
		if a.Unmap() == client {
			if len(bytes.TrimSpace(xff)) > 0 {
				flags |= nettoken.HeaderXFF
			}
			break
		}
	}
	return flags, false
}

// collectDeviceBody is collector.js's device report: the signals plus the key.
type collectDeviceBody struct {
	Key string `json:"key"`
	device.Signals
}

// handleCollectDevice is POST /v1/collect/device: it decides the device
// verdicts (intel/device), stores the event with its time, origin and
// address (fire-and-forget to the device actors) and answers its id.
func (s *Server) handleCollectDevice(ctx *fasthttp.RequestCtx, r *request) {
	raw := bytes.TrimSpace(ctx.PostBody())
	if len(raw) > maxDeviceBody {
		corsHeaders(ctx)
		s.writeError(ctx, fasthttp.StatusRequestEntityTooLarge, msgTooLarge, "", "The device report is limited to "+strconv.Itoa(maxDeviceBody)+" bytes.")
		return
	}
	var body collectDeviceBody
	if len(raw) == 0 || raw[0] != '{' || sonic.ConfigStd.Unmarshal(raw, &body) != nil {
		corsHeaders(ctx)
		s.writeError(ctx, fasthttp.StatusBadRequest, "The request body must be the collector's JSON report.", "", "")
		return
	}
	v := s.collectAccount(ctx, body.Key)
	if v == nil {
		return
	}
	if s.deps.Devices == nil || (s.deps.Store != nil && !s.deps.Store.Available()) {
		s.storageUnavailable(ctx)
		return
	}
	var ipChecked, ipBlocked bool
	if s.deps.Feeds != nil && nettoken.IsPublic(r.client) {
		c := s.deps.Feeds.Current().Classify(r.client)
		ipChecked, ipBlocked = true, c.Blocklisted
	}
	verdict := device.Assess(&body.Signals, device.Options{Key: s.deps.VisitorKey, IPChecked: ipChecked, IPBlocklisted: ipBlocked})
	ev := &storage.DeviceEvent{
		ID:        events.NewEventID(verdict.VisitorID, r.now),
		Account:   v.ID,
		Created:   r.now,
		Origin:    string(ctx.Request.Header.Peek("Origin")),
		Addr:      r.client,
		Schema:    uint8(min(max(body.V, 0), 255)),
		Signals:   bytes.Clone(raw),
		Flags:     eventFlags(&verdict),
		Tampering: uint16(verdict.TamperingScore*10000 + 0.5),
		Checked:   uint8(verdict.Checked),
		VisitorID: verdict.VisitorID,
	}
	for _, f := range verdict.Findings {
		ev.Findings = append(ev.Findings, string(f))
	}
	s.deps.Devices.Record(ev)
	s.writeJSON(ctx, fasthttp.StatusOK, &struct {
		EventID string `json:"event_id"`
	}{events.FormatEventID(ev.ID)})
}

func eventFlags(v *device.Verdict) uint16 {
	var f uint16
	set := func(on bool, bit uint16) {
		if on {
			f |= bit
		}
	}
	set(v.Automation, storage.EventAutomation)
	set(v.Antidetect, storage.EventAntidetect)
	set(v.Emulator, storage.EventEmulator)
	set(v.VirtualMachine, storage.EventVirtualMachine)
	set(v.Incognito, storage.EventIncognito)
	set(v.PrivacyMode, storage.EventPrivacyMode)
	set(v.IPBlocklisted, storage.EventIPBlocklisted)
	set(v.Complete, storage.EventComplete)
	return f
}
