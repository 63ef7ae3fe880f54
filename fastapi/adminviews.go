package fastapi

import (
	"cmp"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/actors/checks"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/actors/recent"
	"github.com/fraudd/fraudd/wire"
)

// The admin views the console reads besides ADMIN.md's own: the account
// list, an account's usage with its daily counts, its recent evaluations,
// and the feeds' freshness.

// Limits of the admin lists.
const (
	accountsDefault = 50
	accountsMax     = 200
	evalsDefault    = 50
	// usageDays is the daily chart's span, today included.
	usageDays = 30
)

// queryLimit reads ?limit= (def when absent); ok is false after answering 400.
func (s *Server) queryLimit(ctx *fasthttp.RequestCtx, def, most int) (int, bool) {
	raw := ctx.QueryArgs().Peek("limit")
	if raw == nil {
		return def, true
	}
	n, err := strconv.Atoi(string(raw))
	if err != nil || n < 1 || n > most {
		s.badRequest(ctx, checks.MsgListLimit, most)
		return 0, false
	}
	return n, true
}

// adminListAccounts is GET /admin/v1/accounts?q=&limit=: accounts whose
// email contains q or whose id starts with q (case-insensitive), newest
// first.
func (s *Server) adminListAccounts(ctx *fasthttp.RequestCtx, r *request) {
	limit, ok := s.queryLimit(ctx, accountsDefault, accountsMax)
	if !ok {
		return
	}
	q := strings.ToLower(strings.TrimSpace(string(ctx.QueryArgs().Peek("q"))))
	var found []*accounts.View
	s.deps.Accounts.Range(func(v *accounts.View) bool {
		if q == "" || strings.Contains(strings.ToLower(v.Email), q) || strings.HasPrefix(strings.ToLower(v.ID), q) {
			found = append(found, v)
		}
		return true
	})
	slices.SortFunc(found, func(a, b *accounts.View) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	out := make([]*wire.Account, 0, min(len(found), limit))
	for _, v := range found[:min(len(found), limit)] {
		out = append(out, accountView(v, r.Now))
	}
	ctx.Response.Header.Set("X-Total-Count", strconv.Itoa(len(found)))
	s.writeJSON(ctx, fasthttp.StatusOK, out)
}

// adminUsage is GET /admin/v1/accounts/{id}/usage: the live and test keys'
// figures (as /v1/usage shows each) and the last 30 UTC days' counts,
// oldest first, today last.
func (s *Server) adminUsage(ctx *fasthttp.RequestCtx, r *request) {
	v, ref := s.account(r)
	if ref != nil {
		s.refuse(ctx, ref)
		return
	}
	limits := quota.LimitsFor(v.Plan, v.HourlyLimit, v.MonthlyLimit, v.CreatedAt, r.Now)
	var out wire.AccountUsage
	for _, b := range []struct {
		bucket quota.Bucket
		dst    *wire.Usage
	}{{quota.Live, &out.Live}, {quota.Test, &out.Test}} {
		u, err := s.deps.Quota.Usage(quota.Usage{Account: v.ID, Bucket: b.bucket, Limits: limits, Now: r.Now})
		if err != nil {
			s.log.Error("quota usage failed", "err", err, "account", v.ID, "request_id", requestID(ctx))
			s.storageUnavailable(ctx)
			return
		}
		*b.dst = usageWire(&u)
	}
	days, err := s.deps.Quota.Daily(v.ID, r.Now, usageDays)
	if err != nil {
		s.log.Error("daily usage failed", "err", err, "account", v.ID, "request_id", requestID(ctx))
		s.storageUnavailable(ctx)
		return
	}
	out.Daily = make([]wire.DayUsage, 0, len(days))
	for _, d := range days {
		out.Daily = append(out.Daily, wire.DayUsage{Day: d.Day.Format(time.DateOnly), Used: d.Used, Lookups: d.Lookups})
	}
	s.writeJSON(ctx, fasthttp.StatusOK, &out)
}

func usageWire(u *quota.UsageView) wire.Usage {
	return wire.Usage{
		KeyType: u.KeyType, HourlyLimit: u.HourlyLimit, UsedThisHour: u.UsedThisHour, Remaining: u.Remaining,
		Uncapped: u.Uncapped, TotalEvaluations: u.TotalEvaluations, LimitHits: u.LimitHits, Plan: u.Plan,
		MonthlyLimit: u.MonthlyLimit, MonthUsed: u.MonthUsed, MonthlyLookupLimit: u.MonthlyLookupLimit,
		MonthLookupsUsed: u.MonthLookupsUsed, MonthResetsAt: wire.Time(u.MonthResetsAt),
		ResetsAt: wire.OptTime(u.ResetsAt), GrandfatheredUntil: wire.OptTime(u.GrandfatheredUntil),
	}
}

// adminEvaluations is GET /admin/v1/accounts/{id}/evaluations?limit=: the
// account's most recent evaluations (at most 200, none older than 7 days),
// newest first.
func (s *Server) adminEvaluations(ctx *fasthttp.RequestCtx, r *request) {
	limit, ok := s.queryLimit(ctx, evalsDefault, recent.Size)
	if !ok {
		return
	}
	v, ref := s.account(r)
	if ref != nil {
		s.refuse(ctx, ref)
		return
	}
	out := []wire.RecentEvaluation{}
	if lister := s.evaluationLister(); lister != nil {
		list, err := lister.List(recent.List{Account: v.ID, Now: r.Now, Limit: limit})
		if err != nil {
			if errors.Is(err, recent.ErrUnavailable) {
				s.storageUnavailable(ctx)
				return
			}
			s.serverError(ctx, "list recent evaluations", err)
			return
		}
		for _, e := range list {
			out = append(out, recentWire(e))
		}
	}
	s.writeJSON(ctx, fasthttp.StatusOK, out)
}

func recentWire(e *recent.Evaluation) wire.RecentEvaluation {
	w := wire.RecentEvaluation{At: e.At.UTC().Format(time.RFC3339Nano), RequestID: e.RequestID, Decision: e.Decision,
		EngineDecision: e.EngineDecision, DecisionSource: e.Source, RuleMatched: nonNil(e.RuleMatched),
		RiskScore: e.Risk, Reasons: nonNil(e.Reasons), IP: e.IP, Test: e.Test}
	if w.DecisionSource == "" {
		w.DecisionSource = "engine"
	}
	if e.Rule != "" {
		w.Rule = &e.Rule
	}
	if e.Exception != "" {
		w.ExceptionMatched = &e.Exception
	}
	if e.Country != "" {
		w.Country = &e.Country
	}
	return w
}

// adminFeeds is GET /admin/v1/feeds: each intelligence feed's snapshot date,
// age, entry count and origin (the same table as `fraudd feeds status`).
func (s *Server) adminFeeds(ctx *fasthttp.RequestCtx, r *request) {
	out := []wire.FeedFreshness{}
	today := r.Now.UTC().Truncate(24 * time.Hour)
	for _, f := range s.deps.Feeds.Current().Feeds() {
		w := wire.FeedFreshness{Name: f.Name, Entries: f.Entries, Source: f.Source}
		if f.Date != "" {
			date := f.Date
			w.Date = &date
			if d, err := time.Parse(time.DateOnly, f.Date); err == nil {
				age := max(int(today.Sub(d)/(24*time.Hour)), 0)
				w.AgeDays = &age
			}
		}
		out = append(out, w)
	}
	s.writeJSON(ctx, fasthttp.StatusOK, out)
}
