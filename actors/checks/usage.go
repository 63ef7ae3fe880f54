package checks

import (
	"fmt"

	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/wire"
)

// Usage is GET /v1/usage (SPEC 4.4) for an admitted caller: the calling
// key's own figures, consuming nothing.
func (s *Service) Usage(c *Call) (*wire.Usage, *Refusal) {
	v := c.Auth.View
	u, err := s.quota.Usage(quota.Usage{Account: v.ID, Bucket: bucketOf(c.Auth.Kind), Limits: limitsOf(v, c.Now), Now: c.Now})
	if err != nil {
		return nil, storageUnavailable(fmt.Errorf("quota usage of %s: %w", v.ID, err))
	}
	return &wire.Usage{
		KeyType: u.KeyType, HourlyLimit: u.HourlyLimit, UsedThisHour: u.UsedThisHour, Remaining: u.Remaining,
		Uncapped: u.Uncapped, TotalEvaluations: u.TotalEvaluations, LimitHits: u.LimitHits, Plan: u.Plan,
		MonthlyLimit: u.MonthlyLimit, MonthUsed: u.MonthUsed, MonthlyLookupLimit: u.MonthlyLookupLimit,
		MonthLookupsUsed: u.MonthLookupsUsed, MonthResetsAt: wire.Time(u.MonthResetsAt),
		ResetsAt: wire.OptTime(u.ResetsAt), GrandfatheredUntil: wire.OptTime(u.GrandfatheredUntil),
	}, nil
}
