package rpc

import (
	"errors"
	"fmt"
	"time"

	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/cluster"
	"github.com/fraudd/fraudd/storage"
)

// version is what every message this build sends carries.
const version = uint32(cluster.ProtocolVersion)

// errBadRequest is a request the receiver cannot act on: a peer bug, never a
// client's input (every request comes from another fraudd node).
var errBadRequest = errors.New("cluster rpc: malformed request")

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

func limitsMsg(l *quota.Limits) *Limits {
	return &Limits{Plan: l.Plan, Hourly: l.Hourly, Monthly: l.Monthly, MonthlyLookups: l.MonthlyLookups, GrandfatheredUnixNano: unixNano(l.Grandfathered)}
}

func limitsOf(m *Limits) quota.Limits {
	return quota.Limits{Plan: m.GetPlan(), Hourly: m.GetHourly(), Monthly: m.GetMonthly(), MonthlyLookups: m.GetMonthlyLookups(), Grandfathered: fromUnixNano(m.GetGrandfatheredUnixNano())}
}

func chargeMsg(c *quota.Charge, token int64) *ChargeRequest {
	return &ChargeRequest{
		Version: version, Account: c.Account, Bucket: uint32(c.Bucket), Kind: uint32(c.Kind), Limits: limitsMsg(&c.Limits),
		Hourly: c.Hourly, Monthly: c.Monthly, Total: c.Total, NowUnixNano: c.Now.UnixNano(), Token: token,
	}
}

// chargeOf checks and converts a request: enums in range, an account (of at
// most maxObsAccountID bytes, as every request naming one), limits
// and a time, so that no peer's message reaches an actor half-formed.
func chargeOf(r *ChargeRequest) (quota.Charge, error) {
	if r.GetVersion() == 0 || r.GetAccount() == "" || len(r.GetAccount()) > maxObsAccountID || r.GetBucket() > uint32(quota.Test) || r.GetKind() > uint32(quota.Lookup) || r.GetLimits() == nil || r.GetNowUnixNano() <= 0 {
		return quota.Charge{}, fmt.Errorf("%w: charge for %q", errBadRequest, r.GetAccount())
	}
	return quota.Charge{
		Account: r.Account, Bucket: quota.Bucket(r.Bucket), Kind: quota.Kind(r.Kind), Limits: limitsOf(r.Limits),
		Hourly: r.Hourly, Monthly: r.Monthly, Total: r.Total, Now: fromUnixNano(r.NowUnixNano),
	}, nil
}

func chargeReply(res *quota.ChargeResult, token int64) *ChargeReply {
	return &ChargeReply{
		Version: version, Allowed: res.Allowed, Refusal: uint32(res.Refusal), Capped: res.Capped,
		Limit: res.Limit, Remaining: res.Remaining, ResetUnix: res.Reset, RetryAfter: res.RetryAfter, Token: token,
	}
}

func chargeResultOf(r *ChargeReply) (quota.ChargeResult, error) {
	if r.GetRefusal() > uint32(quota.RefusedMonthly) || r.GetAllowed() != (r.GetRefusal() == uint32(quota.NotRefused)) {
		return quota.ChargeResult{}, fmt.Errorf("cluster rpc: charge reply: allowed %v with refusal %d", r.GetAllowed(), r.GetRefusal())
	}
	return quota.ChargeResult{
		Allowed: r.Allowed, Refusal: quota.Refusal(r.Refusal), Capped: r.Capped,
		Limit: r.Limit, Remaining: r.Remaining, Reset: r.ResetUnix, RetryAfter: r.RetryAfter,
	}, nil
}

func usageMsg(u *quota.Usage, token int64) *UsageRequest {
	return &UsageRequest{Version: version, Account: u.Account, Bucket: uint32(u.Bucket), Limits: limitsMsg(&u.Limits), NowUnixNano: u.Now.UnixNano(), Token: token}
}

