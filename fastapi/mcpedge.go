package fastapi

import (
	"bytes"
	"math"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/bytedance/sonic"
	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/actors/checks"
	"github.com/fraudd/fraudd/wire"
)

// mcpTransportOK checks what the streamable-HTTP transport asks of a POST
// before anything reads the body: a JSON body, and a client that accepts
// both a JSON answer and an SSE stream. A refusal is a JSON-RPC error.
func (s *Server) mcpTransportOK(ctx *fasthttp.RequestCtx) bool {
	ct, _, _ := bytes.Cut(ctx.Request.Header.ContentType(), []byte(";"))
	if !bytes.EqualFold(bytes.TrimSpace(ct), []byte(contentTypeJSON)) {
		s.rpcError(ctx, fasthttp.StatusUnsupportedMediaType, nil, rpcTransportError, checks.MsgRPCContentType)
		return false
	}
	if jsonOK, sseOK := mcpAccepts(ctx.Request.Header.Peek("Accept")); !jsonOK || !sseOK {
		s.rpcError(ctx, fasthttp.StatusNotAcceptable, nil, rpcTransportError, checks.MsgRPCAccept)
		return false
	}
	return true
}

// mcpAccepts reads an Accept header as the SDK does: media ranges without
// their parameters; application/* and text/* and */* count.
func mcpAccepts(accept []byte) (jsonOK, sseOK bool) {
	for len(accept) > 0 {
		var item []byte
		item, accept, _ = bytes.Cut(accept, []byte(","))
		base, _, _ := bytes.Cut(item, []byte(";"))
		base = bytes.TrimSpace(base)
		switch {
		case bytes.EqualFold(base, []byte("application/json")), bytes.EqualFold(base, []byte("application/*")):
			jsonOK = true
		case bytes.EqualFold(base, []byte("text/event-stream")), bytes.EqualFold(base, []byte("text/*")):
			sseOK = true
		case bytes.Equal(base, []byte("*/*")):
			jsonOK, sseOK = true, true
		}
	}
	return jsonOK, sseOK
}

// rpcID is the id to answer with: the request's own when it is a string or a
// number, null otherwise (JSON-RPC 2.0 §5).
func rpcID(raw sonic.NoCopyRawMessage) sonic.NoCopyRawMessage {
	if len(raw) > 0 && (raw[0] == '"' || raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9')) {
		return raw
	}
	return nil
}

// maxRPCIntID bounds the integer ids the SDK answers with unchanged: it
// decodes an id through float64, exact up to 2^53.
const maxRPCIntID = 1 << 53

// rpcIDValid reports whether a request's id member is one MCP allows and the
// answer carries back as sent: a string, or an integer within ±2^53. MCP:
// "Requests MUST include a string or integer ID", "the ID MUST NOT be null".
// The SDK reads a number as float64 and answers an int64, so 1.5 would come
// back as 1 and 12345678901234567890 as -9223372036854775808.
func rpcIDValid(raw sonic.NoCopyRawMessage) bool {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0:
		return false
	case raw[0] == '"':
		return true
	case raw[0] != '-' && (raw[0] < '0' || raw[0] > '9'):
		return false // null, true, false, an object or an array
	}
	if n, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
		return n >= -maxRPCIntID && n <= maxRPCIntID
	}
	// 1e3 or 7.0: an integer written otherwise is still one.
	f, err := strconv.ParseFloat(string(raw), 64)
	return err == nil && f == math.Trunc(f) && math.Abs(f) <= maxRPCIntID
}

// truncate cuts s to at most n bytes without splitting a character.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// rpcErrorWriter turns the SDK's plain-text HTTP errors (http.Error) into
// JSON-RPC error objects, so every error on /mcp has one shape whatever part
// of the SDK refused the request. JSON answers pass through untouched.
type rpcErrorWriter struct {
	http.ResponseWriter
	status int
	text   []byte
	id     []byte // the request's id when handleMCP read one
}

// rpcErrorWriterMax bounds the SDK text kept for the error message.
const rpcErrorWriterMax = 256

func (w *rpcErrorWriter) WriteHeader(code int) {
	if code >= 400 && w.status == 0 && !strings.HasPrefix(w.Header().Get("Content-Type"), contentTypeJSON) {
		w.status = code
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *rpcErrorWriter) Write(b []byte) (int, error) {
	if w.status != 0 {
		if room := rpcErrorWriterMax - len(w.text); room > 0 {
			w.text = append(w.text, b[:min(room, len(b))]...)
		}
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the adaptor's writer.
func (w *rpcErrorWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finish writes the converted error, if any. A 4xx keeps the SDK's text (it
// names what was wrong with the request); a 5xx says only "Server error.".
func (w *rpcErrorWriter) finish() {
	if w.status == 0 {
		return
	}
	code, msg := rpcTransportError, strings.TrimSpace(strings.ToValidUTF8(string(w.text), ""))
	if w.status == http.StatusBadRequest {
		code = rpcInvalidRequest
	}
	if w.status >= 500 || msg == "" {
		msg = checks.MsgServerError
	}
	id := w.id
	if len(id) == 0 {
		id = []byte("null") // JSON-RPC 2.0 §5: null only when the id could not be read
	}
	body, err := sonic.ConfigStd.Marshal(&wire.RPCError{JSONRPC: "2.0", ID: id, Error: wire.RPCErrorBody{Code: code, Message: msg}})
	if err != nil {
		body = []byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"Server error."}}`)
	}
	h := w.Header()
	h.Del("X-Content-Type-Options")
	h.Set("Content-Type", contentTypeJSON)
	w.ResponseWriter.WriteHeader(w.status)
	_, _ = w.ResponseWriter.Write(body)
}

// withRPCErrors wraps the SDK's handler with rpcErrorWriter.
func withRPCErrors(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ew := &rpcErrorWriter{ResponseWriter: w}
		if call, ok := r.Context().Value(mcpCallKey).(*mcpCall); ok {
			ew.id = call.id
		}
		h.ServeHTTP(ew, r)
		ew.finish()
	})
}
