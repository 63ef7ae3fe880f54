package device

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Checked is the set of device verdicts that were actually checked
// (device.checked_signals): an unchecked verdict stays false and is not a
// clean result.
type Checked uint8

// The verdicts, in checked_signals order.
const (
	CheckAutomation Checked = 1 << iota
	CheckAntidetect
	CheckEmulator
	CheckVirtualMachine
	CheckIncognito
	CheckPrivacyMode
	CheckIPBlocklisted
	numChecks = 7

	// AllChecked is every verdict Assess can check.
	AllChecked Checked = 1<<numChecks - 1
)

var checkNames = [numChecks]string{"automation", "antidetect", "emulator", "virtual_machine", "incognito", "privacy_mode", "ip_blocklisted"}

// checkedLists holds the name list of every Checked set, built once, so the
// evaluate path hands out a shared slice instead of building one.
var checkedLists = func() (out [1 << numChecks][]string) {
	for s := range out {
		l := []string{}
		for i, n := range checkNames {
			if s&(1<<i) != 0 {
				l = append(l, n)
			}
		}
		out[s] = l
	}
	return out
}()

// Names lists the checked verdicts in a fixed order. The slice is shared:
// callers must not modify it.
func (c Checked) Names() []string { return checkedLists[c&AllChecked] }

// Finding names one observation behind a verdict. Findings are stored with
// the event (debugging, tests); they are not on the wire.
type Finding string

// Automation findings.
const (
	FWebdriver        Finding = "webdriver"         // navigator.webdriver is true
	FHeadlessUA       Finding = "headless_ua"       // HeadlessChrome / automation product in the UA
	FHeadlessBrand    Finding = "headless_brand"    // a Headless client-hint brand
	FDriverArtefact   Finding = "driver_artefact"   // driver globals, CDP/Playwright/Puppeteer bindings
	FNoPlugins        Finding = "no_plugins"        // desktop Chromium with no plugins (weak)
	FNoLanguages      Finding = "no_languages"      // empty navigator.languages (weak)
	FZeroOuter        Finding = "zero_outer_window" // outerWidth and outerHeight 0 (weak)
	FPermissionClash  Finding = "permission_clash"  // Notification.permission denied but the query says prompt (weak)
	FNoChromeObject   Finding = "no_chrome_object"  // desktop Chromium without window.chrome (weak)
	FNoWebGLHeadless  Finding = "no_webgl"          // desktop Chromium without WebGL at all (weak)
	FTimerlessRuntime Finding = "no_timer"          // performance.now never advanced (weak)
)

// Tampering findings (antidetect unless a privacy feature explains them).
const (
	FNativeLie        Finding = "native_lie"        // a built-in is not native
	FCanvasNoise      Finding = "canvas_noise"      // two identical drawings read back differently
	FAudioNoise       Finding = "audio_noise"       // two identical renders differ
	FPlatformMismatch Finding = "platform_mismatch" // UA OS vs navigator.platform
	FHintMismatch     Finding = "hint_mismatch"     // UA vs client hints (platform, mobile, version)
	FVendorMismatch   Finding = "vendor_mismatch"   // UA browser vs navigator.vendor / engine objects
	FGPUMismatch      Finding = "gpu_os_mismatch"   // WebGL renderer impossible on the claimed OS
	FPrivacyNoise     Finding = "privacy_noise"     // read-back noise from a browser privacy feature
)

