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
