package e2e

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// TestDeviceCollectionBudget: the publishable key sits in public pages, and
// /v1/collect/device stored up to 32 KB of raw body per event for 30 days,
// without limit (one address added 13.9 MB a minute). An event now keeps the
// compact signals only, and each account has a daily event and byte budget;
// past it the collector gets 429 with Retry-After until 00:00 UTC.
func TestDeviceCollectionBudget(t *testing.T) {
	s := Start(t, bin)
	s.SetClock(t, "2026-12-05T20:00:00Z")
	// A custom plan of 30 checks a month: 10 events and 20 KiB a day.
	a := s.CreateAccount(t, map[string]any{"email": "budget@example.com", "plan": "custom", "hourly_limit": 5, "monthly_limit": 30})
	signals := fixtureSignals(t, "chrome_desktop_windows", a.PublishableKey)
	small, _ := json.Marshal(signals)
	collect := func(body []byte) *Response {
		return s.Do(t, Req{Method: "POST", Path: "/v1/collect/device", Body: body,
			Header: map[string]string{"Content-Type": "text/plain", "Origin": "https://shop.example"}})
	}
	for i := 0; i < 10; i++ {
		if r := collect(small); r.Status != 200 {
			t.Fatalf("event %d: %d %s", i+1, r.Status, r.Body)
		}
	}
	r := collect(small)
	ra, _ := strconv.Atoi(r.Header.Get("Retry-After"))
	if r.Status != 429 || ra < 4*3600-60 || ra > 4*3600 || r.Header.Get("Access-Control-Allow-Origin") != "https://shop.example" {
		t.Fatalf("11th event: %d Retry-After=%q %s", r.Status, r.Header.Get("Retry-After"), r.Body)
	}
	if m := r.JSON(t); m["code"] != "collect_budget_exceeded" || m["error"] == "" {
		t.Fatalf("11th event body: %s", r.Body)
	}
	// A new UTC day, a new budget.
	s.SetClock(t, "2026-12-06T00:00:01Z")
	if r := collect(small); r.Status != 200 {
		t.Fatalf("next day: %d %s", r.Status, r.Body)
	}

	// Padded reports (30 KB each, as a page may send) are stored compact, so
	// several fit in 20 KiB; the byte budget still stops them before the
	// event budget would.
	signals["junk"] = strings.Repeat("x", 12<<10)
	for _, field := range []string{"lies", "auto", "langs", "err"} {
		l := make([]string, 40)
		for i := range l {
			l[i] = strings.Repeat("L", 100)
		}
		signals[field] = l
	}
	padded, _ := json.Marshal(signals)
	if len(padded) < 28<<10 || len(padded) > 32<<10 {
		t.Fatalf("padded report of %d bytes", len(padded))
	}
	p := s.CreateAccount(t, map[string]any{"email": "padded@example.com", "plan": "custom", "hourly_limit": 5, "monthly_limit": 30})
	signals["key"] = p.PublishableKey
	padded, _ = json.Marshal(signals)
	accepted := 0
	for ; accepted < 10; accepted++ {
		r := collect(padded)
		if r.Status == 429 {
			break
		}
		if r.Status != 200 {
			t.Fatalf("padded report %d: %d %s", accepted+1, r.Status, r.Body)
		}
	}
	t.Logf("%d padded reports of %d bytes fit a 20 KiB day", accepted, len(padded))
	if accepted < 3 || accepted >= 10 {
		t.Fatalf("%d padded reports of %d bytes fit a 20 KiB day", accepted, len(padded))
	}
}