// Other findings.
const (
	FEmulatorCPU      Finding = "mobile_ua_x86_platform" // Android UA on an x86 platform (not a Chromebook's)
	FEmulatorGPU      Finding = "mobile_ua_desktop_gpu"  // mobile UA with a desktop or emulator renderer
	FEmulatorBuild    Finding = "emulator_build"         // SDK / emulator build names in the UA
	FEmulatorTouch    Finding = "mobile_ua_no_touch"     // mobile UA, no touch points
	FVMRenderer       Finding = "vm_renderer"            // hypervisor display adapter
	FSoftwareRenderer Finding = "software_renderer"      // llvmpipe / SwiftShader / Basic Render on a desktop
	FQuotaIncognito   Finding = "storage_quota"          // Chromium's incognito storage quota (below the 10 GiB cap of 138+)
	FStorageIncognito Finding = "storage_refused"        // Firefox/Safari private-mode storage errors
	FBrave            Finding = "brave"                  // Brave (farbling)
	FResistFP         Finding = "resist_fingerprinting"  // Firefox resistFingerprinting / Tor Browser
	FIPBlocklisted    Finding = "ip_blocklisted"         // the event's address is on blocklists
)

// Options are the facts Assess needs beside the signals.
type Options struct {
	// Key keys the visitor id (the master secret's key for secrets.LabelVisitorID); the id
	// is then no public fingerprint: nobody without the key can compute it
	// from a browser's traits.
	Key []byte
	// IPChecked: the event's address was checked against the blocklists;
	// IPBlocklisted is the answer.
	IPChecked, IPBlocklisted bool
}

// Verdict is the device layer of SPEC 2.2 for one event.
type Verdict struct {
	Automation     bool
	Antidetect     bool
	Emulator       bool
	VirtualMachine bool
	Incognito      bool
	PrivacyMode    bool
	IPBlocklisted  bool
	TamperingScore float64 // 0–1, rounded to 0.01
	Complete       bool    // the tampering and bot checks had their inputs
	Checked        Checked
	VisitorID      string // 20 hex digits, "" when too little was reported
	Findings       []Finding
}

// Has reports whether f was found.
func (v *Verdict) Has(f Finding) bool { return slices.Contains(v.Findings, f) }

// Tampering weights (noisy OR: score = 1 − Π(1 − w)).
const (
	wLie          = 0.35
	wNoise        = 0.5
	wMismatch     = 0.3
	wPrivacyNoise = 0.1
)

