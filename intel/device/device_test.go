package device

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var testKey = []byte("visitor-id-test-key-0123456789ab")

// fixture is one recorded signal set from testdata/ with what it must yield.
// Verdicts not named in want must be false.
type fixture struct {
	About   string  `json:"about"`
	Signals Signals `json:"signals"`
	Want    struct {
		Automation     bool     `json:"automation"`
		Antidetect     bool     `json:"antidetect"`
		Emulator       bool     `json:"emulator"`
		VirtualMachine bool     `json:"virtual_machine"`
		Incognito      bool     `json:"incognito"`
		PrivacyMode    bool     `json:"privacy_mode"`
		TamperingScore *float64 `json:"tampering_score"`
		Complete       bool     `json:"complete"`
		Findings       []string `json:"findings"`
		Checked        []string `json:"checked"`
	} `json:"want"`
}

func loadFixtures(t testing.TB) map[string]*fixture {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil || len(files) < 6 {
		t.Fatalf("fixtures: %v (%d files)", err, len(files))
	}
	out := map[string]*fixture{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var fx fixture
		dec := json.NewDecoder(strings.NewReader(string(b)))
		dec.DisallowUnknownFields() // a typo in a fixture must not pass silently
		if err := dec.Decode(&fx); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[strings.TrimSuffix(filepath.Base(f), ".json")] = &fx
	}
	return out
}

// TestRecordedSignalSets runs every recorded set: a normal desktop Chrome,
// headless Chrome, VM renderers, an Android emulator and a real phone, Brave,
// Firefox resistFingerprinting, an antidetect profile, incognito and
// Safari private windows, a chromedriver session.
func TestRecordedSignalSets(t *testing.T) {
	fx := loadFixtures(t)
	for _, must := range []string{"chrome_desktop_windows", "chrome_headless_linux", "vm_vmware_windows", "android_emulator", "brave_macos", "firefox_resist_fingerprinting"} {
		if fx[must] == nil {
			t.Fatalf("fixture %s missing", must)
		}
	}
	for name, f := range fx {
		t.Run(name, func(t *testing.T) {
			v := Assess(&f.Signals, Options{Key: testKey, IPChecked: true})
			w := f.Want
			got := [6]bool{v.Automation, v.Antidetect, v.Emulator, v.VirtualMachine, v.Incognito, v.PrivacyMode}
			want := [6]bool{w.Automation, w.Antidetect, w.Emulator, w.VirtualMachine, w.Incognito, w.PrivacyMode}
			if got != want {
				t.Errorf("automation, antidetect, emulator, vm, incognito, privacy:\n got %v\nwant %v\nfindings %v", got, want, v.Findings)
			}
			if w.TamperingScore != nil && v.TamperingScore != *w.TamperingScore {
				t.Errorf("tampering_score %v, want %v (findings %v)", v.TamperingScore, *w.TamperingScore, v.Findings)
			}
			if !w.Antidetect && w.TamperingScore == nil && v.TamperingScore != 0 {
				t.Errorf("tampering_score %v for a set with no tampering (findings %v)", v.TamperingScore, v.Findings)
			}
			for _, fd := range w.Findings {
				if !v.Has(Finding(fd)) {
					t.Errorf("finding %s missing; have %v", fd, v.Findings)
				}
			}
			if v.Complete != w.Complete {
				t.Errorf("complete %v", v.Complete)
			}
			if w.Checked != nil && !slices.Equal(append(w.Checked, "ip_blocklisted"), v.Checked.Names()) {
				t.Errorf("checked %v, want %v", v.Checked.Names(), w.Checked)
			}
			if len(v.VisitorID) != 20 {
				t.Errorf("visitor id %q", v.VisitorID)
			}
		})
	}
}

