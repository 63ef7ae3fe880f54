package device

import (
	"strings"
	"testing"
)

// Real, unmodified browsers whose ordinary readings once tripped a finding.

// Chrome 139 made the SwiftShader fallback for WebGL opt-in
// (chromestatus 5166674414927872): a headed Chrome with no usable GPU — a
// VM or VDI session without one, Remote Desktop, a blocklisted driver,
// hardware acceleration turned off — has no WebGL context at all. With the
// "Download PDFs" setting or the AlwaysOpenPdfExternally policy
// (common on managed office machines) navigator.plugins is empty (HTML
// spec: the five PDF plugins only when inline PDF viewing is on). Those two
// are an office worker on a GPU-less VDI desktop, not automation.
func TestChromeWithoutGPUAndPDFDownloadIsNotAutomation(t *testing.T) {
	s := loadFixtures(t)["chrome_desktop_windows"].Signals
	s.UA = strings.Replace(s.UA, "Chrome/131.0.0.0", "Chrome/144.0.0.0", 1)
	s.UAData = &UAData{Brands: []Brand{{"Google Chrome", "144"}, {"Chromium", "144"}, {"Not_A Brand", "24"}}, Platform: "Windows"}
	s.GL = nil
	s.Plugins = 0
	if v := Assess(&s, Options{}); v.Automation || v.Has(FNoWebGLHeadless) {
		t.Fatalf("Chrome 144 without a GPU, PDFs downloaded: automation %v %v", v.Automation, v.Findings)
	}
	// Before 139 a GPU-less Chrome still rendered WebGL in software: no
	// WebGL at all stays a weak sign there.
	old := loadFixtures(t)["chrome_desktop_windows"].Signals
	old.GL = nil
	old.Plugins = 0
	if v := Assess(&old, Options{}); !v.Automation {
		t.Fatalf("Chrome 131 with no WebGL and no plugins: %v", v.Findings)
	}
}

// Asahi Linux (Fedora Asahi Remix) runs on Apple silicon Macs; its Mesa
// driver reports the chip as the GL renderer, "Apple M1 (G13G B1)", under a
// Linux user agent. That is a real machine, not a spoofed GPU.
func TestAsahiLinuxAppleGPUIsNotAMismatch(t *testing.T) {
	s := &Signals{
		V:        1,
		UA:       "Mozilla/5.0 (X11; Linux aarch64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
		Platform: "Linux aarch64", Vendor: "Google Inc.",
		UAData:  &UAData{Brands: []Brand{{"Chromium", "131"}, {"Not_A Brand", "24"}}, Platform: "Linux"},
		Langs:   []string{"en-US", "en"},
		Plugins: 5, Cores: 8, Memory: 8, Touch: 0,
		Screen: []float64{1512, 982, 24, 2}, Window: []int{1512, 944, 1512, 860},
		TZ: "Europe/Berlin", TZOffset: -60,
		GL:     &GL{Vendor: "Google Inc. (Apple)", Renderer: "ANGLE (Apple, Apple M1 (G13G B1), OpenGL ES 3.2 Mesa 24.1.0)"},
		Canvas: []string{"0a1b2c3d", "0a1b2c3d"}, Audio: []string{"124.04347527516074", "124.04347527516074"},
		Lies: []string{}, Auto: []string{}, ChromeObj: new(bool), NotifPerm: "default", PermQuery: "prompt",
		TimerRes: 0.1, Pointer: "fine",
	}
	*s.ChromeObj = true
	if v := Assess(s, Options{}); v.Antidetect || v.Has(FGPUMismatch) || v.TamperingScore != 0 {
		t.Fatalf("Chromium on Asahi Linux: antidetect %v %v", v.Antidetect, v.Findings)
	}
	// Safari's own "Apple GPU" under Linux, or an Apple chip under Windows,
	// is still impossible.
	for _, c := range []struct{ ua, platform, hint, renderer string }{
		{s.UA, "Linux aarch64", "Linux", "Apple GPU"},
		{"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36", "Win32", "Windows", "ANGLE (Apple, ANGLE Metal Renderer: Apple M2, Unspecified Version)"},
	} {
		x := *s
		x.UA, x.Platform, x.GL = c.ua, c.platform, &GL{Vendor: "Google Inc. (Apple)", Renderer: c.renderer}
		x.UAData = &UAData{Brands: s.UAData.Brands, Platform: c.hint}
		if v := Assess(&x, Options{}); !v.Has(FGPUMismatch) {
			t.Errorf("%s on %s: no gpu mismatch %v", c.renderer, c.platform, v.Findings)
		}
	}
}
