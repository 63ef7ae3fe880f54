package e2e

import (
	"strconv"
	"testing"
	"time"
)

func evaluate(s *Server, t *testing.T, key string, body any, hdr map[string]string) *Response {
	t.Helper()
	return s.Do(t, Req{Method: "POST", Path: "/v1/evaluate", Bearer: key, Body: body, Header: hdr})
}

func num(t *testing.T, m map[string]any, k string) int64 {
	t.Helper()
	v, ok := m[k].(float64)
	if !ok {
		t.Fatalf("%s is %v (%T)", k, m[k], m[k])
	}
	return int64(v)
}

func TestHourlyAndMonthlyQuota(t *testing.T) {
	s := Start(t, bin)
	s.SetClock(t, "2026-11-20T10:00:00Z")
	a := s.CreateAccount(t, map[string]any{"email": "q@example.com", "plan": "custom", "hourly_limit": 5, "monthly_limit": 8})
	for i := 0; i < 5; i++ {
		r := evaluate(s, t, a.LiveKey, map[string]any{}, nil)
		if r.Status != 200 || r.Header.Get("X-RateLimit-Limit") != "5" || r.Header.Get("X-RateLimit-Remaining") != strconv.Itoa(4-i) {
			t.Fatalf("call %d: %d limit=%q remaining=%q %s", i, r.Status, r.Header.Get("X-RateLimit-Limit"), r.Header.Get("X-RateLimit-Remaining"), r.Body)
		}
		if reset, _ := strconv.ParseInt(r.Header.Get("X-RateLimit-Reset"), 10, 64); reset < time.Date(2026, 11, 20, 10, 59, 0, 0, time.UTC).Unix() {
			t.Fatalf("X-RateLimit-Reset %d is not the end of the hourly window", reset)
		}
	}
	r := evaluate(s, t, a.LiveKey, map[string]any{}, nil)
	ra, _ := strconv.Atoi(r.Header.Get("Retry-After"))
	if r.Status != 429 || ra < 3500 || ra > 3600 || r.JSON(t)["code"] != nil {
		t.Fatalf("6th call: %d Retry-After=%q %s", r.Status, r.Header.Get("Retry-After"), r.Body)
	}
	// The test key has its own hourly bucket but shares the month.
	if r := evaluate(s, t, a.TestKey, map[string]any{}, nil); r.Status != 200 {
		t.Fatalf("test key while live bucket is full: %d %s", r.Status, r.Body)
	}
	u := s.Do(t, Req{Path: "/v1/usage", Bearer: a.LiveKey}).JSON(t)
	if num(t, u, "used_this_hour") != 5 || num(t, u, "remaining") != 0 || num(t, u, "limit_hits") != 1 || num(t, u, "month_used") != 6 {
		t.Fatalf("usage after the cap: %v", u)
	}
	s.Advance(t, "61m")
	if r := evaluate(s, t, a.LiveKey, map[string]any{}, nil); r.Status != 200 {
		t.Fatalf("new hourly window: %d %s", r.Status, r.Body)
	}
	// month_used is 7; test tokens never count toward the month.
	for i := 0; i < 3; i++ {
		if r := evaluate(s, t, a.LiveKey, map[string]any{"token": "test_vpn"}, nil); r.Status != 200 {
			t.Fatalf("test token: %d %s", r.Status, r.Body)
		}
	}
	if r := evaluate(s, t, a.LiveKey, map[string]any{}, nil); r.Status != 200 {
		t.Fatalf("8th counted call: %d %s", r.Status, r.Body)
	}
	r = evaluate(s, t, a.LiveKey, map[string]any{}, nil)
	if r.Status != 429 || r.JSON(t)["code"] != "monthly_quota_exceeded" {
		t.Fatalf("month exhausted: %d %s", r.Status, r.Body)
	}
	ra, _ = strconv.Atoi(r.Header.Get("Retry-After"))
	untilFirst := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).Sub(time.Date(2026, 11, 20, 11, 1, 0, 0, time.UTC))
	if d := time.Duration(ra) * time.Second; d < untilFirst-2*time.Minute || d > untilFirst+time.Minute {
		t.Fatalf("monthly Retry-After %s, want about %s", d, untilFirst)
	}
	s.SetClock(t, "2026-12-01T00:00:05Z")
	if r := evaluate(s, t, a.LiveKey, map[string]any{}, nil); r.Status != 200 {
		t.Fatalf("after month rollover: %d %s", r.Status, r.Body)
	}
	u = s.Do(t, Req{Path: "/v1/usage", Bearer: a.LiveKey}).JSON(t)
	if num(t, u, "month_used") != 1 || u["month_resets_at"] != "2027-01-01T00:00:00Z" {
		t.Fatalf("usage in the new month: %v", u)
	}
}

