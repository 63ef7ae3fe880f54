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
