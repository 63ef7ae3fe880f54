package device

import (
	"strings"
	"testing"
)

// arcWebView is an Android app's WebView on an x86 Chromebook (ARC++ or
// ARCVM: Android on ChromeOS). ARC sets Build.MODEL to the ChromeOS board
// and Build.ID to the ChromeOS release ("R112-15359.58.0"), and the WebView
// user agent carries both (CDD 3.4.1: "…; $(MODEL) Build/$(BUILD); wv)").
// The CPU is x86, the GPU is the Chromebook's Intel or AMD part under Mesa
// (through virtio-gpu's virgl on ARCVM, which names the host renderer or
// just "virgl"), and a clamshell Chromebook has no touch screen.
func arcWebView(model, build, vendor, renderer string) *Signals {
	chrome := true
	return &Signals{
		V:        1,
		UA:       "Mozilla/5.0 (Linux; Android 11; " + model + " Build/" + build + "; wv) AppleWebKit/537.36 (KHTML, like Gecko) Version/4.0 Chrome/118.0.5993.111 Safari/537.36",
		Platform: "Linux x86_64", Vendor: "Google Inc.",
		UAData:  &UAData{Brands: []Brand{{"Android WebView", "118"}, {"Chromium", "118"}, {"Not=A?Brand", "99"}}, Mobile: false, Platform: "Android"},
		Langs:   []string{"en-US"},
		Plugins: 0, Cores: 4, Memory: 4, Touch: 0,
		Screen: []float64{1366, 768, 24, 1}, Window: []int{1280, 720, 1280, 720},
		TZ: "America/Chicago", TZOffset: 360,
		GL:     &GL{Vendor: vendor, Renderer: renderer},
		Canvas: []string{"5d1c0a7e", "5d1c0a7e"}, Audio: []string{"124.04347527516074", "124.04347527516074"},
		Lies: []string{}, Auto: []string{}, ChromeObj: &chrome, NotifPerm: "default", PermQuery: "prompt",
		Quota: 18e9, HeapLimit: 1136656384, OPFS: "ok", IDB: "ok",
		TimerRes: 0.1, Pointer: "fine",
	}
}

// Android apps on x86 Chromebooks are real devices, not emulators. Board
// names and ChromeOS build ids as they appear in real ARC user agents
// ("Android 11; dedede Build/R118-15604.57.0", "Android 11; hatch
// Build/R112-15359.58.0", "Android 11; octopus Build/R112-15359.58.0");
// Mesa's virgl driver reports the host's renderer string, or "virgl" with
// an older host, under the vendor "Mesa" ("Red Hat" in older Mesa).
func TestAndroidOnX86ChromebookIsNotAnEmulator(t *testing.T) {
	for _, s := range []*Signals{
		// ARC++ (container, Android 9/11) on a Gemini Lake board: native Mesa.
		arcWebView("octopus", "R112-15359.58.0", "Intel", "Mesa Intel(R) UHD Graphics 600 (GLK 2)"),
		// ARCVM on Comet Lake through virgl naming the host renderer.
		arcWebView("hatch", "R112-15359.58.0", "Mesa", "Mesa Intel(R) UHD Graphics (CML GT2)"),
		// ARCVM on Jasper Lake, older virgl: only "virgl".
		arcWebView("dedede", "R118-15604.57.0", "Red Hat", "virgl"),
		// AMD Chromebook (zork, Picasso): radeonsi.
		arcWebView("zork", "R120-15662.76.0", "AMD", "AMD Radeon Vega 3 Graphics (raven2, LLVM 16.0.0, DRM 3.42, 5.10.199)"),
	} {
		v := Assess(s, Options{Key: testKey})
		if v.Emulator || v.Antidetect || v.VirtualMachine || v.Automation {
			t.Errorf("%s / %s: emulator %v antidetect %v vm %v automation %v %v", s.UA, s.GL.Renderer, v.Emulator, v.Antidetect, v.VirtualMachine, v.Automation, v.Findings)
		}
		if v.Checked&CheckEmulator == 0 {
			t.Errorf("%s: emulator not checked", s.UA)
		}
	}
}