func usageOf(r *UsageRequest) (quota.Usage, error) {
	if r.GetVersion() == 0 || r.GetAccount() == "" || len(r.GetAccount()) > maxObsAccountID || r.GetBucket() > uint32(quota.Test) || r.GetLimits() == nil || r.GetNowUnixNano() <= 0 {
		return quota.Usage{}, fmt.Errorf("%w: usage for %q", errBadRequest, r.GetAccount())
	}
	return quota.Usage{Account: r.Account, Bucket: quota.Bucket(r.Bucket), Limits: limitsOf(r.Limits), Now: fromUnixNano(r.NowUnixNano)}, nil
}

func optTime(t *time.Time) *int64 {
	if t == nil {
		return nil
	}
	n := t.UnixNano()
	return &n
}

func timeOpt(n *int64) *time.Time {
	if n == nil {
		return nil
	}
	t := fromUnixNano(*n)
	return &t
}

func usageReply(v *quota.UsageView, token int64) *UsageReply {
	return &UsageReply{
		Version: version, KeyType: v.KeyType, HourlyLimit: v.HourlyLimit, UsedThisHour: v.UsedThisHour,
		Remaining: v.Remaining, Uncapped: v.Uncapped, ResetsAtUnixNano: optTime(v.ResetsAt),
		TotalEvaluations: v.TotalEvaluations, LimitHits: v.LimitHits, Plan: v.Plan,
		MonthlyLimit: v.MonthlyLimit, MonthUsed: v.MonthUsed, MonthlyLookupLimit: v.MonthlyLookupLimit,
		MonthLookupsUsed: v.MonthLookupsUsed, MonthResetsAtUnixNano: unixNano(v.MonthResetsAt),
		GrandfatheredUntilUnixNano: optTime(v.GrandfatheredUntil), Token: token,
	}
}

func usageViewOf(r *UsageReply) quota.UsageView {
	return quota.UsageView{
		KeyType: r.KeyType, HourlyLimit: r.HourlyLimit, UsedThisHour: r.UsedThisHour,
		Remaining: r.Remaining, Uncapped: r.Uncapped, ResetsAt: timeOpt(r.ResetsAtUnixNano),
		TotalEvaluations: r.TotalEvaluations, LimitHits: r.LimitHits, Plan: r.Plan,
		MonthlyLimit: r.MonthlyLimit, MonthUsed: r.MonthUsed, MonthlyLookupLimit: r.MonthlyLookupLimit,
		MonthLookupsUsed: r.MonthLookupsUsed, MonthResetsAt: fromUnixNano(r.MonthResetsAtUnixNano),
		GrandfatheredUntil: timeOpt(r.GrandfatheredUntilUnixNano),
	}
}

func originShareMsg(s *storage.OriginShare) *OriginShare {
	return &OriginShare{
		Node: s.Origin, Account: s.Account, Month: uint32(s.Month),
		Used: s.Counts.Used, Lookups: s.Counts.Lookups, Warned: uint32(s.Counts.Warned),
		Evaluations: s.Totals.Evaluations, LimitHits: s.Totals.LimitHits,
		HourWarnedEighty: s.Totals.HourWarned[0], HourWarnedCap: s.Totals.HourWarned[1],
	}
}

// originShareOf checks a share from the wire: a member and an account
// named, a real month or none, no negative count.
func originShareOf(m *OriginShare) (storage.OriginShare, error) {
	mo := storage.Month(m.GetMonth())
	if m.GetNode() == "" || m.GetAccount() == "" || len(m.GetAccount()) > maxObsAccountID || (mo != 0 && (mo%100 < 1 || mo%100 > 12)) || m.GetWarned() > 0xff ||
		m.GetUsed() < 0 || m.GetLookups() < 0 || m.GetEvaluations() < 0 || m.GetLimitHits() < 0 ||
		m.GetHourWarnedEighty() < 0 || m.GetHourWarnedCap() < 0 {
		return storage.OriginShare{}, fmt.Errorf("%w: share of %q from %q month %d", errBadRequest, m.GetAccount(), m.GetNode(), mo)
	}
	return storage.OriginShare{
		Origin: m.Node, Account: m.Account, Month: mo,
		Counts: storage.MonthCounts{Used: m.Used, Lookups: m.Lookups, Warned: uint8(m.Warned)},
		Totals: storage.Totals{Evaluations: m.Evaluations, LimitHits: m.LimitHits,
			HourWarned: [2]int64{m.HourWarnedEighty, m.HourWarnedCap}},
	}, nil
}

