package fastapi

import (
	"fmt"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/fastapi/wire"
)

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

// handleStatus answers /api/status; tests use it as the readiness probe.
func (s *Server) handleStatus(ctx *fasthttp.RequestCtx, r *request) {
	st := s.statusPayload(r.now)
	s.writeJSON(ctx, fasthttp.StatusOK, &st)
}

// statusPayload is the SPEC 2.4 status, shared with the MCP service_status tool.
func (s *Server) statusPayload(now time.Time) wire.Status {
	up := now.Sub(s.cfg.StartedAt)
	if up < 0 {
		up = 0
	}
	health := func(ok bool) wire.ServiceHealth {
		if ok {
			return wire.ServiceHealth{Status: "operational", UptimePct: 100}
		}
		return wire.ServiceHealth{Status: "degraded", UptimePct: 0}
	}
	storeOK := s.deps.Store == nil || s.deps.Store.Available()
	st := wire.Status{
		Status: "operational",
		Uptime: wire.Uptime{
			Days:    int(up / (24 * time.Hour)),
			Hours:   int(up/time.Hour) % 24,
			Minutes: int(up/time.Minute) % 60,
			Started: s.cfg.StartedAt.UTC().Format(time.RFC3339),
		},
		Services: wire.Services{
			API: health(true), Storage: health(storeOK), Authentication: health(storeOK), Feeds: health(true),
		},
		LastProbe: now.UTC().Format(time.RFC3339),
		Version:   s.cfg.Version,
	}
	if !storeOK {
		st.Status = "degraded"
	}
	return st
}