// TestPrivacyIsNeverAntidetect: the privacy features alone never read as
// antidetect, whatever noise they add.
func TestPrivacyIsNeverAntidetect(t *testing.T) {
	fx := loadFixtures(t)
	for _, name := range []string{"brave_macos", "firefox_resist_fingerprinting", "safari_private"} {
		s := fx[name].Signals
		s.Canvas = []string{"aaaa", "bbbb"}
		s.Audio = []string{"1.5", "1.6"}
		v := Assess(&s, Options{Key: testKey})
		if v.Antidetect || !v.PrivacyMode {
			t.Errorf("%s with noise: antidetect %v privacy %v (%v)", name, v.Antidetect, v.PrivacyMode, v.Findings)
		}
	}
	// The same noise in a plain Chrome is tampering.
	s := fx["chrome_desktop_windows"].Signals
	s.Canvas = []string{"aaaa", "bbbb"}
	if v := Assess(&s, Options{Key: testKey}); !v.Antidetect || !v.Has(FCanvasNoise) || v.PrivacyMode {
		t.Errorf("noisy Chrome: %+v", v)
	}
}

func TestHeadlessSoftwareRendererIsNotAVM(t *testing.T) {
	s := loadFixtures(t)["chrome_headless_linux"].Signals
	if v := Assess(&s, Options{}); v.VirtualMachine {
		t.Fatalf("headless SwiftShader read as a VM: %v", v.Findings)
	}
	s.UA = strings.Replace(s.UA, "HeadlessChrome", "Chrome", 1)
	if v := Assess(&s, Options{}); !v.VirtualMachine || v.Automation {
		t.Fatalf("headed Chrome on SwiftShader: vm %v automation %v %v", v.VirtualMachine, v.Automation, v.Findings)
	}
}

func TestWeakAutomationNeedsTwo(t *testing.T) {
	s := loadFixtures(t)["chrome_desktop_windows"].Signals
	s.Plugins = 0
	if v := Assess(&s, Options{}); v.Automation {
		t.Fatalf("one weak sign is automation: %v", v.Findings)
	}
	s.Langs = []string{}
	if v := Assess(&s, Options{}); !v.Automation {
		t.Fatalf("two weak signs are not: %v", v.Findings)
	}
}

func TestVisitorID(t *testing.T) {
	fx := loadFixtures(t)
	s := fx["chrome_desktop_windows"].Signals
	id := Assess(&s, Options{Key: testKey}).VisitorID
	// A browser update, a resized window, a rotated screen: same device.
	s2 := s
	s2.UA = strings.Replace(s.UA, "131.0.0.0", "132.0.0.0", 1)
	s2.Window = []int{1200, 800, 1200, 700}
	s2.Screen = []float64{1440, 2560, 24, 1}
	s2.DurationMs = 999
	if got := Assess(&s2, Options{Key: testKey}).VisitorID; got != id {
		t.Fatalf("visitor id moved: %s → %s", id, got)
	}
	// Another GPU or another key: another id.
	s3 := s
	s3.GL = &GL{Vendor: "Google Inc. (AMD)", Renderer: "ANGLE (AMD, Radeon RX 6600)"}
	if got := Assess(&s3, Options{Key: testKey}).VisitorID; got == id {
		t.Fatal("different GPU, same id")
	}
	if got := Assess(&s, Options{Key: []byte("other")}).VisitorID; got == id {
		t.Fatal("the id does not depend on the key")
	}
	// Canvas noise is left out, so a farbling browser keeps its id.
	b := fx["firefox_resist_fingerprinting"].Signals
	idb := Assess(&b, Options{Key: testKey}).VisitorID
	b.Canvas = []string{"ffff0000", "0000ffff"}
	if got := Assess(&b, Options{Key: testKey}).VisitorID; got != idb {
		t.Fatal("noisy canvas moved the id")
	}
	if Assess(&Signals{}, Options{Key: testKey}).VisitorID != "" {
		t.Fatal("empty report has an id")
	}
}