// Assess decides the device verdicts for one collection. Each verdict checks:
//
//   - automation (needs the UA): strong — navigator.webdriver true; a
//     headless or automation product in the UA (HeadlessChrome, PhantomJS,
//     declared crawlers); a Headless client-hint brand; driver artefacts
//     (cdc_/$cdc_ and __webdriver/__selenium/__driver globals, document
//     webdriver attributes, Playwright/Puppeteer bindings). Weak, two needed —
//     a desktop Chromium with no plugins, no window.chrome, or no WebGL
//     (before Chrome 139: since then a GPU-less Chrome has none);
//     empty navigator.languages; outer window 0×0; Notification.permission
//     "denied" while permissions.query says "prompt"; a frozen timer.
//   - antidetect (needs the UA and the native-function check): native
//     functions that are not native (toString lies, own-property getter
//     overrides, prototypes on native methods); canvas or audio read-backs
//     that differ between two identical draws in one session; a UA whose OS,
//     mobility or version disagrees with navigator.platform or the client
//     hints; a UA browser that disagrees with navigator.vendor (Gecko's empty
//     one under a Chromium or Safari UA included) or the engine's own
//     objects (window.chrome in Firefox, client hints outside Chromium);
//     a WebGL renderer impossible on the claimed OS (Direct3D off Windows,
//     Apple GPUs off Apple — Asahi Linux's named Apple chips aside — phone
//     GPUs on a desktop). Read-back noise is
//     privacy_mode, not antidetect, in Brave, Firefox and Safari, whose
//     privacy protections add exactly that noise.
//   - emulator (needs the UA): an Android UA on an x86 platform; a mobile UA
//     with a desktop, hypervisor or emulator renderer (Android Emulator
//     translator, SwiftShader, llvmpipe, GeForce/Radeon/Intel desktop GPUs);
//     SDK build names (sdk_gphone, "Android SDK built for", generic_x86); a
//     mobile UA with no touch points. An Android UA whose build id is a
//     ChromeOS release (ARC: an Android app on a Chromebook) may have an
//     x86 CPU, an Intel or AMD GPU, virgl and no touch screen — the
//     Chromebook's own; an emulator renderer, a desktop graphics card, a
//     hypervisor's adapter, a phone GPU on x86 or an SDK build name still
//     count there.
//   - virtual_machine (needs a WebGL renderer): a hypervisor display adapter
//     (VMware, VirtualBox, Parallels, Hyper-V / Microsoft Basic Render /
//     RemoteFX, QEMU, QXL, virgl/VirtIO, Citrix, Apple's paravirtual device)
//     under a desktop OS; a software renderer
//     (llvmpipe, SwiftShader, softpipe) under a desktop OS when no automation
//     explains it — headless browsers render in software on any machine.
//   - incognito (engine-specific, checked only when the reading exists):
//     Chromium — a storage quota under twice the JS heap limit (incognito
//     quotas are memory-bound); from Chromium 138 on, a quota at the 10 GiB
//     cap of the predictable quota is no reading (regular windows report
//     it, and incognito ones do with IncognitoStaticStorageQuota), so
//     incognito stays unchecked — no current Chromium signal is reliable
//     enough instead (storage-flush timing side channels misread regular
//     windows on fast storage, and Chromium treats them as bugs to fix);
//     Firefox — storage.getDirectory() SecurityError,
//     IndexedDB InvalidStateError, or no serviceWorker; Safari —
//     storage.getDirectory() UnknownError.
//   - privacy_mode: Brave; Firefox resistFingerprinting or Tor Browser (two
//     of: UTC zone, timer clamped to ≥ 16 ms, 2 reported cores, masked WebGL
//     "Mozilla" renderer, window letterboxed to the screen); read-back noise
//     in a browser whose privacy protections add it.
//   - ip_blocklisted: Options.IPBlocklisted, when Options.IPChecked.
//   - tampering_score: noisy OR of the tampering findings — native lie 0.35
//     each (two at most), unexplained noise 0.5, each disagreement 0.3,
//     privacy-explained noise 0.1.
//   - visitor_id: HMAC-SHA256(Options.Key, stable traits) — OS and browser
//     family (not versions), platform, languages, zone, screen (orientation
//     free), cores, memory, touch, WebGL vendor and renderer, and the canvas
//     and audio hashes when they are not noisy — as 20 hex digits.
//   - complete: the automation and antidetect checks both ran.
func Assess(s *Signals, o Options) Verdict {
	var v Verdict
	if s == nil {
		return v
	}
	u := parseUA(s.UA)
	pOS, pX86 := platformOS(s.Platform)
	var hOS osKind
	if s.UAData != nil {
		hOS = hintOS(s.UAData.Platform)
	}
	renderer := ""
	if s.GL != nil {
		renderer = strings.ToLower(s.GL.Vendor + " " + s.GL.Renderer)
	}
	desktop := !u.mobile && !(s.UAData != nil && s.UAData.Mobile)
	add := func(f Finding) { v.Findings = append(v.Findings, f) }

	// Privacy features first: they explain noise that would otherwise be tampering.
	privacyBrowser := false
	if s.UA != "" {
		v.Checked |= CheckPrivacyMode
		if s.Brave || hasBrand(s.UAData, "brave") {
			add(FBrave)
			v.PrivacyMode = true
		}
		if u.browser == brFirefox && resistFingerprinting(s) {
			add(FResistFP)
			v.PrivacyMode = true
		}
		privacyBrowser = v.PrivacyMode || u.browser == brFirefox || u.browser == brSafari
	}

	// Automation. The weak signs read the UA's browser and platform, but a
	// driver's own marks need no UA: a report that leaves its UA out (a
	// script posting a canned report) is still assessed on them.
	if s.UA != "" || (s.Webdriver != nil && *s.Webdriver) || len(s.Auto) > 0 {
		v.Checked |= CheckAutomation
		strong, weak := 0, 0
		if s.Webdriver != nil && *s.Webdriver {
			add(FWebdriver)
			strong++
		}
		if u.headless {
			add(FHeadlessUA)
			strong++
		}
		if hasBrand(s.UAData, "headless") {
			add(FHeadlessBrand)
			strong++
		}
		if len(s.Auto) > 0 {
			add(FDriverArtefact)
			strong++
		}
		chromiumDesktop := u.browser == brChromium && desktop
		if chromiumDesktop && s.Plugins == 0 {
			add(FNoPlugins)
			weak++
		}
		if s.Langs != nil && len(s.Langs) == 0 {
			add(FNoLanguages)
			weak++
		}
		if desktop && len(s.Window) >= 2 && s.Window[0] == 0 && s.Window[1] == 0 {
			add(FZeroOuter)
			weak++
		}
		if s.NotifPerm == "denied" && s.PermQuery == "prompt" {
			add(FPermissionClash)
			weak++
		}
		if chromiumDesktop && s.ChromeObj != nil && !*s.ChromeObj {
			add(FNoChromeObject)
			weak++
		}
		// Chrome 139 made the SwiftShader fallback for WebGL opt-in: since
		// then a headed Chrome with no usable GPU (a VM or VDI session
		// without one, Remote Desktop, a blocklisted driver, hardware
		// acceleration off) has no WebGL, so its absence says nothing.
		if chromiumDesktop && s.GL == nil && !slices.Contains(s.Errors, "gl") && !noSoftwareWebGL(u.major) {
			add(FNoWebGLHeadless)
			weak++
		}
		if s.TimerRes < 0 {
			add(FTimerlessRuntime)
			weak++
		}
		v.Automation = strong > 0 || weak >= 2
	}

	// Antidetect / tampering.
	keep := 1.0
	tamper := func(f Finding, w float64, hard bool) {
		add(f)
		keep *= 1 - w
		if hard {
			v.Antidetect = true
		}
	}
	if s.UA != "" && s.Lies != nil {
		v.Checked |= CheckAntidetect
		if len(s.Lies) > 0 {
			add(FNativeLie)
			v.Antidetect = true
			for range min(len(s.Lies), 2) {
				keep *= 1 - wLie
			}
		}
		if noisy(s.Canvas) || noisy(s.Audio) {
			if privacyBrowser {
				v.PrivacyMode = true
				tamper(FPrivacyNoise, wPrivacyNoise, false)
			} else {
				if noisy(s.Canvas) {
					tamper(FCanvasNoise, wNoise, true)
				}
				if noisy(s.Audio) {
					tamper(FAudioNoise, wNoise, true)
				}
			}
		}
		if !osAgree(u.os, pOS) && !(u.browser == brFirefox && v.Has(FResistFP)) {
			tamper(FPlatformMismatch, wMismatch, true)
		}
		if s.UAData != nil && u.browser == brChromium && hintMismatch(s.UAData, u, hOS) {
			tamper(FHintMismatch, wMismatch, true)
		}
		if vendorMismatch(s, u) {
			tamper(FVendorMismatch, wMismatch, true)
		}
		if gpuMismatch(renderer, u.os) {
			tamper(FGPUMismatch, wMismatch, true)
		}
	}
	v.TamperingScore = math.Round((1-keep)*100) / 100

	// Emulator.
	if s.UA != "" {
		v.Checked |= CheckEmulator
		ua := strings.ToLower(s.UA)
		if containsAny(ua, "sdk_gphone", "android sdk built for", "generic_x86", "google_sdk", "sdk_google", "emulator", "genymotion", "bluestacks") {
			add(FEmulatorBuild)
			v.Emulator = true
		}
		// Android apps on a Chromebook (ARC++, ARCVM) run on the
		// Chromebook's own x86 CPU and Intel or AMD GPU (through virtio-gpu
		// on ARCVM), often without a touch screen: none of that is an
		// emulator there. What no Chromebook has still is.
		arc := u.os == osAndroid && chromeOSBuild(s.UA)
		if u.os == osAndroid && pX86 && (!arc || phoneGPU(renderer)) {
			add(FEmulatorCPU)
			v.Emulator = true
		}
		if u.mobile && renderer != "" && emulatorRenderer(renderer, arc) {
			add(FEmulatorGPU)
			v.Emulator = true
		}
		if u.mobile && s.Touch == 0 && !arc {
			add(FEmulatorTouch)
			v.Emulator = true
		}
	}

	// Virtual machine.
	if renderer != "" {
		v.Checked |= CheckVirtualMachine
		// The UA's claim decides here, not a client hint beside it: a
		// mobile hint on a Windows UA (forged, or a phone asking for the
		// desktop site, whose GPU is no hypervisor's) must not hide a
		// VMware renderer that the emulator checks, which read the UA,
		// do not catch either.
		if !u.mobile && !v.Emulator {
			switch {
			case vmRenderer(renderer):
				add(FVMRenderer)
				v.VirtualMachine = true
			case containsAny(renderer, "llvmpipe", "swiftshader", "softpipe", "software rasterizer") && !v.Automation:
				add(FSoftwareRenderer)
				v.VirtualMachine = true
			}
		}
	}

	// Incognito.
	switch {
	case u.browser == brChromium && s.Quota > 0 && !staticQuotaCap(u.major, s.Quota):
		v.Checked |= CheckIncognito
		heap := s.HeapLimit
		if heap <= 0 {
			heap = 1 << 30
		}
		if s.Quota < 2*heap {
			add(FQuotaIncognito)
			v.Incognito = true
		}
	case u.browser == brFirefox && (s.OPFS != "" || s.IDB != "" || s.SW != nil):
		v.Checked |= CheckIncognito
		if s.OPFS == "SecurityError" || s.IDB == "InvalidStateError" || (s.SW != nil && !*s.SW) {
			add(FStorageIncognito)
			v.Incognito = true
		}
	case u.browser == brSafari && s.OPFS != "":
		v.Checked |= CheckIncognito
		if s.OPFS == "UnknownError" {
			add(FStorageIncognito)
			v.Incognito = true
		}
	}

	if o.IPChecked {
		v.Checked |= CheckIPBlocklisted
		if o.IPBlocklisted {
			add(FIPBlocklisted)
			v.IPBlocklisted = true
		}
	}
	v.Complete = v.Checked&CheckAutomation != 0 && v.Checked&CheckAntidetect != 0
	v.VisitorID = visitorID(s, u, o.Key)
	return v
}

