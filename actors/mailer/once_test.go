package mailer

import (
	"strings"
	"testing"
	"time"

	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/storage"
)

// TestUsageWarningOncePerPeriod: a usage warning the outbox already holds
// for its period (a crash lost the quota's mark of it, written behind, but
// not the synced mail) is not recorded or sent again; one of a raised
// allowance, of a later month, or an hourly one 24 hours on is.
func TestUsageWarningOncePerPeriod(t *testing.T) {
	m, c, _ := setup(t, "")
	base := time.Now().UTC().Truncate(time.Second)
	n := 0
	step := func(w quota.Warning, want bool) {
		t.Helper()
		w.Account, w.Bucket = c.View.ID, quota.Live
		m.Warn(w)
		// The actor takes messages in order: once this one is recorded,
		// the warning before it was handled.
		m.Send(Message{Account: c.View.ID, Kind: "barrier", Subject: "s", Body: "b"})
		n += 1
		if want {
			n++
		}
		var recs []*storage.Mail
		waitFor(t, func() bool { recs, _ = m.Recent(200); return len(recs) >= n })
		if len(recs) != n {
			t.Fatalf("%+v: %d records, want %d", w, len(recs), n)
		}
	}
	step(quota.Warning{Kind: quota.WarnMonthly80, Limit: 1000, Used: 800, At: base}, true)
	step(quota.Warning{Kind: quota.WarnMonthly80, Limit: 1000, Used: 800, At: base.Add(time.Second)}, false)
	step(quota.Warning{Kind: quota.WarnMonthlyCap, Limit: 1000, Used: 1000, At: base.Add(time.Second)}, true)
	step(quota.Warning{Kind: quota.WarnMonthly80, Limit: 2000, Used: 1600, At: base.Add(2 * time.Second)}, true)
	step(quota.Warning{Kind: quota.WarnHourly80, Limit: 10, Used: 8, At: base}, true)
	step(quota.Warning{Kind: quota.WarnHourly80, Limit: 10, Used: 8, At: base.Add(23 * time.Hour)}, false)
	step(quota.Warning{Kind: quota.WarnHourly80, Limit: 10, Used: 8, At: base.Add(24 * time.Hour)}, true)
	next := time.Date(base.Year(), base.Month()+1, 1, 0, 0, 0, 0, time.UTC)
	step(quota.Warning{Kind: quota.WarnMonthly80, Limit: 1000, Used: 800, At: next}, true)
}

// TestMonthlyWarningNamesTheAccount: the month's allowance is the
// account's, counted from both keys' calls (SPEC §8); a monthly warning
// the test key's call tipped over said "Your test key has used 800 of
// 1000", most of which the live key may have used. It names the account;
// hourly ones still name the key, whose own window it is.
func TestMonthlyWarningNamesTheAccount(t *testing.T) {
	monthly := warnBody(quota.Warning{Kind: quota.WarnMonthly80, Bucket: quota.Test, Limit: 1000, Used: 800, At: time.Now()})
	if !strings.HasPrefix(monthly, "Your account has used 800 of 1000 (monthly_80)") {
		t.Fatalf("monthly warning body: %q", monthly)
	}
	hourly := warnBody(quota.Warning{Kind: quota.WarnHourlyCap, Bucket: quota.Live, Limit: 10, Used: 10, At: time.Now()})
	if !strings.HasPrefix(hourly, "Your live key has used 10 of 10 (hourly_cap)") {
		t.Fatalf("hourly warning body: %q", hourly)
	}
}
