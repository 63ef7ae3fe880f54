package fastapi

import (
	"bytes"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/wire"
)

// ShardHealth lists the actor shards that cannot serve (*actors.Kinds).
type ShardHealth interface {
	Down() []string
}

var (
	healthzBody = []byte(`{"status":"ok"}`)
	readyBody   = []byte(`{"status":"ready"}`)
)

// handleHealthz is the liveness probe: the process accepts and answers
// requests. It looks at nothing else, so a restart is only ever asked for a
// process that no longer serves.
func (s *Server) handleHealthz(ctx *fasthttp.RequestCtx, _ *request) {
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType(contentTypeJSON)
	ctx.SetBody(healthzBody)
}

// handleReadyz is the readiness probe: 503 while the store is unavailable,
// the feeds are not loaded, or an actor shard is stopped or stuck, so a load
// balancer sends traffic elsewhere until it recovers. It reads flags and
// atomics only (no actor message, no disk), so probing it often costs nothing.
func (s *Server) handleReadyz(ctx *fasthttp.RequestCtx, _ *request) {
	var failing []string
	if s.deps.Store != nil && !s.deps.Store.Available() {
		failing = append(failing, "storage unavailable")
	}
	if s.deps.Feeds != nil && s.deps.Feeds.Current().Coverage().TorExits == 0 {
		failing = append(failing, "feeds not loaded")
	}
	if s.deps.Shards != nil {
		failing = append(failing, s.deps.Shards.Down()...)
	}
	if len(failing) == 0 {
		ctx.SetStatusCode(fasthttp.StatusOK)
		ctx.SetContentType(contentTypeJSON)
		ctx.SetBody(readyBody)
		return
	}
	s.writeJSON(ctx, fasthttp.StatusServiceUnavailable, &wire.Error{
		Error: "Not ready.", Code: "not_ready", Hint: strings.Join(failing, "; ")})
}

// edgeExempt: the edge block does not apply to /mcp (agent clients often send
// no User-Agent) nor to the probes and the metrics scrape (load balancers,
// orchestrators and scrapers send whatever they send). The path is read as
// the router reads it, without leading and trailing slashes: /mcp/ is /mcp.
func edgeExempt(path []byte) bool {
	switch string(bytes.Trim(path, "/")) {
	case "mcp", "healthz", "readyz", "metrics":
		return true
	}
	return false
}
