package fastapi

import (
	"slices"
	"time"

	"github.com/bytedance/sonic"
	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/wire"
)

// statusBody is an encoded status answer and the second it was built in.
type statusBody struct {
	sec  int64
	body []byte
}

// handleStatus answers /api/status; tests use it as the readiness probe. The
// answer (about 10 KB with history_90d) is built at most once a second: its
// figures move by the minute and the health probe's tick, and monitors poll
// it hard.
func (s *Server) handleStatus(ctx *fasthttp.RequestCtx, r *request) {
	sec := r.Now.Unix()
	if c := s.status.Load(); c != nil && c.sec == sec {
		ctx.SetStatusCode(fasthttp.StatusOK)
		ctx.SetContentType(contentTypeJSON)
		ctx.SetBody(c.body)
		return
	}
	st := s.statusPayload(r.Now)
	body, err := sonic.ConfigDefault.Marshal(&st)
	if err != nil {
		s.serverError(ctx, "encode status", err)
		return
	}
	s.status.Store(&statusBody{sec: sec, body: body})
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType(contentTypeJSON)
	ctx.SetBody(body)
}

// statusPayload is the SPEC 2.4 status, shared with the MCP service_status tool.
func (s *Server) statusPayload(now time.Time) wire.Status {
	up := now.Sub(s.cfg.StartedAt)
	if up < 0 {
		up = 0
	}
	health := func(ok bool, pct float64) wire.ServiceHealth {
		if ok {
			return wire.ServiceHealth{Status: "operational", UptimePct: pct}
		}
		return wire.ServiceHealth{Status: "degraded", UptimePct: pct}
	}
	storeOK := s.deps.Store == nil || s.deps.Store.Available()
	// An actor shard its supervisor stopped makes part of the API fail until
	// it is restarted; the accounts actor carries every admin change.
	var down []string
	if s.deps.Health != nil {
		down = s.deps.Health.Down()
	}
	actorsOK := len(down) == 0
	accountsOK := !slices.Contains(down, "accounts")
	st := wire.Status{
		Status: "operational",
		Uptime: wire.Uptime{
			Days:    int(up / (24 * time.Hour)),
			Hours:   int(up/time.Hour) % 24,
			Minutes: int(up/time.Minute) % 60,
			Started: s.cfg.StartedAt.UTC().Format(time.RFC3339),
		},
		Services: wire.Services{
			API: health(actorsOK, 100), Storage: health(storeOK, 100), Authentication: health(storeOK && accountsOK, 100), Feeds: health(true, 100),
		},
		LastProbe: now.UTC().Format(time.RFC3339),
		Version:   s.cfg.Version,
	}
	if s.deps.Health != nil {
		rep, err := s.deps.Health.Report(now)
		if err != nil {
			// The health actor itself did not answer.
			s.log.Warn("status: health report unavailable", "err", err)
			st.Services.API = health(false, 100)
		} else {
			st.Services = wire.Services{
				API:            health(rep.API.OK && actorsOK, rep.API.UptimePct),
				Storage:        health(rep.Storage.OK && storeOK, rep.Storage.UptimePct),
				Authentication: health(rep.Auth.OK && storeOK && accountsOK, rep.Auth.UptimePct),
				Feeds:          health(rep.Feeds.OK, rep.Feeds.UptimePct),
			}
			if !rep.LastProbe.IsZero() {
				st.LastProbe = rep.LastProbe.UTC().Format(time.RFC3339)
			}
			st.History90d = make([]wire.HistoryDay, 0, len(rep.History))
			for _, d := range rep.History {
				st.History90d = append(st.History90d, wire.HistoryDay{Day: d.Day.Format("2006-01-02"), Pct: d.Pct,
					Samples: d.Samples, APIPct: d.APIPct, DashboardPct: d.DashboardPct, AuthenticationPct: d.AuthPct})
			}
		}
	}
	if st.Services.Storage.Status != "operational" || st.Services.Feeds.Status != "operational" ||
		st.Services.API.Status != "operational" || st.Services.Authentication.Status != "operational" {
		st.Status = "degraded"
	}
	return st
}