func TestUsageFieldsAndPersistence(t *testing.T) {
	s := Start(t, bin)
	s.SetClock(t, "2026-11-10T12:00:00Z")
	a := s.CreateAccount(t, map[string]any{"email": "u@example.com", "plan": "starter"})
	r := s.Do(t, Req{Path: "/v1/usage", Bearer: a.LiveKey})
	if r.Status != 200 {
		t.Fatalf("usage: %d %s", r.Status, r.Body)
	}
	u := r.JSON(t)
	for _, k := range []string{"key_type", "hourly_limit", "used_this_hour", "remaining", "uncapped", "resets_at", "total_evaluations",
		"limit_hits", "plan", "monthly_limit", "month_used", "monthly_lookup_limit", "month_lookups_used", "month_resets_at", "grandfathered_until"} {
		if _, ok := u[k]; !ok {
			t.Errorf("usage lacks %s: %s", k, r.Body)
		}
	}
	if u["plan"] != "starter" || num(t, u, "hourly_limit") != 5000 || num(t, u, "monthly_limit") != 50000 || num(t, u, "monthly_lookup_limit") != 500000 ||
		u["resets_at"] != nil || u["grandfathered_until"] != nil || u["uncapped"] != false {
		t.Fatalf("fresh usage: %s", r.Body)
	}
	// Usage consumes nothing.
	if u2 := s.Do(t, Req{Path: "/v1/usage", Bearer: a.LiveKey}).JSON(t); num(t, u2, "used_this_hour") != 0 {
		t.Fatalf("usage consumed quota: %v", u2)
	}
	evaluate(s, t, a.LiveKey, map[string]any{"email": "x@mailinator.com"}, nil) // degraded but not bare: counts in totals
	evaluate(s, t, a.LiveKey, map[string]any{}, nil)                            // bare degraded allow: month only
	s.Do(t, Req{Path: "/v1/lookup/1.1.1.1", Bearer: a.LiveKey})
	s.Do(t, Req{Path: "/v1/lookup/1.1.1.1", Bearer: a.TestKey})
	evaluate(s, t, a.LiveKey, map[string]any{"token": "bogus"}, nil) // 400: hourly only
	u = s.Do(t, Req{Path: "/v1/usage", Bearer: a.LiveKey}).JSON(t)
	if num(t, u, "used_this_hour") != 4 || num(t, u, "month_used") != 2 || num(t, u, "month_lookups_used") != 2 || num(t, u, "total_evaluations") != 2 {
		t.Fatalf("usage after calls: %v", u)
	}
	if tu := s.Do(t, Req{Path: "/v1/usage", Bearer: a.TestKey}).JSON(t); tu["key_type"] != "test" || num(t, tu, "used_this_hour") != 1 {
		t.Fatalf("test key usage: %v", tu)
	}
	s.Restart()
	u = s.Do(t, Req{Path: "/v1/usage", Bearer: a.LiveKey}).JSON(t)
	if num(t, u, "month_used") != 2 || num(t, u, "month_lookups_used") != 2 || num(t, u, "total_evaluations") != 2 || num(t, u, "used_this_hour") != 0 {
		t.Fatalf("usage after restart (hourly resets, the rest persists): %v", u)
	}
	pi := s.CreateAccount(t, map[string]any{"email": "pi@example.com", "plan": "public_interest"})
	r = evaluate(s, t, pi.LiveKey, map[string]any{"token": "test_clean"}, nil)
	if r.Status != 200 || r.Header.Get("X-RateLimit-Limit") != "" {
		t.Fatalf("public interest evaluate: %d headers=%v", r.Status, r.Header)
	}
	pu := s.Do(t, Req{Path: "/v1/usage", Bearer: pi.LiveKey}).JSON(t)
	if pu["uncapped"] != true || pu["hourly_limit"] != nil || pu["remaining"] != nil || pu["monthly_limit"] != nil {
		t.Fatalf("public interest usage: %v", pu)
	}
}