func leaseMsg(l *quota.Lease, token, reportToken int64) *LeaseRequest {
	return &LeaseRequest{
		Version: version, Account: l.Account, Holder: l.Holder, Bucket: uint32(l.Bucket), Kind: uint32(l.Kind), Limits: limitsMsg(&l.Limits),
		Hourly: l.Hourly, Monthly: l.Monthly, Total: l.Total, Want: l.Want, ForNanos: int64(l.For), Token: token,
		ReportSeq: l.Report.Seq, ReportUsed: l.Report.Used, ReportToken: reportToken, ReportUntilUnixMs: unixMilliOrZero(l.Report.Until),
	}
}

// unixMilliOrZero is t in Unix milliseconds, 0 for the zero time.
func unixMilliOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// maxReportUntil bounds a report's end of use (Unix milliseconds: the
// year 9999), so that it converts back and forth exactly.
const maxReportUntil = 253402300799999

// leaseOf checks and converts a request, as chargeOf does; Now, Members,
// Keep and Report.SameClaim are the owner's to set.
func leaseOf(r *LeaseRequest) (quota.Lease, error) {
	if r.GetVersion() == 0 || r.GetAccount() == "" || len(r.GetAccount()) > maxObsAccountID || r.GetHolder() == "" || r.GetBucket() > uint32(quota.Test) || r.GetKind() > uint32(quota.Lookup) ||
		r.GetLimits() == nil || r.GetWant() < 0 || r.GetWant() > maxSlice || r.GetForNanos() <= 0 || r.GetForNanos() > int64(maxLeaseFor) || r.GetReportUsed() < 0 ||
		r.GetReportUntilUnixMs() < 0 || r.GetReportUntilUnixMs() > maxReportUntil {
		return quota.Lease{}, fmt.Errorf("%w: lease for %q", errBadRequest, r.GetAccount())
	}
	return quota.Lease{
		Account: r.Account, Holder: r.Holder, Bucket: quota.Bucket(r.Bucket), Kind: quota.Kind(r.Kind), Limits: limitsOf(r.Limits),
		Hourly: r.Hourly, Monthly: r.Monthly, Total: r.Total, Want: r.Want, For: time.Duration(r.ForNanos),
		Report: quota.LeaseReport{Seq: r.ReportSeq, Used: r.ReportUsed, Until: timeOfUnixMilli(r.ReportUntilUnixMs)},
	}, nil
}

// timeOfUnixMilli is unixMilliOrZero's inverse.
func timeOfUnixMilli(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

func leaseReply(g *quota.LeaseGrant, token int64) *LeaseReply {
	return &LeaseReply{Version: version, Seq: g.Seq, Units: g.Units, Capped: g.Capped, Limit: g.Limit, Remaining: g.Remaining, ResetUnix: g.Reset, Token: token}
}

func leaseGrantOf(r *LeaseReply) (quota.LeaseGrant, error) {
	if r.GetUnits() < 0 || r.GetUnits() > maxSlice || (r.GetUnits() > 0) != (r.GetSeq() != 0) || r.GetRemaining() < 0 {
		return quota.LeaseGrant{}, fmt.Errorf("cluster rpc: lease reply: %d units as slice %d", r.GetUnits(), r.GetSeq())
	}
	return quota.LeaseGrant{Seq: r.Seq, Units: r.Units, Capped: r.Capped, Limit: r.Limit, Remaining: r.Remaining, Reset: r.ResetUnix}, nil
}
