package fastapi

import (
	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/wire"
)

// handleThreatFeed is GET /api/threat-feed (SPEC 4.6).
func (s *Server) handleThreatFeed(ctx *fasthttp.RequestCtx, r *request) {
	var out wire.ThreatFeed
	var feed FeedReader
	if s.deps.TrafficFeed != nil {
		feed = s.deps.TrafficFeed
	} else if s.deps.Traffic != nil {
		feed = s.deps.Traffic
	}
	if feed != nil {
		f, err := feed.Feed(r.Now)
		if err != nil {
			s.serverError(ctx, "threat feed", err)
			return
		}
		out.Today = wire.FeedToday{Total: f.Today.Total, Threats: f.Today.Threats, VPN: f.Today.VPN, Proxy: f.Today.Proxy, DCH: f.Today.DCH}
		out.WeekTotal = f.WeekTotal
		out.Week = wire.FeedWeek{Total: f.WeekTotal, Threats: f.WeekThreats}
	}
	cov := s.deps.Feeds.Current().Coverage()
	out.Coverage = wire.FeedCoverage{DCRanges: cov.DCRanges, CloudProviders: cov.CloudProviders, TorExits: cov.TorExits, DisposableDomains: cov.DisposableDomains}
	s.writeJSON(ctx, fasthttp.StatusOK, &out)
}
