package device

import "testing"

// TestVMRendererNotHiddenByAMobileHint: COLLECTOR.md reads a VM's renderer
// (VMware, VirtualBox, …) with a desktop OS as a virtual machine. A client
// hint saying mobile beside a Windows UA made the device "not a desktop"
// for the VM check, while the emulator checks read the UA (desktop) and
// did not fire: virtual_machine was listed as checked, with no finding.
func TestVMRendererNotHiddenByAMobileHint(t *testing.T) {
	s := &Signals{
		V:        1,
		UA:       "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/140.0.0.0 Safari/537.36",
		Platform: "Win32",
		UAData:   &UAData{Mobile: true, Platform: "Windows", Brands: []Brand{{Brand: "Google Chrome", Version: "140"}}},
		Plugins:  5, Touch: 0, Langs: []string{"en-US"},
		GL: &GL{Vendor: "Google Inc. (VMware, Inc.)", Renderer: "ANGLE (VMware, Inc., VMware SVGA 3D (0x00000405) Direct3D11 vs_5_0 ps_5_0, D3D11)"},
	}
	v := Assess(s, Options{Key: []byte("k")})
	if v.Checked&CheckVirtualMachine == 0 || !v.VirtualMachine {
		t.Fatalf("VMware renderer on a Windows UA with a mobile hint: checked=%v findings=%v", v.Checked.Names(), v.Findings)
	}
}
