package fastapi

import (
	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/actors/traffic"
	"github.com/fraudd/fraudd/intel/netlists"
	"github.com/fraudd/fraudd/intel/score"
	"github.com/fraudd/fraudd/wire"
)

// recordEvaluation counts a live-key evaluation for the threat feed. A threat
// is anything the engine itself did not allow (policy overrides aside).
func (s *Server) recordEvaluation(r *request, n *score.Network, res *score.Result) {
	if s.deps.Traffic == nil {
		return
	}
	s.deps.Traffic.Record(traffic.Record{
		Now: r.now, Threat: res.EngineDecision != score.Allow,
		VPN: !n.Degraded && n.VPN, Proxy: !n.Degraded && (n.Proxy || n.OpenProxy || n.PrivacyRelay), DCH: !n.Degraded && n.Datacenter,
	})
}

// recordLookup counts a live-key bare lookup for the threat feed.
func (s *Server) recordLookup(r *request, b *netlists.BareResult) {
	if s.deps.Traffic == nil {
		return
	}
	s.deps.Traffic.Record(traffic.Record{Now: r.now, Threat: b.Verdict != netlists.VerdictAllow, DCH: b.Datacenter})
}

// handleThreatFeed is GET /api/threat-feed (SPEC 4.6).
func (s *Server) handleThreatFeed(ctx *fasthttp.RequestCtx, r *request) {
	var out wire.ThreatFeed
	if s.deps.Traffic != nil {
		f, err := s.deps.Traffic.Feed(r.now)
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
