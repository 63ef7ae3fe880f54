package device

import (
	"strings"
)

// Browser families and operating systems as the heuristics compare them.
type browser uint8

const (
	brUnknown browser = iota
	brChromium
	brFirefox
	brSafari
)

type osKind uint8

const (
	osUnknown osKind = iota
	osWindows
	osMac
	osLinux
	osAndroid
	osIOS
	osChromeOS
)

func (o osKind) mobile() bool { return o == osAndroid || o == osIOS }

func (o osKind) String() string {
	return [...]string{"unknown", "windows", "macos", "linux", "android", "ios", "chromeos"}[o]
}

// uaInfo is what the user-agent string claims.
type uaInfo struct {
	browser  browser
	os       osKind
	mobile   bool
	major    string // browser major version as written ("156")
	headless bool   // HeadlessChrome or another headless/automation product token
}

// automationProducts are user-agent product tokens of automation stacks and
// declared crawlers. Past the named ones, a crawler's generic product token
// ("AhrefsBot/7.0", "…spider…", "…crawler…") names one too: no browser's
// token ends in "bot/".
var automationProducts = []string{
	"headlesschrome", "phantomjs", "slimerjs", "puppeteer", "playwright", "selenium",
	"googlebot", "bingbot", "yandexbot", "duckduckbot", "baiduspider", "applebot",
	"petalbot", "bytespider", "gptbot", "claudebot", "ccbot", "python-requests", "curl/", "wget/", "headless",
	"bot/", "spider", "crawler", "adsbot-google", "storebot-google", "google-inspectiontool", "chrome-lighthouse",
}

func parseUA(ua string) uaInfo {
	var u uaInfo
	l := strings.ToLower(ua)
	switch {
	case strings.Contains(l, "iphone") || strings.Contains(l, "ipad") || strings.Contains(l, "ipod"):
		u.os = osIOS
	case strings.Contains(l, "android"):
		u.os = osAndroid
	case strings.Contains(l, "cros "):
		u.os = osChromeOS
	case strings.Contains(l, "windows"):
		u.os = osWindows
	case strings.Contains(l, "macintosh") || strings.Contains(l, "mac os x"):
		u.os = osMac
	case strings.Contains(l, "linux") || strings.Contains(l, "x11"):
		u.os = osLinux
	}
	u.mobile = u.os.mobile() || strings.Contains(l, "mobile")
	switch {
	case strings.Contains(l, "firefox/") || strings.Contains(l, "fxios/"):
		u.browser = brFirefox
		u.major = version(ua, "Firefox/")
	case strings.Contains(l, "chrome/") || strings.Contains(l, "chromium/") || strings.Contains(l, "crios/"):
		u.browser = brChromium
		if u.major = version(ua, "Chrome/"); u.major == "" {
			u.major = version(ua, "Chromium/")
		}
	case strings.Contains(l, "safari/") && strings.Contains(l, "version/"):
		u.browser = brSafari
		u.major = version(ua, "Version/")
	}
	if u.os == osIOS {
		u.browser = brSafari // every iOS browser is WebKit
	}
	for _, p := range automationProducts {
		if strings.Contains(l, p) {
			u.headless = true
			break
		}
	}
	return u
}

// version returns the digits after token up to the first dot.
func version(ua, token string) string {
	i := strings.Index(ua, token)
	if i < 0 {
		// HeadlessChrome/156.0 contains "Chrome/"; other spellings fall through.
		return ""
	}
	s := ua[i+len(token):]
	j := 0
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	return s[:j]
}

// platformOS maps navigator.platform. x86 reports whether it names an x86
// CPU (an Android phone reports an ARM one).
func platformOS(p string) (o osKind, x86 bool) {
	l := strings.ToLower(p)
	x86 = strings.Contains(l, "x86") || strings.Contains(l, "i686") || strings.Contains(l, "i386") || strings.Contains(l, "amd64")
	switch {
	case l == "":
		return osUnknown, false
	case strings.HasPrefix(l, "win"):
		return osWindows, x86
	case strings.HasPrefix(l, "mac"):
		return osMac, x86
	case strings.HasPrefix(l, "iphone") || strings.HasPrefix(l, "ipad") || strings.HasPrefix(l, "ipod"):
		return osIOS, false
	case strings.Contains(l, "android"):
		return osAndroid, x86
	case strings.HasPrefix(l, "linux") || strings.Contains(l, "x11"):
		return osLinux, x86
	case strings.HasPrefix(l, "cros"):
		return osChromeOS, x86
	}
	return osUnknown, x86
}

// hintOS maps the client-hint platform.
func hintOS(p string) osKind {
	switch strings.ToLower(strings.TrimSpace(p)) {
	case "windows":
		return osWindows
	case "macos":
		return osMac
	case "linux":
		return osLinux
	case "android":
		return osAndroid
	case "ios":
		return osIOS
	case "chrome os", "chromeos", "chromium os":
		return osChromeOS
	}
	return osUnknown
}

// osAgree reports whether two OS readings can both be true. Android is a
// Linux, so a Linux platform string is fine for an Android UA (the CPU check
// is the emulator heuristic's business); Chrome OS reports a Linux platform.
func osAgree(a, b osKind) bool {
	if a == osUnknown || b == osUnknown || a == b {
		return true
	}
	pair := func(x, y osKind) bool { return (a == x && b == y) || (a == y && b == x) }
	// iPadOS in desktop mode claims a Mac.
	return pair(osAndroid, osLinux) || pair(osChromeOS, osLinux) || pair(osIOS, osMac)
}

func containsAny(s string, subs ...string) bool {
	for _, x := range subs {
		if strings.Contains(s, x) {
			return true
		}
	}
	return false
}