func TestGrandfathering(t *testing.T) {
	s := Start(t, bin)
	s.SetClock(t, "2026-11-15T00:00:00Z")
	a := s.CreateAccount(t, map[string]any{"email": "old@example.com", "plan": "free", "created_at": "2026-09-01T00:00:00Z"})
	u := s.Do(t, Req{Path: "/v1/usage", Bearer: a.LiveKey}).JSON(t)
	if num(t, u, "hourly_limit") != 1000 || u["monthly_limit"] != nil || u["grandfathered_until"] != "2026-11-30T23:59:59Z" {
		t.Fatalf("grandfathered usage: %v", u)
	}
	s.SetClock(t, "2026-12-01T00:00:00Z")
	// SPEC 2.4: grandfathered_until is the "end of the previous allowance
	// for accounts created before 2026-10-01": once it has passed it still
	// names that end (the plan's limits are in force), for the live and the
	// test key alike; only an account created on or after 2026-10-01 reads
	// null. The admin API's limits are those in force: none grandfathered.
	nu := s.CreateAccount(t, map[string]any{"email": "new@example.com", "plan": "free", "created_at": "2026-10-01T00:00:00Z"})
	for _, at := range []string{"2026-12-01T00:00:00Z", "2026-12-15T12:00:00Z"} {
		s.SetClock(t, at)
		for _, key := range []string{a.LiveKey, a.TestKey} {
			u = s.Do(t, Req{Path: "/v1/usage", Bearer: key}).JSON(t)
			if num(t, u, "hourly_limit") != 1000 || num(t, u, "monthly_limit") != 10000 || u["grandfathered_until"] != "2026-11-30T23:59:59Z" {
				t.Fatalf("%s, after grandfathering ends: %v", at, u)
			}
		}
		if u := s.Do(t, Req{Path: "/v1/usage", Bearer: nu.LiveKey}).JSON(t); u["grandfathered_until"] != nil {
			t.Fatalf("%s, an account created on 2026-10-01: %v", at, u)
		}
		lim := s.Admin(t, "GET", "/admin/v1/accounts/"+a.ID, nil).JSON(t)["limits"].(map[string]any)
		if lim["grandfathered_until"] != nil || lim["monthly"] != float64(10000) {
			t.Fatalf("%s, the admin API's limits in force: %v", at, lim)
		}
	}
}

func TestPerAddressLimits(t *testing.T) {
	s := Start(t, bin)
	a := s.CreateAccount(t, map[string]any{"email": "l@example.com", "plan": "public_interest"})
	from := func(ip string) map[string]string { return map[string]string{"X-Forwarded-For": ip} }
	// /v1/usage: 120 reads a minute per address, then 429 Retry-After 60.
	for i := 0; i < 120; i++ {
		if r := s.Do(t, Req{Path: "/v1/usage", Bearer: a.LiveKey, Header: from("198.51.100.1")}); r.Status != 200 {
			t.Fatalf("usage read %d: %d", i, r.Status)
		}
	}
	r := s.Do(t, Req{Path: "/v1/usage", Bearer: a.LiveKey, Header: from("198.51.100.1")})
	if r.Status != 429 || r.Header.Get("Retry-After") != "60" || r.JSON(t)["error"] != "Too many requests." {
		t.Fatalf("121st usage read: %d %q %s", r.Status, r.Header.Get("Retry-After"), r.Body)
	}
	// Sample: 30 a minute per address.
	for i := 0; i < 30; i++ {
		if r := s.Do(t, Req{Path: "/v1/evaluate/sample", Header: from("198.51.100.2")}); r.Status != 200 {
			t.Fatalf("sample %d: %d", i, r.Status)
		}
	}
	if r := s.Do(t, Req{Path: "/v1/evaluate/sample", Header: from("198.51.100.2")}); r.Status != 429 || r.Header.Get("Retry-After") == "" {
		t.Fatalf("31st sample: %d", r.Status)
	}
	s.Advance(t, "61s")
	if r := s.Do(t, Req{Path: "/v1/evaluate/sample", Header: from("198.51.100.2")}); r.Status != 200 {
		t.Fatalf("sample after a minute: %d", r.Status)
	}
	// Free lookup: 12 a minute; invalid input is not counted (its own 60/minute).
	for i := 0; i < 5; i++ {
		if r := s.Do(t, Req{Method: "POST", Path: "/api/lookup", Body: map[string]any{"ip": "nope"}, Header: from("198.51.100.3")}); r.Status != 400 {
			t.Fatalf("invalid free lookup: %d", r.Status)
		}
	}
	for i := 0; i < 12; i++ {
		if r := s.Do(t, Req{Method: "POST", Path: "/api/lookup", Body: map[string]any{"ip": "1.1.1.1"}, Header: from("198.51.100.3")}); r.Status != 200 {
			t.Fatalf("free lookup %d: %d %s", i, r.Status, r.Body)
		}
	}
	if r := s.Do(t, Req{Method: "POST", Path: "/api/lookup", Body: map[string]any{"ip": "1.1.1.1"}, Header: from("198.51.100.3")}); r.Status != 429 {
		t.Fatalf("13th free lookup: %d", r.Status)
	}
	// Bulk: 3 batches an hour; a batch with no valid address does not count.
	for i := 0; i < 2; i++ {
		if r := s.Do(t, Req{Method: "POST", Path: "/api/lookup-bulk", Body: map[string]any{"ips": []string{"10.0.0.1"}}, Header: from("198.51.100.4")}); r.Status != 400 {
			t.Fatalf("empty bulk: %d", r.Status)
		}
	}
	for i := 0; i < 3; i++ {
		if r := s.Do(t, Req{Method: "POST", Path: "/api/lookup-bulk", Body: map[string]any{"ips": []string{"1.1.1.1"}}, Header: from("198.51.100.4")}); r.Status != 200 {
			t.Fatalf("bulk %d: %d %s", i, r.Status, r.Body)
		}
	}
	if r := s.Do(t, Req{Method: "POST", Path: "/api/lookup-bulk", Body: map[string]any{"ips": []string{"1.1.1.1"}}, Header: from("198.51.100.4")}); r.Status != 429 {
		t.Fatalf("4th bulk: %d", r.Status)
	}
}

