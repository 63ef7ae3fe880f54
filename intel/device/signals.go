// Package device turns the signals the browser collector reports
// (collector/collector.js, schema version SchemaVersion) into the device
// verdicts of SPEC 2.2: automation, antidetect, emulator, virtual machine,
// incognito, privacy mode, a tampering score and a keyed visitor id.
//
// Every verdict is a server-side decision over raw readings, so heuristics
// improve without a new collector. The collector only measures; it never
// decides. Assess is pure: no I/O, no clock, no randomness. What each
// verdict checks is documented on Assess.
//
// The ideas come from the public literature and the open-source detectors
// (BotD, CreepJS, FingerprintJS — what to look at); the code is our own.
package device

// SchemaVersion is the signal schema this package reads. The collector sends
// it as "v"; an event stores it beside the signals.
const SchemaVersion = 1

// Signals is one collection as collector.js reports it (JSON field names are
// the wire schema; keep them short: the collector is size-bounded). Absent
// readings keep their zero value; fields whose zero is a meaningful reading
// are pointers or carry -1 for "not read".
type Signals struct {
	V         int      `json:"v"`
	UA        string   `json:"ua"`       // navigator.userAgent
	Platform  string   `json:"platform"` // navigator.platform
	Vendor    string   `json:"vendor"`   // navigator.vendor
	UAData    *UAData  `json:"uad"`      // navigator.userAgentData (low entropy), nil when absent
	Langs     []string `json:"langs"`    // navigator.languages
	Webdriver *bool    `json:"wd"`       // navigator.webdriver
	Plugins   int      `json:"plugins"`  // navigator.plugins.length, -1 when not read
	Cores     int      `json:"hc"`       // navigator.hardwareConcurrency
	Memory    float64  `json:"mem"`      // navigator.deviceMemory (GB), 0 when absent
	Touch     int      `json:"touch"`    // navigator.maxTouchPoints, -1 when not read
	// Screen is width, height, colorDepth, devicePixelRatio.
	Screen []float64 `json:"screen"`
	// Window is outerWidth, outerHeight, innerWidth, innerHeight.
	Window   []int    `json:"win"`
	TZ       string   `json:"tz"`     // Intl time zone
	TZOffset int      `json:"tzo"`    // Date.getTimezoneOffset() in January
	GL       *GL      `json:"gl"`     // WebGL; nil when WebGL is unavailable
	Canvas   []string `json:"canvas"` // hashes of two identical drawings, in two canvases
	Audio    []string `json:"audio"`  // hashes of two identical offline audio renders
	// Lies names built-in functions and getters whose native-ness failed
	// (Function.prototype.toString lies, own-property overrides, a prototype
	// where a native method has none). Nil when the check did not run.
	Lies []string `json:"lies"`
	// Auto names automation artefacts found (driver globals, document
	// attributes, CDP/Playwright/Puppeteer bindings).
	Auto       []string `json:"auto"`
	ChromeObj  *bool    `json:"chrome"`  // typeof window.chrome == "object"
	NotifPerm  string   `json:"np"`      // Notification.permission
	PermQuery  string   `json:"pq"`      // permissions.query({name: "notifications"}).state
	Quota      float64  `json:"quota"`   // navigator.storage.estimate().quota, bytes (Chromium 138+: capped at usage + 10 GiB)
	HeapLimit  float64  `json:"heap"`    // performance.memory.jsHeapSizeLimit, bytes
	OPFS       string   `json:"opfs"`    // "ok" or the error name of storage.getDirectory()
	IDB        string   `json:"idb"`     // "ok" or the error name of indexedDB.open
	SW         *bool    `json:"sw"`      // "serviceWorker" in navigator
	Brave      bool     `json:"brave"`   // navigator.brave.isBrave exists
	TimerRes   float64  `json:"timer"`   // smallest positive performance.now() step seen, ms
	Pointer    string   `json:"pointer"` // primary pointer: fine, coarse, none
	Motion     *bool    `json:"motion"`  // DeviceMotionEvent exists
	Errors     []string `json:"err"`     // collection steps that failed
	DurationMs float64  `json:"ms"`      // collection time
}

// UAData is the low-entropy part of navigator.userAgentData.
type UAData struct {
	Brands   []Brand `json:"brands"`
	Mobile   bool    `json:"mobile"`
	Platform string  `json:"platform"`
}

// Brand is one client-hint brand.
type Brand struct {
	Brand   string `json:"brand"`
	Version string `json:"version"`
}

// GL is what WebGL reports. Vendor/Renderer are the unmasked values
// (WEBGL_debug_renderer_info) when the browser gives them, else the masked ones.
type GL struct {
	Vendor   string `json:"vendor"`
	Renderer string `json:"renderer"`
	Masked   bool   `json:"masked"` // the unmasked values were not available
}
