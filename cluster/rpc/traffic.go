package rpc

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fraudd/fraudd/actors/traffic"
)

// FeedReader reads threat-feed counts (*traffic.Counter, or ClusterFeed).
type FeedReader interface {
	Feed(now time.Time) (traffic.Feed, error)
}

// Traffic implements NodeServer: this node's own counts, at its clock.
func (s *Server) Traffic(_ context.Context, r *TrafficRequest) (*TrafficReply, error) {
	if r.GetVersion() == 0 {
		return nil, status.Error(codes.InvalidArgument, fmt.Sprintf("%v: traffic without a version", errBadRequest))
	}
	if s.cfg.Traffic == nil {
		return nil, status.Error(codes.Unavailable, "cluster rpc: this node counts no traffic")
	}
	f, err := s.cfg.Traffic.Feed(s.cfg.Now())
	if err != nil {
		return nil, status.Error(codes.Unavailable, fmt.Sprintf("traffic: %v", err))
	}
	return &TrafficReply{
		Version: version, Node: s.cfg.Owners.Self(),
		TodayTotal: f.Today.Total, TodayThreats: f.Today.Threats, TodayVpn: f.Today.VPN, TodayProxy: f.Today.Proxy, TodayDch: f.Today.DCH,
		WeekTotal: f.WeekTotal, WeekThreats: f.WeekThreats,
	}, nil
}

// ClusterFeed is the threat feed of a cluster node: its own counts plus
// every other live member's, asked in parallel within the client's Timeout
// (each node counts the traffic it served). A member that does not answer
// is left out of the sum and named in Missing and in a warning; the feed
// still answers.
type ClusterFeed struct {
	Local FeedReader
	Peers *Quota
	Log   *slog.Logger
}

// Feed implements FeedReader.
func (c *ClusterFeed) Feed(now time.Time) (traffic.Feed, error) {
	f, _, err := c.FeedFrom(context.Background(), now)
	return f, err
}

// FeedFrom is Feed, with the members that did not answer, sorted.
func (c *ClusterFeed) FeedFrom(ctx context.Context, now time.Time) (traffic.Feed, []string, error) {
	f, err := c.Local.Feed(now)
	if err != nil {
		return traffic.Feed{}, nil, err
	}
	q := c.Peers
	ctx, cancel := context.WithTimeout(ctx, q.cfg.Timeout)
	defer cancel()
	var missing []string
	eachOther(q, func(id string) (*TrafficReply, error) { return q.traffic(ctx, id) },
		func(id string, r *TrafficReply, err error) {
			if err != nil {
				missing = append(missing, id)
				if c.Log != nil {
					c.Log.Warn("cluster: a member's threat-feed counts are missing from the sum", "member", id, "err", err)
				}
				return
			}
			f.Today.Total += r.TodayTotal
			f.Today.Threats += r.TodayThreats
			f.Today.VPN += r.TodayVpn
			f.Today.Proxy += r.TodayProxy
			f.Today.DCH += r.TodayDch
			f.WeekTotal += r.WeekTotal
			f.WeekThreats += r.WeekThreats
		})
	sort.Strings(missing)
	return f, missing, nil
}

var _ FeedReader = (*ClusterFeed)(nil)

func (q *Quota) traffic(ctx context.Context, id string) (*TrafficReply, error) {
	p, err := q.peer(id)
	if err != nil {
		return nil, err
	}
	r, err := p.cli.Traffic(ctx, &TrafficRequest{Version: version})
	if err != nil {
		return nil, err
	}
	if r.Node != id {
		return nil, fmt.Errorf("member %s answered traffic as %q: %w", id, r.Node, errBadRequest)
	}
	if r.TodayThreats > r.TodayTotal || r.WeekThreats > r.WeekTotal {
		return nil, fmt.Errorf("member %s answered inconsistent traffic counts: %w", id, errBadRequest)
	}
	return r, nil
}