// staticQuotaCap reports whether a Chromium quota reading is the capped
// value Chromium reports from 138 on (chromestatus 4977371751645184:
// usage + min(10 GiB, the real quota rounded up to a whole GiB)), which
// regular windows read and, with IncognitoStaticStorageQuota, incognito
// ones too: that reading cannot tell them apart. Below the cap the
// reading still does (a RAM-bound incognito quota, or a regular window's
// small real quota); before 138 every reading was the real quota.
func staticQuotaCap(major string, quota float64) bool {
	n, err := strconv.Atoi(major)
	return err == nil && n >= 138 && quota >= 10<<30
}

// noSoftwareWebGL: a Chromium major version (as the UA writes it) from
// which WebGL no longer falls back to SwiftShader without a GPU (139).
func noSoftwareWebGL(major string) bool {
	n, err := strconv.Atoi(major)
	return err == nil && n >= 139
}

func noisy(h []string) bool { return len(h) >= 2 && h[0] != "" && h[1] != "" && h[0] != h[1] }

func hasBrand(d *UAData, sub string) bool {
	if d == nil {
		return false
	}
	for _, b := range d.Brands {
		if strings.Contains(strings.ToLower(b.Brand), sub) {
			return true
		}
	}
	return false
}

// hintMismatch: Chromium's client hints against its own UA string.
func hintMismatch(d *UAData, u uaInfo, hOS osKind) bool {
	if !osAgree(u.os, hOS) {
		return true
	}
	if d.Mobile != u.mobile && u.os != osUnknown {
		// Android tablets send mobile=false with an Android UA without "Mobile".
		if !(u.os == osAndroid && !d.Mobile) {
			return true
		}
	}
	if u.major == "" {
		return false
	}
	for _, b := range d.Brands {
		l := strings.ToLower(b.Brand)
		if l == "chromium" || l == "google chrome" || l == "microsoft edge" || l == "headlesschrome" {
			if b.Version != "" && b.Version != u.major && !strings.HasPrefix(b.Version, u.major+".") {
				return true
			}
		}
	}
	return false
}

