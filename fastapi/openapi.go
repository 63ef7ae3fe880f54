package fastapi

import (
	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/api"
)

// handleOpenAPI is GET /openapi.json: the OpenAPI 3.1 document of every
// route in the table (api/openapi.yaml), gzipped over the wire when asked.
func (s *Server) handleOpenAPI(ctx *fasthttp.RequestCtx, _ *request) {
	ctx.Response.Header.Set("Cache-Control", "public, max-age=300")
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType(contentTypeJSON)
	ctx.SetBody(api.OpenAPIJSON)
}