func TestNothingReported(t *testing.T) {
	v := Assess(&Signals{V: 1}, Options{})
	if v.Checked != 0 || v.Complete || v.Automation || len(v.Checked.Names()) != 0 || v.Checked.Names() == nil {
		t.Fatalf("%+v", v)
	}
	if v := Assess(nil, Options{}); v.Complete {
		t.Fatal("nil signals complete")
	}
	v = Assess(&Signals{V: 1}, Options{IPChecked: true, IPBlocklisted: true})
	if !v.IPBlocklisted || !slices.Equal(v.Checked.Names(), []string{"ip_blocklisted"}) {
		t.Fatalf("%+v", v)
	}
}

func TestUAParsing(t *testing.T) {
	for _, c := range []struct {
		ua      string
		br      browser
		os      osKind
		mobile  bool
		major   string
		headles bool
	}{
		{"Mozilla/5.0 (X11; CrOS x86_64 14541.0.0) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36", brChromium, osChromeOS, false, "120", false},
		{"Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) CriOS/126.0 Mobile/15E148 Safari/604.1", brSafari, osIOS, true, "", false},
		{"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36 Edg/131.0.0.0", brChromium, osWindows, false, "131", false},
		{"Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)", brUnknown, osUnknown, false, "", true},
		{"Mozilla/5.0 (Windows NT 10.0; Win64; x64; Microsoft Outlook 16.0) like Gecko", brUnknown, osWindows, false, "", false},
	} {
		u := parseUA(c.ua)
		if u.browser != c.br || u.os != c.os || u.mobile != c.mobile || u.major != c.major || u.headless != c.headles {
			t.Errorf("%s: %+v", c.ua, u)
		}
	}
}

func BenchmarkAssess(b *testing.B) {
	fx := loadFixtures(b)
	for _, name := range []string{"chrome_desktop_windows", "chrome_headless_linux", "antidetect_spoofed_profile"} {
		s := fx[name].Signals
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = Assess(&s, Options{Key: testKey, IPChecked: true})
			}
		})
	}
}

// FuzzAssess: any report the collector endpoint can decode is assessed
// without panicking, with a score in [0, 1].
func FuzzAssess(f *testing.F) {
	for _, name := range []string{"chrome_headless_linux", "android_emulator", "firefox_resist_fingerprinting"} {
		b, err := os.ReadFile(filepath.Join("testdata", name+".json"))
		if err != nil {
			f.Fatal(err)
		}
		var fx struct {
			Signals json.RawMessage `json:"signals"`
		}
		if err := json.Unmarshal(b, &fx); err != nil {
			f.Fatal(err)
		}
		f.Add([]byte(fx.Signals))
	}
	f.Add([]byte(`{"ua":"Android","win":[0],"screen":[1],"uad":{"brands":[{}]}}`))
	f.Add([]byte(`{"ua":"Linux; Android 11; x Build/R1-2.3.Build/R9-","platform":"Linux x86_64","touch":0,"gl":{"renderer":"virgl"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var s Signals
		if json.Unmarshal(b, &s) != nil {
			return
		}
		v := Assess(&s, Options{Key: testKey, IPChecked: true})
		if v.TamperingScore < 0 || v.TamperingScore > 1 {
			t.Fatalf("tampering %v", v.TamperingScore)
		}
	})
}

// TestAutomationWithoutUA: a driver's own marks (navigator.webdriver, driver
// globals) make an automation verdict in a report that leaves its UA out;
// an empty report checks nothing.
func TestAutomationWithoutUA(t *testing.T) {
	yes := true
	for _, s := range []Signals{{Webdriver: &yes}, {Auto: []string{"cdc_adoQpoasnfa76pfcZLmcfl_Array"}}} {
		v := Assess(&s, Options{Key: testKey})
		if !v.Automation || v.Checked&CheckAutomation == 0 {
			t.Errorf("%+v: automation %v, checked %v", s, v.Automation, v.Checked.Names())
		}
	}
	if v := Assess(&Signals{}, Options{Key: testKey}); v.Automation || v.Checked&CheckAutomation != 0 {
		t.Errorf("empty report: automation %v, checked %v", v.Automation, v.Checked.Names())
	}
}