func TestUsageWarningMail(t *testing.T) {
	s := Start(t, bin)
	a := s.CreateAccount(t, map[string]any{"email": "warn@example.com", "plan": "custom", "hourly_limit": 10, "monthly_limit": 1000})
	for i := 0; i < 10; i++ {
		evaluate(s, t, a.LiveKey, map[string]any{}, nil)
	}
	var mail []any
	for i := 0; i < 100; i++ {
		r := s.Admin(t, "GET", "/admin/v1/mail", nil)
		if err := jsonUnmarshal(r.Body, &mail); err != nil {
			t.Fatal(err)
		}
		if len(mail) >= 2 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	kinds := map[string]bool{}
	for _, m := range mail {
		mm := m.(map[string]any)
		if mm["to"] != "warn@example.com" || mm["status"] != "recorded" {
			t.Fatalf("mail record: %v", mm)
		}
		kinds[mm["kind"].(string)] = true
	}
	if !kinds["usage_hourly_80"] || !kinds["usage_hourly_cap"] {
		t.Fatalf("want hourly 80%% and cap warnings, got %v", kinds)
	}
}

// hourlyWarnings counts the usage_hourly_80 and usage_hourly_cap mails in
// the outbox.
func hourlyWarnings(s *Server, t *testing.T) (n80, ncap int) {
	t.Helper()
	var mail []map[string]any
	if err := jsonUnmarshal(s.Admin(t, "GET", "/admin/v1/mail", nil).Body, &mail); err != nil {
		t.Fatal(err)
	}
	for _, m := range mail {
		switch m["kind"] {
		case "usage_hourly_80":
			n80++
		case "usage_hourly_cap":
			ncap++
		}
	}
	return n80, ncap
}

// waitHourlyWarnings waits until the outbox holds n of each hourly warning,
// then checks that no more follow.
func waitHourlyWarnings(s *Server, t *testing.T, n int, when string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n80, ncap := hourlyWarnings(s, t)
		if n80 > n || ncap > n {
			t.Fatalf("%s: %d hourly_80 and %d hourly_cap mails, want %d of each", when, n80, ncap, n)
		}
		if n80 == n && ncap == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d hourly_80 and %d hourly_cap mails, want %d of each", when, n80, ncap, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // a mail that should not come would by now
	if n80, ncap := hourlyWarnings(s, t); n80 != n || ncap != n {
		t.Fatalf("%s: %d hourly_80 and %d hourly_cap mails, want %d of each", when, n80, ncap, n)
	}
}

// TestHourlyWarningNotRepeatedAfterRestart: SPEC §6 mails each hourly
// warning at most once per 24 hours, and a restart does not change that:
// neither a clean stop nor a SIGKILL after the group sync (the README's
// durability bound for counts) has the warnings sent again when the hourly
// limit is reached in a later hour of the same 24; a day on, they are.
func TestHourlyWarningNotRepeatedAfterRestart(t *testing.T) {
	s := Start(t, bin)
	s.SetClock(t, "2026-11-20T10:00:00Z")
	a := s.CreateAccount(t, map[string]any{"email": "hw@example.com", "plan": "custom", "hourly_limit": 10, "monthly_limit": 1000})
	reachCap := func(when string) {
		t.Helper()
		for i := 0; i < 10; i++ {
			if r := evaluate(s, t, a.LiveKey, map[string]any{}, nil); r.Status != 200 {
				t.Fatalf("%s: call %d: %d %s", when, i, r.Status, r.Body)
			}
		}
	}
	reachCap("first hour")
	waitHourlyWarnings(s, t, 1, "first hour")

	s.Restart() // clean stop; the test clock starts again at the real time
	s.SetClock(t, "2026-11-20T12:00:00Z")
	reachCap("after a restart")
	waitHourlyWarnings(s, t, 1, "after a restart")

	time.Sleep(100 * time.Millisecond) // well past the group sync (10 ms)
	s.Kill()
	s.start()
	s.SetClock(t, "2026-11-21T09:00:00Z") // 23 hours after the first
	reachCap("after a SIGKILL")
	waitHourlyWarnings(s, t, 1, "after a SIGKILL")

	s.SetClock(t, "2026-11-21T10:00:05Z") // 24 hours after the first, and a new hour
	reachCap("a day on")
	waitHourlyWarnings(s, t, 2, "a day on")
}
