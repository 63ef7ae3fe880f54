package e2e

import (
	"fmt"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestConsoleAccessSaveKeepsAListChangedMeanwhile: a console and the CLI
// act on one account at once. The access card saved both lists as the page
// had loaded them, so an allowlist saved in the console silently put back
// the origins the CLI had set since (an acknowledged change lost, and the
// publishable key usable on every website again). Only the list edited is
// sent now.
func TestConsoleAccessSaveKeepsAListChangedMeanwhile(t *testing.T) {
	s := Start(t, bin)
	a := s.CreateAccount(t, map[string]any{"email": "crossed@example.com"})
	c := openConsole(t, s)
	c.openAccount(a.ID)
	// The CLI, while the page is open.
	if r := s.Admin(t, "PATCH", "/admin/v1/accounts/"+a.ID, map[string]any{"origins": []string{"https://shop.example"}}); r.Status != 200 {
		t.Fatalf("patch origins: %d %s", r.Status, r.Body)
	}
	c.do("a first allowlist entry", chromedp.SetValue(css("#allowlist"), "203.0.113.7"), chromedp.Click(css("#save-access")))
	c.confirm("a first allowlist entry")
	c.waitStatus("the allowlist saved", "Allowlist and origins saved.")
	got := s.Admin(t, "GET", "/admin/v1/accounts/"+a.ID, nil).JSON(t)
	if fmt.Sprint(got["allowlist"], got["origins"]) != "[203.0.113.7/32] [https://shop.example]" {
		t.Fatalf("after the console's allowlist save: allowlist %v, origins %v (the CLI's origins must stay)", got["allowlist"], got["origins"])
	}
	// The card is drawn from the answer: it shows the CLI's origin now.
	if v := c.eval(`document.getElementById('origins').value`); v != "https://shop.example" {
		t.Fatalf("the origins box shows %q after the save", v)
	}
}

// TestConsolePlanSaveKeepsALimitChangedMeanwhile: the plan card sent the
// plan and both limits as the page had loaded them, so a limit saved in
// the console put back the other limit the CLI had changed since. Only
// what was edited is sent now.
func TestConsolePlanSaveKeepsALimitChangedMeanwhile(t *testing.T) {
	s := Start(t, bin)
	a := s.CreateAccount(t, map[string]any{"email": "crossplan@example.com", "plan": "custom", "hourly_limit": 100, "monthly_limit": 1000})
	c := openConsole(t, s)
	c.openAccount(a.ID)
	if r := s.Admin(t, "PATCH", "/admin/v1/accounts/"+a.ID, map[string]any{"monthly_limit": 500}); r.Status != 200 {
		t.Fatalf("patch monthly_limit: %d %s", r.Status, r.Body)
	}
	c.do("a new hourly limit", chromedp.SetValue(css("#hourly-limit"), "50"), chromedp.Click(css("#save-plan")))
	c.waitStatus("the plan saved", "Plan saved.")
	got := s.Admin(t, "GET", "/admin/v1/accounts/"+a.ID, nil).JSON(t)
	if fmt.Sprintf("%v %v %v", got["plan"], got["hourly_limit"], got["monthly_limit"]) != "custom 50 500" {
		t.Fatalf("after the console's hourly limit save: %v %v %v (the CLI's monthly limit must stay)", got["plan"], got["hourly_limit"], got["monthly_limit"])
	}
}
