package fastapi

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fraudd/fraudd/internal/clock"
)

// TestAdminClockRejectsOverflow: advance and set values that would wrap the
// offset or leave the range the service's Unix-nanosecond counters hold are
// a 400 in the admin error shape, and the clock stays where it was.
func TestAdminClockRejectsOverflow(t *testing.T) {
	e := newTestEnv(t)
	tc := clock.NewOffset()
	e.srv.deps.TestClock = tc
	if _, err := tc.Set(fixedNow); err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{
		`{"advance": 9223372037}`,              // seconds past what a Duration holds
		`{"advance": "9223372037"}`,            // the same as a string
		`{"advance": -9223372037}`,             // and backwards
		`{"advance": 9223372036}`,              // fits a Duration, lands past 2262
		`{"advance": "2562047h"}`,              // the longest Go duration, past 2262
		`{"advance": "-2562047h"}`,             // before 1970
		`{"advance": 1e30}`,                    // not whole seconds in range
		`{"advance": "99999999999999999999h"}`, // not a duration at all
		`{"set": "9999-12-31T23:59:59Z"}`,      // Sub would saturate at +292 years
		`{"set": "0001-01-01T00:00:00Z"}`,      // and at -292 years
		`{"set": "2262-04-12T00:00:00Z"}`,      // past the last Unix nanosecond
		`{"set": "1969-12-31T23:59:59Z"}`,      // before the epoch
	} {
		ctx := e.do("POST", "/admin/v1/clock", "Bearer adm", []byte(body))
		if ctx.Response.StatusCode() != 400 {
			t.Errorf("%s: %d %s, want 400", body, ctx.Response.StatusCode(), ctx.Response.Body())
			continue
		}
		var out struct {
			Error string `json:"error"`
		}
		if err := json.Unmarshal(ctx.Response.Body(), &out); err != nil || out.Error == "" {
			t.Errorf("%s: not the admin error shape: %s", body, ctx.Response.Body())
		}
		if now := tc.Now(); now.Sub(fixedNow).Abs() > time.Minute {
			t.Fatalf("%s moved the clock to %v", body, now)
		}
	}
	// In-range moves still work.
	ctx := e.do("POST", "/admin/v1/clock", "Bearer adm", []byte(`{"advance": "25h"}`))
	if ctx.Response.StatusCode() != 200 || !strings.Contains(string(ctx.Response.Body()), "2026-11-23T13:00:0") {
		t.Fatalf("advance 25h: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	ctx = e.do("POST", "/admin/v1/clock", "Bearer adm", []byte(`{"set": "2262-01-01T00:00:00Z"}`))
	if ctx.Response.StatusCode() != 400 {
		t.Fatalf("set the exclusive end: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	ctx = e.do("POST", "/admin/v1/clock", "Bearer adm", []byte(`{"set": "2261-12-31T00:00:00Z"}`))
	if ctx.Response.StatusCode() != 200 {
		t.Fatalf("set the last day: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
}

// TestAdminClockNullRefused: set and advance take a time and a duration
// (ADMIN.md: {"advance": "25h"} or {"set": "…"}); {"set": null} answered the
// time unmoved and {"set": null, "advance": "1h"} moved the clock, though
// set and advance together are a 400. A null is a 400 that moves nothing.
func TestAdminClockNullRefused(t *testing.T) {
	e := newTestEnv(t)
	tc := clock.NewOffset()
	e.srv.deps.TestClock = tc
	if _, err := tc.Set(fixedNow); err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{`{"set": null}`, `{"set": null, "advance": "1h"}`, `{"advance": null}`, `{"Set": null}`} {
		ctx := e.do("POST", "/admin/v1/clock", "Bearer adm", []byte(body))
		if ctx.Response.StatusCode() != 400 || !strings.Contains(string(ctx.Response.Body()), "cannot be null") {
			t.Errorf("%s: %d %s, want 400", body, ctx.Response.StatusCode(), ctx.Response.Body())
		}
		if now := tc.Now(); now.Sub(fixedNow).Abs() > time.Minute {
			t.Fatalf("%s moved the clock to %v", body, now)
		}
	}
}
