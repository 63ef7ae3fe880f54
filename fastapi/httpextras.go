package fastapi

import (
	"bytes"
	"context"
	"log/slog"
	"time"

	"github.com/valyala/fasthttp"
)

// gzipMin is the smallest answer worth compressing: below about 1 KB the
// gzip header and the CPU cost more than the bytes saved (an evaluate answer
// is ~1.2 KB, status ~10 KB).
const gzipMin = 1024

// serveHTTP is the public listener's fasthttp handler: Handle, then the
// transport extras that apply to every answer alike (gzip, metrics, the
// access log).
func (s *Server) serveHTTP(ctx *fasthttp.RequestCtx) { s.withExtras(ctx, s.publicRoutes()) }

// serveAdminHTTP is the admin listener's (--admin-addr), with the same extras.
func (s *Server) serveAdminHTTP(ctx *fasthttp.RequestCtx) { s.withExtras(ctx, &s.admin) }

func (s *Server) withExtras(ctx *fasthttp.RequestCtx, routes *routeSet) {
	// Wall time, never the test clock. fasthttp stamps each request as it
	// hands it to the handler, so timing it costs one clock read (at the
	// end), not two; a bare RequestCtx (tests) has no stamp.
	var start time.Time
	if s.cfg.AccessLog != nil || s.cfg.Metrics != nil {
		if start = ctx.Time(); start.IsZero() {
			start = time.Now()
		}
	}
	rt := s.handle(ctx, routes)
	s.maybeGzip(ctx)
	if s.cfg.Metrics == nil && s.cfg.AccessLog == nil {
		return
	}
	took := time.Since(start)
	if s.cfg.Metrics != nil {
		obs := s.unmatched
		if rt != nil {
			obs = rt.obs
		}
		obs.Observe(ctx.Response.StatusCode(), took)
	}
	if s.cfg.AccessLog != nil {
		s.logAccess(ctx, took)
	}
}

// maybeGzip compresses an answer over gzipMin when the client accepts gzip.
// A strong ETag becomes weak, since the bytes on the wire differ from the
// identity representation's (If-None-Match compares weakly).
// A HEAD answer is made as GET's is (RFC 9110 §9.3.2: the same header
// fields), its body dropped only when sent.
func (s *Server) maybeGzip(ctx *fasthttp.RequestCtx) {
	resp := &ctx.Response
	body := resp.Body()
	if len(body) < gzipMin || resp.IsBodyStream() {
		return
	}
	resp.Header.Add("Vary", "Accept-Encoding")
	if len(resp.Header.ContentEncoding()) > 0 || !acceptsGzip(ctx.Request.Header.Peek("Accept-Encoding")) {
		return
	}
	bp := bufPool.Get().(*[]byte)
	buf := fasthttp.AppendGzipBytesLevel((*bp)[:0], body, fasthttp.CompressDefaultCompression)
	resp.SetBody(buf) // copies
	*bp = buf
	bufPool.Put(bp)
	resp.Header.SetContentEncoding("gzip")
	if et := resp.Header.Peek("ETag"); len(et) > 0 && !bytes.HasPrefix(et, []byte("W/")) {
		resp.Header.Set("ETag", "W/"+string(et))
	}
}

// acceptsGzip reads an Accept-Encoding value: gzip listed without q=0, or
// else * without q=0 (RFC 9110 §12.5.3: a coding named outranks the
// wildcard, so "*;q=0, gzip" accepts gzip). fasthttp's own check misses
// "gzip;q=0.9" and does not honour q=0.
func acceptsGzip(ae []byte) bool {
	star := -1 // the wildcard's verdict: -1 unseen, 0 refused, 1 accepted
	for len(ae) > 0 {
		var item []byte
		if i := bytes.IndexByte(ae, ','); i >= 0 {
			item, ae = ae[:i], ae[i+1:]
		} else {
			item, ae = ae, nil
		}
		coding, params, _ := bytes.Cut(item, []byte(";"))
		coding = bytes.TrimSpace(coding)
		if !bytes.EqualFold(coding, []byte("gzip")) && !bytes.Equal(coding, []byte("*")) {
			continue
		}
		ok := true
		q := bytes.TrimSpace(params)
		if len(q) >= 2 && (q[0] == 'q' || q[0] == 'Q') && q[1] == '=' {
			v := bytes.TrimRight(bytes.TrimSpace(q[2:]), "0")
			if bytes.Equal(v, []byte("0.")) || bytes.Equal(v, []byte("0")) || len(v) == 0 {
				ok = false // q=0, q=0.0, q=0.000: not acceptable
			}
		}
		if coding[0] != '*' {
			return ok // gzip named: its own verdict
		}
		if star < 0 {
			star = 0
			if ok {
				star = 1
			}
		}
	}
	return star == 1
}

// logAccess writes one structured line per request: never a header, a body
// or a query string, so keys, tokens and emails stay out of the log.
func (s *Server) logAccess(ctx *fasthttp.RequestCtx, took time.Duration) {
	s.logAccessAs(ctx, took, ctx.Method(), ctx.Path())
}

// logAccessAs is logAccess with the request's method and path given: empty
// for a request fasthttp refused before, or discarded after, reading its
// request line, whose header then reads as fasthttp's defaults (GET /).
func (s *Server) logAccessAs(ctx *fasthttp.RequestCtx, took time.Duration, method, path []byte) {
	s.cfg.AccessLog.LogAttrs(context.Background(), slog.LevelInfo, "access",
		slog.String("method", string(method)),
		slog.String("path", string(path)),
		slog.Int("status", ctx.Response.StatusCode()),
		slog.Int("bytes", len(ctx.Response.Body())),
		slog.Int64("us", took.Microseconds()),
		slog.String("client", s.clientAddr(ctx).String()),
		slog.String("request_id", string(ctx.Response.Header.Peek(headerRequestID))),
	)
}

// setChallenge adds the WWW-Authenticate header every 401 carries (RFC 9110
// §11.6.1): Basic for the token endpoint's client authentication (RFC 6749
// §5.2), else Bearer with the protected-resource metadata (RFC 9728, which
// MCP clients follow), and error="invalid_token" when a credential was sent
// (RFC 6750 §3.1).
func (s *Server) setChallenge(ctx *fasthttp.RequestCtx) {
	h := &ctx.Response.Header
	if len(h.Peek("WWW-Authenticate")) > 0 {
		return
	}
	if string(ctx.Path()) == "/oauth/token" {
		h.Set("WWW-Authenticate", `Basic realm="fraudd"`)
		return
	}
	v := `Bearer realm="fraudd", resource_metadata="` + baseURL(ctx) + `/.well-known/oauth-protected-resource"`
	if sentAuthorization(ctx) {
		v += `, error="invalid_token"`
	}
	h.Set("WWW-Authenticate", v)
}