// vendorMismatch: navigator.vendor and engine objects against the UA browser.
// An empty vendor is Gecko's: under a Chromium or Safari UA it counts when
// the collector read it (a report with its err list, vendor not in it) —
// except under legacy EdgeHTML's UA ("Chrome/… Edge/"), whose engine left
// navigator.vendor empty as IE did.
func vendorMismatch(s *Signals, u uaInfo) bool {
	vendorRead := s.Errors != nil && !slices.Contains(s.Errors, "vendor") && !strings.Contains(s.UA, " Edge/")
	switch u.browser {
	case brChromium:
		return s.Vendor != "Google Inc." && (s.Vendor != "" || vendorRead)
	case brFirefox:
		return s.Vendor != "" || (s.ChromeObj != nil && *s.ChromeObj) || s.UAData != nil
	case brSafari:
		return (s.Vendor != "Apple Computer, Inc." && (s.Vendor != "" || vendorRead)) || s.UAData != nil
	}
	return false
}

// gpuMismatch: a renderer the claimed OS cannot have.
func gpuMismatch(r string, o osKind) bool {
	if r == "" {
		return false
	}
	switch {
	case containsAny(r, "direct3d", "d3d11", "d3d9"):
		return o != osWindows && o != osUnknown
	case containsAny(r, "apple m1", "apple m2", "apple m3", "apple m4", "apple gpu"):
		// Asahi Linux's Mesa driver names the chip ("Apple M1 (G13G B1)")
		// on Apple silicon Macs running Linux; "Apple GPU" is Apple's own.
		if o == osLinux && !strings.Contains(r, "apple gpu") {
			return false
		}
		return o != osMac && o != osIOS && o != osUnknown && !strings.Contains(r, "android emulator")
	case containsAny(r, "adreno", "mali-", "mali ", "powervr", "xclipse"):
		return o == osWindows || o == osMac
	}
	return false
}

