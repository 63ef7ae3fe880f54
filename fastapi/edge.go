package fastapi

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/actors/checks"
)

// HTTP framing limits, checked before routing.
const (
	// readBufferSize bounds the request line and headers together (fasthttp
	// reads them into one buffer): larger is 431.
	readBufferSize = 8 << 10
	// maxURILen bounds the request target: longer is 414.
	maxURILen = 4 << 10
	// lingerMax and lingerFor bound how much of an unread request body is
	// drained, and for how long, before a refused connection closes (net/http
	// discards up to 256 KiB and waits 500 ms the same way).
	lingerMax = 256 << 10
	lingerFor = 500 * time.Millisecond
)

// framingOK refuses what fasthttp parsed but a careful server must not
// serve: an over-long target (414), and a request that carries both
// Content-Length and Transfer-Encoding (400, connection closed: RFC 9112 §6.1
// — proxies in front may have read its body the other way, the root of
// request smuggling). fasthttp reads such a body as chunked and keeps no sign
// of the Content-Length but the raw header block; when the chunked body is
// empty it also sets Content-Length 0 and drops Transfer-Encoding; and it
// ignores "Transfer-Encoding: identity" beside a Content-Length. So the raw
// block is scanned for a Content-Length in chunked requests and for a
// Transfer-Encoding in those with a length (a GET has -2 and costs nothing).
func (s *Server) framingOK(ctx *fasthttp.RequestCtx) bool {
	h := &ctx.Request.Header
	if len(h.RequestURI()) > maxURILen {
		ctx.SetConnectionClose()
		s.writeError(ctx, fasthttp.StatusRequestURITooLong, checks.MsgURITooLong, "", fmt.Sprintf(checks.HintURITooLong, maxURILen))
		return false
	}
	if cl := h.ContentLength(); (cl == -1 || cl >= 0 && hasRawHeader(h.RawHeaders(), "transfer-encoding")) &&
		hasRawHeader(h.RawHeaders(), "content-length") {
		ctx.SetConnectionClose()
		s.writeError(ctx, fasthttp.StatusBadRequest, checks.MsgBadRequest, "", checks.HintLengthAndChunks)
		return false
	}
	return true
}

// hasRawHeader reports whether the raw header block has a field named name
// (lower case), whatever its case. It runs on every request with a body: a
// line whose first byte cannot begin name is passed over unread.
func hasRawHeader(raw []byte, name string) bool {
	for len(raw) > 0 {
		var line []byte
		line, raw, _ = bytes.Cut(raw, []byte("\n"))
		if len(line) < len(name) || line[0]|0x20 != name[0] && line[0] > ' ' {
			continue // not name: too short, or another first letter (space-led lines are read)
		}
		k, _, ok := bytes.Cut(line, []byte(":"))
		if ok && bytes.EqualFold(bytes.TrimSpace(k), []byte(name)) {
			return true
		}
	}
	return false
}

// lingerListener hands out connections that, when the server refuses a
// request whose body it did not read (413, a parse error), close gently:
// send the answer's FIN first, then drain what the client is still sending,
// bounded, before closing. Closing with unread input makes the kernel send a
// reset, and a client still writing its body then loses the answer to
// "broken pipe" or "connection reset".
type lingerListener struct{ net.Listener }

func (l lingerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &lingerConn{Conn: c}, nil
}

type lingerConn struct {
	net.Conn
	linger atomic.Bool
}

// lingerOnClose marks the request's connection for a gentle close.
func lingerOnClose(ctx *fasthttp.RequestCtx) {
	if c, ok := ctx.Conn().(*lingerConn); ok {
		c.linger.Store(true)
	}
}

func (c *lingerConn) Close() error {
	if !c.linger.Swap(false) {
		return c.Conn.Close()
	}
	go c.drainAndClose()
	return nil
}

func (c *lingerConn) drainAndClose() {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.Conn.SetReadDeadline(time.Now().Add(lingerFor))
	_, _ = io.CopyN(io.Discard, c.Conn, lingerMax)
	_ = c.Conn.Close()
}

// errSmallBuffer: the request line and headers did not fit the read buffer.
func errSmallBuffer(err error) bool {
	var sb *fasthttp.ErrSmallBuffer
	return errors.As(err, &sb) || errors.Is(err, fasthttp.ErrSmallReadBuffer)
}

// utf8BOM is the byte order mark some tools write before a UTF-8 body.
const utf8BOM = "\xef\xbb\xbf"

// decodeBody reads a request body sent with a Content-Encoding (RFC 9110
// §8.4): decoded in place, to the same 64 KiB as a plain body, so that every
// handler reads what was sent. Read as it came, a gzip-coded form was a body
// without a token: a degraded allow. An encoding it does not know is 415
// (RFC 9110 §15.5.16, with the Accept-Encoding it reads), a body that is not
// valid data in its encoding 400, one that decodes past the limit 413.
func (s *Server) decodeBody(ctx *fasthttp.RequestCtx) bool {
	h := &ctx.Request.Header
	enc := strings.ToLower(strings.TrimSpace(string(h.ContentEncoding())))
	var body []byte
	var err error
	switch enc {
	case "identity":
		h.Del(fasthttp.HeaderContentEncoding)
		return true
	case "gzip", "x-gzip":
		body, err = ctx.Request.BodyGunzipWithLimit(maxAPIBody)
	case "deflate":
		body, err = ctx.Request.BodyInflateWithLimit(maxAPIBody)
	case "br":
		body, err = ctx.Request.BodyUnbrotliWithLimit(maxAPIBody)
	case "zstd":
		body, err = ctx.Request.BodyUnzstdWithLimit(maxAPIBody)
	default:
		ctx.Response.Header.Set(fasthttp.HeaderAcceptEncoding, "gzip, deflate, br, zstd")
		s.bodyError(ctx, fasthttp.StatusUnsupportedMediaType, checks.MsgContentEncoding, checks.HintContentEncoding)
		return false
	}
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		s.bodyError(ctx, fasthttp.StatusRequestEntityTooLarge, checks.MsgTooLarge, fmt.Sprintf(checks.HintDecodedTooLarge, maxAPIBody))
		return false
	case err != nil:
		s.bodyError(ctx, fasthttp.StatusBadRequest, checks.MsgBadRequest, fmt.Sprintf(checks.HintBodyNotDecoded, enc))
		return false
	}
	ctx.Request.SetBody(body)
	h.Del(fasthttp.HeaderContentEncoding)
	return true
}

// bodyError refuses a body decodeBody cannot read: on /mcp as the JSON-RPC
// error every answer there is (README: "on /mcp, JSON-RPC error objects"),
// a body that does not decode being a parse error; elsewhere in the
// route's own shape (writeError: the API's, or the token endpoint's).
func (s *Server) bodyError(ctx *fasthttp.RequestCtx, status int, msg, hint string) {
	if bytes.Equal(bytes.Trim(ctx.Path(), "/"), []byte("mcp")) {
		if !s.mcpOriginOK(ctx) { // an unlisted origin reads nothing more
			return
		}
		code := rpcTransportError
		if status == fasthttp.StatusBadRequest {
			code = rpcParseError
		}
		mcpCORS(ctx)
		s.rpcError(ctx, status, nil, code, msg+" "+hint)
		return
	}
	s.writeError(ctx, status, msg, "", hint)
}
