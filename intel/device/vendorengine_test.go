package device

import "testing"

// TestGeckoBehindAChromiumOrSafariUA: Firefox's engine reports an empty
// navigator.vendor; Chromium always reports "Google Inc." and WebKit
// "Apple Computer, Inc.". A Chrome or Safari user agent over an empty
// vendor the collector did read is Gecko wearing another browser's UA (a
// Firefox-based scraper or antidetect profile with a Chrome UA, a
// user-agent switcher): the "UA browser that disagrees with
// navigator.vendor" of the antidetect check. Firefox over a non-empty
// vendor was already one; the other direction was not.
func TestGeckoBehindAChromiumOrSafariUA(t *testing.T) {
	chrome := loadFixtures(t)["chrome_desktop_windows"].Signals
	// What Firefox's engine reports under a spoofed Chrome UA.
	gecko := chrome
	gecko.Vendor, gecko.UAData, gecko.ChromeObj = "", nil, new(bool)
	gecko.Quota, gecko.HeapLimit = 0, 0
	gecko.GL = &GL{Vendor: "Google Inc. (NVIDIA)", Renderer: "ANGLE (NVIDIA, NVIDIA GeForce GTX 980 Direct3D11 vs_5_0 ps_5_0), or similar"}

	safariUA := "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Safari/605.1.15"
	geckoSafari := gecko
	geckoSafari.UA, geckoSafari.Platform = safariUA, "MacIntel"
	geckoSafari.GL = &GL{Vendor: "Apple", Renderer: "Apple M1, or similar"}

	for _, c := range []struct {
		name string
		s    Signals
	}{{"Gecko with a Chrome UA", gecko}, {"Gecko with a Safari UA", geckoSafari}} {
		v := Assess(&c.s, Options{})
		if !v.Antidetect || !v.Has(FVendorMismatch) {
			t.Errorf("%s: antidetect %v, findings %v", c.name, v.Antidetect, v.Findings)
		}
	}

	// Benign counter-cases: the engines' own vendors, and a vendor the
	// collector could not read (listed in err), which says nothing.
	safari := geckoSafari
	safari.Vendor = "Apple Computer, Inc."
	safari.GL = &GL{Vendor: "Apple Inc.", Renderer: "Apple GPU"}
	edge := chrome
	edge.UA += " Edg/131.0.0.0"
	iosChrome := safari
	iosChrome.UA = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) CriOS/131.0.6778.73 Mobile/15E148 Safari/604.1"
	iosChrome.Platform, iosChrome.Touch = "iPhone", 5
	firefox := gecko
	firefox.UA = "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:133.0) Gecko/20100101 Firefox/133.0"
	unread := gecko
	unread.Errors = []string{"vendor"}
	legacyEdge := gecko
	legacyEdge.UA = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/70.0.3538.102 Safari/537.36 Edge/18.19582"
	for _, c := range []struct {
		name string
		s    Signals
	}{{"Chrome", chrome}, {"Edge", edge}, {"Safari", safari}, {"Chrome on iOS", iosChrome}, {"Firefox", firefox}, {"vendor not read", unread}, {"legacy EdgeHTML", legacyEdge}} {
		if v := Assess(&c.s, Options{}); v.Antidetect || v.Has(FVendorMismatch) {
			t.Errorf("%s: antidetect %v, findings %v", c.name, v.Antidetect, v.Findings)
		}
	}
}
