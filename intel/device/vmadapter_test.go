package device

import "testing"

// TestHypervisorAdaptersOfCurrentVMs: COLLECTOR.md reads a hypervisor's
// display adapter under a desktop OS as a virtual machine. Three adapters
// that real guests report were missing: Apple's Virtualization framework
// (macOS guests on Apple silicon — UTM, Parallels, Tart, hosted CI Macs),
// whose Metal device Chrome names "Apple Paravirtual device"; Hyper-V's
// RemoteFX vGPU ("Microsoft RemoteFX Graphics Device - WDDM", PCI
// 1414:02c1); and QEMU's own adapters. The real GPUs of ordinary Macs and
// PCs stay clean.
func TestHypervisorAdaptersOfCurrentVMs(t *testing.T) {
	base := loadFixtures(t)["chrome_desktop_windows"].Signals
	mac := base
	mac.UA = "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"
	mac.Platform = "MacIntel"
	mac.UAData = &UAData{Brands: base.UAData.Brands, Platform: "macOS"}

	for _, c := range []struct {
		name string
		s    Signals
		gl   GL
		vm   bool
	}{
		{"macOS guest on Apple silicon", mac, GL{"Google Inc. (Apple)", "ANGLE (Apple, ANGLE Metal Renderer: Apple Paravirtual device, Unspecified Version)", false}, true},
		{"Hyper-V RemoteFX vGPU", base, GL{"Google Inc. (Microsoft)", "ANGLE (Microsoft, Microsoft RemoteFX Graphics Device - WDDM (0x000002C1) Direct3D11 vs_5_0 ps_5_0, D3D11)", false}, true},
		{"QEMU adapter", base, GL{"Google Inc. (QEMU)", "ANGLE (QEMU, QEMU Standard VGA, OpenGL 4.5)", false}, true},
		// Benign counter-cases: real GPUs.
		{"MacBook M2", mac, GL{"Google Inc. (Apple)", "ANGLE (Apple, ANGLE Metal Renderer: Apple M2, Unspecified Version)", false}, false},
		{"Intel Mac", mac, GL{"Google Inc. (Intel Inc.)", "ANGLE (Intel Inc., Intel(R) Iris(TM) Plus Graphics 655, OpenGL 4.1)", false}, false},
		{"Safari masked Apple GPU", mac, GL{"Apple Inc.", "Apple GPU", false}, false},
		{"Windows NVIDIA", base, GL{"Google Inc. (NVIDIA)", "ANGLE (NVIDIA, NVIDIA GeForce RTX 3060 Ti (0x00002489) Direct3D11 vs_5_0 ps_5_0, D3D11)", false}, false},
		{"Windows Intel UHD", base, GL{"Google Inc. (Intel)", "ANGLE (Intel, Intel(R) UHD Graphics 620 (0x00005917) Direct3D11 vs_5_0 ps_5_0, D3D11)", false}, false},
		{"Windows AMD", base, GL{"Google Inc. (AMD)", "ANGLE (AMD, AMD Radeon RX 6600 (0x000073FF) Direct3D11 vs_5_0 ps_5_0, D3D11)", false}, false},
	} {
		s := c.s
		gl := c.gl
		s.GL = &gl
		v := Assess(&s, Options{})
		if v.VirtualMachine != c.vm || v.Has(FVMRenderer) != c.vm {
			t.Errorf("%s: virtual_machine %v, want %v (findings %v)", c.name, v.VirtualMachine, c.vm, v.Findings)
		}
		if v.Antidetect || v.Automation || v.Emulator {
			t.Errorf("%s: other verdicts fired: %v", c.name, v.Findings)
		}
	}
}