func vmRenderer(r string) bool { return hypervisorRenderer(r) || virtioRenderer(r) }

// hypervisorRenderer: the display adapters of desktop hypervisors. Apple's
// Virtualization framework (macOS guests on Apple silicon) gives its guests
// a Metal device named "Apple Paravirtual device"; Hyper-V's vGPU is the
// "Microsoft RemoteFX Graphics Device".
func hypervisorRenderer(r string) bool {
	return containsAny(r, "vmware", "virtualbox", "parallels", "microsoft basic render", "hyper-v",
		"svga3d", "qxl", "citrix", "bochs", "apple paravirtual", "remotefx", "qemu")
}

// virtioRenderer: Mesa's virtio-gpu driver, virgl (vendor "Mesa", "Red
// Hat" in older Mesa; the renderer is the host's string, or just "virgl"
// with an older host). QEMU and crosvm guests have it — ARCVM on recent
// Chromebooks among them.
func virtioRenderer(r string) bool { return containsAny(r, "virgl", "virtio", "red hat") }

// phoneGPU: the GPUs of ARM phones and tablets, which no x86 machine has.
func phoneGPU(r string) bool {
	return containsAny(r, "adreno", "mali-", "mali ", "powervr", "xclipse", "immortalis")
}

// emulatorRenderer: a renderer a real phone cannot have — an emulator's
// translator, a software renderer, a desktop graphics card, a hypervisor's
// adapter. Under ARC (arc) the Intel and AMD GPUs of x86 Chromebooks and
// ARCVM's virgl are the device's own.
func emulatorRenderer(r string, arc bool) bool {
	if containsAny(r, "android emulator", "swiftshader", "llvmpipe", "geforce", "nvidia", "direct3d", "d3d11") || hypervisorRenderer(r) {
		return true
	}
	return !arc && (containsAny(r, "intel(r)", "intel inc", "radeon") || virtioRenderer(r))
}