// A ChromeOS board in the user agent does not excuse what no Chromebook
// has: an emulator's renderer, a desktop graphics card, a hypervisor's
// adapter, SDK build names.
func TestChromebookMarkerDoesNotHideAnEmulator(t *testing.T) {
	for _, c := range []struct{ vendor, renderer string }{
		{"Google (Intel)", "Android Emulator OpenGL ES Translator (Mesa Intel(R) UHD Graphics 620 (KBL GT2))"},
		{"Google Inc. (Google)", "ANGLE (Google, Vulkan 1.3.0 (SwiftShader Device (Subzero) (0x0000C0DE)), SwiftShader driver)"},
		{"NVIDIA Corporation", "NVIDIA GeForce GTX 1060 6GB/PCIe/SSE2"},
		{"Google Inc. (Intel)", "ANGLE (Intel, Intel(R) UHD Graphics 630 Direct3D11 vs_5_0 ps_5_0, D3D11)"},
		{"VMware, Inc.", "SVGA3D; build: RELEASE; LLVM;"},
		{"ARM", "Mali-G710"},
	} {
		s := arcWebView("hatch", "R112-15359.58.0", c.vendor, c.renderer)
		if v := Assess(s, Options{Key: testKey}); !v.Emulator {
			t.Errorf("Chromebook-looking UA on %q: not an emulator %v", c.renderer, v.Findings)
		}
	}
	s := arcWebView("sdk_gphone64_x86_64", "R112-15359.58.0", "Intel", "Mesa Intel(R) UHD Graphics 600 (GLK 2)")
	if v := Assess(s, Options{Key: testKey}); !v.Emulator || !v.Has(FEmulatorBuild) {
		t.Errorf("SDK build name with a ChromeOS build id: %v", v.Findings)
	}
	// The same Chromebook WebView without the ChromeOS build id is an x86
	// Android with no explanation (BlueStacks, LDPlayer and the like
	// report a phone model): still an emulator.
	s = arcWebView("SM-G988N", "QP1A.190711.020", "Intel", "Mesa Intel(R) UHD Graphics 600 (GLK 2)")
	if v := Assess(s, Options{Key: testKey}); !v.Emulator || !v.Has(FEmulatorCPU) {
		t.Errorf("x86 Android phone model: %v", v.Findings)
	}
	// A look-alike that is not a ChromeOS release id.
	for _, ua := range []string{
		strings.Replace(s.UA, "QP1A.190711.020", "R16NW", 1),
		strings.Replace(s.UA, "QP1A.190711.020", "RQ3A.210705.001", 1),
		strings.Replace(s.UA, "QP1A.190711.020", "R-15359.58.0", 1),
		strings.Replace(s.UA, "QP1A.190711.020", "R112-15359", 1),
	} {
		x := *s
		x.UA = ua
		if v := Assess(&x, Options{Key: testKey}); !v.Emulator {
			t.Errorf("%s: read as a Chromebook %v", ua, v.Findings)
		}
	}
}

func TestChromeOSBuild(t *testing.T) {
	for ua, want := range map[string]bool{
		"Mozilla/5.0 (Linux; Android 11; dedede Build/R118-15604.57.0; wv)":        true,
		"Dalvik/2.1.0 (Linux; U; Android 9; cherry Build/R112-15359.58.0)":         true,
		"(Linux; Android 11; x Build/RQ3A.210705.001) (Build/R120-15662.76.0; wv)": true,
		"Mozilla/5.0 (Linux; Android 8.0.0; SM-G955U Build/R16NW)":                 false,
		"Mozilla/5.0 (Linux; Android 11; x Build/R112-15359.58)":                   false,
		"Mozilla/5.0 (Linux; Android 11; x Build/R112-15359.58.":                   false,
		"Mozilla/5.0 (Linux; Android 11; x Build/R112-":                            false,
		"Build/R": false,
		"":        false,
	} {
		if got := chromeOSBuild(ua); got != want {
			t.Errorf("chromeOSBuild(%q) = %v", ua, got)
		}
	}
}
