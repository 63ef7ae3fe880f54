package fastapi

import (
	"sync"

	"github.com/bytedance/sonic/encoder"
	"github.com/valyala/fasthttp"
)

// bufPool holds encode buffers so a response costs no buffer allocation.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

// writeJSON encodes v with sonic into a pooled buffer and sets it as the body.
func (s *Server) writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	bp := bufPool.Get().(*[]byte)
	*bp = (*bp)[:0]
	if err := encoder.EncodeInto(bp, v, 0); err != nil {
		bufPool.Put(bp)
		s.log.Error("encode response", "err", err, "request_id", requestID(ctx))
		ctx.SetStatusCode(fasthttp.StatusInternalServerError)
		ctx.SetContentType(contentTypeJSON)
		ctx.SetBodyString(`{"error":"Server error."}`)
		return
	}
	if status == fasthttp.StatusUnauthorized {
		s.setChallenge(ctx)
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType(contentTypeJSON)
	ctx.SetBody(*bp) // copies
	bufPool.Put(bp)
}
