package device

import (
	"slices"
	"strings"
	"testing"
)

// Chrome 138 made navigator.storage.estimate() report a predictable quota
// (chromestatus 4977371751645184): usage + min(10 GiB, the real quota
// rounded up to a whole GiB), so a regular window reads 10 GiB + usage;
// IncognitoStaticStorageQuota (blink-dev intent, 2026) makes incognito
// report the same. A quota at that cap says nothing about private
// browsing: the incognito check must not count as run (checked_signals
// without "incognito": unknown, not "not incognito").
func TestChromeStaticQuotaIsNoIncognitoReading(t *testing.T) {
	fx := loadFixtures(t)
	const gib = 1 << 30
	for _, c := range []struct {
		name  string
		major string
		quota float64
	}{
		{"regular window, nothing stored", "144", 10 * gib},
		{"regular window, 3 MB stored", "144", 10*gib + 3e6},
		{"incognito under IncognitoStaticStorageQuota", "156", 10*gib + 52_431},
		{"first Chrome with the static quota", "138", 10 * gib},
	} {
		s := fx["chrome_desktop_windows"].Signals
		s.UA = strings.Replace(s.UA, "Chrome/131.0.0.0", "Chrome/"+c.major+".0.0.0", 1)
		s.UAData = &UAData{Brands: []Brand{{"Google Chrome", c.major}, {"Chromium", c.major}, {"Not_A Brand", "24"}}, Platform: "Windows"}
		s.Quota = c.quota
		v := Assess(&s, Options{Key: testKey})
		if v.Checked&CheckIncognito != 0 || v.Incognito || slices.Contains(v.Checked.Names(), "incognito") {
			t.Errorf("%s (Chrome %s, quota %.0f): incognito %v, checked %v", c.name, c.major, c.quota, v.Incognito, v.Checked.Names())
		}
		// The other verdicts are unaffected.
		if v.Checked&(CheckAutomation|CheckAntidetect|CheckEmulator) != CheckAutomation|CheckAntidetect|CheckEmulator || !v.Complete {
			t.Errorf("%s: checked %v", c.name, v.Checked.Names())
		}
	}
}

// Below the cap the reading still tells: before IncognitoStaticStorageQuota
// an incognito window's quota is a fraction of RAM, bucketed to whole GiB
// under 10; and before Chrome 138 a regular window reported its real quota,
// 10 GiB or more included.
func TestChromeQuotaBelowTheCapStillReads(t *testing.T) {
	fx := loadFixtures(t)
	s := fx["chrome_incognito"].Signals
	s.UA = strings.Replace(s.UA, "Chrome/131.0.0.0", "Chrome/142.0.0.0", 1)
	s.UAData = &UAData{Brands: []Brand{{"Google Chrome", "142"}, {"Chromium", "142"}, {"Not_A Brand", "24"}}, Platform: "Windows"}
	s.Quota = 2 << 30
	if v := Assess(&s, Options{Key: testKey}); !v.Incognito || v.Checked&CheckIncognito == 0 {
		t.Errorf("Chrome 142 incognito, 2 GiB quota: incognito %v checked %v", v.Incognito, v.Checked.Names())
	}
	old := fx["chrome_desktop_windows"].Signals
	old.Quota = 10 << 30
	if v := Assess(&old, Options{Key: testKey}); v.Incognito || v.Checked&CheckIncognito == 0 {
		t.Errorf("Chrome 131, 10 GiB quota: incognito %v checked %v", v.Incognito, v.Checked.Names())
	}
}