// chromeOSBuild reports whether a user agent's Android build id is a
// ChromeOS release ("Build/R118-15604.57.0"). ARC, Android on ChromeOS,
// takes Build.ID from the ChromeOS version and Build.MODEL from the board
// ("Linux; Android 11; dedede Build/R118-15604.57.0" in real ARC user
// agents), and the WebView user agent carries both (Android CDD 3.4.1:
// "$(MODEL) Build/$(BUILD); wv"). Android's own build ids
// ("RQ3A.210705.001", "R16NW") have no "R<milestone>-" form.
func chromeOSBuild(ua string) bool {
	const tok = "Build/R"
	off := 0
	for {
		i := strings.Index(ua[off:], tok)
		if i < 0 {
			return false
		}
		off += i + len(tok)
		if chromeOSVersion(ua[off:]) {
			return true
		}
	}
}

// chromeOSVersion: s starts with "<milestone>-<a>.<b>.<c>".
func chromeOSVersion(s string) bool {
	n := digits(s)
	if n == 0 || n == len(s) || s[n] != '-' {
		return false
	}
	s = s[n+1:]
	for part := range 3 {
		n = digits(s)
		if n == 0 {
			return false
		}
		if part < 2 {
			if n == len(s) || s[n] != '.' {
				return false
			}
			s = s[n+1:]
		}
	}
	return true
}

// digits counts the leading ASCII digits of s.
func digits(s string) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}

// resistFingerprinting recognises Firefox's resistFingerprinting (and Tor
// Browser, which turns it on) by the values it pins.
func resistFingerprinting(s *Signals) bool {
	n := 0
	if s.TZ == "UTC" || s.TZ == "Etc/UTC" || (s.TZ == "" && s.TZOffset == 0) {
		n++
	}
	if s.TimerRes >= 16 {
		n++
	}
	if s.Cores == 2 {
		n++
	}
	if s.GL != nil && strings.EqualFold(s.GL.Renderer, "Mozilla") {
		n++
	}
	if len(s.Screen) >= 2 && len(s.Window) >= 4 && s.Window[2] > 0 && float64(s.Window[2]) == s.Screen[0] && float64(s.Window[3]) == s.Screen[1] {
		n++
	}
	return n >= 2
}

// visitorID hashes the stable traits with key. A browser update, a new
// window size or a zoom change does not move it; new hardware or a new
// screen does.
func visitorID(s *Signals, u uaInfo, key []byte) string {
	if s.UA == "" {
		return ""
	}
	h := hmac.New(sha256.New, key)
	w := func(parts ...string) {
		for _, p := range parts {
			h.Write([]byte(p))
			h.Write([]byte{0})
		}
	}
	w("v1", u.os.String(), strconv.Itoa(int(u.browser)), s.Platform, strings.Join(s.Langs, ","), s.TZ)
	if s.UAData != nil {
		w(s.UAData.Platform)
	}
	if len(s.Screen) >= 4 {
		a, b := s.Screen[0], s.Screen[1]
		if a > b {
			a, b = b, a
		}
		w(ftoa(a), ftoa(b), ftoa(s.Screen[2]), ftoa(s.Screen[3]))
	}
	w(strconv.Itoa(s.Cores), ftoa(s.Memory), strconv.Itoa(s.Touch))
	if s.GL != nil {
		w(s.GL.Vendor, s.GL.Renderer)
	}
	if len(s.Canvas) > 0 && !noisy(s.Canvas) {
		w(s.Canvas[0])
	}
	if len(s.Audio) > 0 && !noisy(s.Audio) {
		w(s.Audio[0])
	}
	sum := h.Sum(nil)
	return hex.EncodeToString(sum[:10])
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'g', 6, 64) }
