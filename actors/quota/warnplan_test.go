package quota

import (
	"testing"
	"time"
)

// SPEC §6: usage warning emails at about 80% and 100% of the monthly
// allowance. An account that reached its cap and was then upgraded (PATCH
// plan, or a raised custom monthly_limit) has a new allowance this month;
// reaching 80% and 100% of it must warn.
func TestMonthlyWarningsRearmedByAnUpgrade(t *testing.T) {
	a := newAcct(t0)
	var ws warnLog
	free := LimitsFor(PlanFree, nil, nil, t0, t0) // 10,000 a month
	for i := 0; i < 10_000; i++ {
		if r, _ := a.charge(&Charge{Account: "a", Limits: free, Monthly: true, Now: t0}, ws.add); !r.Allowed {
			t.Fatalf("charge %d refused", i)
		}
	}
	if len(ws) != 2 {
		t.Fatalf("before the upgrade: %v", ws.kinds())
	}
	// PATCH {"plan": "starter"}: 50,000 a month from now on.
	starter := LimitsFor(PlanStarter, nil, nil, t0, t0.Add(time.Minute))
	for i := 10_000; i < 50_000; i++ {
		if r, _ := a.charge(&Charge{Account: "a", Limits: starter, Monthly: true, Now: t0.Add(time.Minute)}, ws.add); !r.Allowed {
			t.Fatalf("charge %d refused", i)
		}
	}
	if r, _ := a.charge(&Charge{Account: "a", Limits: starter, Monthly: true, Now: t0.Add(time.Minute)}, ws.add); r.Refusal != RefusedMonthly {
		t.Fatalf("50,001st: %+v", r)
	}
	var starterWarnings []Warning
	for _, w := range ws {
		if w.Limit == 50_000 {
			starterWarnings = append(starterWarnings, w)
		}
	}
	if len(starterWarnings) != 2 {
		t.Fatalf("after the upgrade to starter the new allowance ran to 80%% (40,000 of 50,000) and to its cap, and the next call "+
			"was refused, but no warning about it was sent; all warnings: %+v", ws)
	}
}

// SPEC §6: hourly usage warnings "at most once per threshold per 24 hours".
// A restart of the process must not send the same threshold again within
// 24 hours.
func TestZeroHourlyLimitRetryAfterIsTheWindow(t *testing.T) {
	a := newAcct(t0)
	r, _ := a.charge(&Charge{Account: "a", Limits: custom(0, -1), Hourly: true, Monthly: true, Now: t0}, nil)
	if r.Allowed {
		t.Fatal("allowed")
	}
	if r.RetryAfter <= 1 || t0.Add(time.Duration(r.RetryAfter)*time.Second).Unix() > r.Reset+1 || t0.Add(time.Duration(r.RetryAfter)*time.Second).Unix() < r.Reset-1 {
		t.Fatalf("refusal with hourly_limit 0: Retry-After %d s, X-RateLimit-Reset in %d s", r.RetryAfter, r.Reset-t0.Unix())
	}
}

// SPEC §6: warnings at about 80% and 100% of the monthly allowance. A
// downgrade below what the month already used (starter 20,000 used → free
// 10,000) leaves the account past 100% of its allowance; its calls are
// refused from then on, and no warning was ever sent. The first refusal
// mails the cap, once, and no 80% mail beside it.
func TestDowngradePastTheMonthMailsTheCap(t *testing.T) {
	a := newAcct(t0)
	var ws warnLog
	starter := LimitsFor(PlanStarter, nil, nil, t0, t0)
	for i := 0; i < 20_000; i++ {
		a.charge(&Charge{Account: "a", Limits: starter, Monthly: true, Now: t0}, ws.add)
	}
	free := LimitsFor(PlanFree, nil, nil, t0, t0)
	for i := 0; i < 3; i++ {
		if r, _ := a.charge(&Charge{Account: "a", Limits: free, Monthly: true, Now: t0.Add(time.Minute)}, ws.add); r.Refusal != RefusedMonthly {
			t.Fatalf("after the downgrade: %+v", r)
		}
	}
	if k := ws.kinds(); len(k) != 1 || k[0] != WarnMonthlyCap || ws[0].Limit != 10_000 {
		t.Fatalf("20,000 used of free's 10,000 after the downgrade, three calls refused: warnings %+v, want one monthly cap mail for 10,000", ws)
	}
}

// TestResetsAtIsWholeSecondsRoundedUp: /v1/usage's resets_at is printed in
// whole seconds; rounded down, it named an instant at which the next call
// was still refused, and it disagreed with X-RateLimit-Reset (rounded up).
func TestResetsAtIsWholeSecondsRoundedUp(t *testing.T) {
	a := newAcct(t0)
	first := t0.Add(700 * time.Millisecond)
	l := custom(1, -1)
	r, _ := a.charge(&Charge{Account: "a", Limits: l, Hourly: true, Monthly: true, Now: first}, nil)
	if !r.Allowed {
		t.Fatalf("first call: %+v", r)
	}
	v := a.usage(Live, l, first)
	if v.ResetsAt == nil || v.ResetsAt.Nanosecond() != 0 || v.ResetsAt.Unix() != r.Reset {
		t.Fatalf("resets_at %v, X-RateLimit-Reset %d: want the same whole second", v.ResetsAt, r.Reset)
	}
	if r, _ := a.charge(&Charge{Account: "a", Limits: l, Hourly: true, Monthly: true, Now: *v.ResetsAt}, nil); !r.Allowed {
		t.Fatalf("a call at resets_at (%v) refused: %+v", v.ResetsAt, r)
	}
}
