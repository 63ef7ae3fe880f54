package device

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestClampKeepsRealReports: every recorded report is inside the bounds, so
// clamping changes nothing a real collector sends.
func TestClampKeepsRealReports(t *testing.T) {
	for name, fx := range loadFixtures(t) {
		before, _ := json.Marshal(fx.Signals)
		var s Signals
		if err := json.Unmarshal(before, &s); err != nil {
			t.Fatal(err)
		}
		s.Clamp()
		if !reflect.DeepEqual(s, fx.Signals) {
			after, _ := json.Marshal(s)
			t.Errorf("%s changed:\n%s\n%s", name, before, after)
		}
	}
}

// TestClampBoundsAReport: a padded report (the 32 KB a page may send, in
// long strings and long lists) keeps a few KB; the verdict over the clamped
// report is what an event stores.
func TestClampBoundsAReport(t *testing.T) {
	long := strings.Repeat("é", 5000) // two bytes each: cuts fall inside characters
	list := make([]string, 1000)
	for i := range list {
		list[i] = long
	}
	wd := true
	s := Signals{
		V: 1, UA: "Mozilla/5.0 (X11; Linux x86_64) HeadlessChrome/156.0.0.0 " + long, Platform: long, Vendor: long + "\x00\x1f",
		UAData: &UAData{Brands: make([]Brand, 100), Platform: long}, Langs: list, Webdriver: &wd,
		Screen: make([]float64, 100), Window: make([]int, 100), TZ: long, GL: &GL{Vendor: long, Renderer: long},
		Canvas: list, Audio: list, Lies: list, Auto: list, NotifPerm: long, PermQuery: long, OPFS: long, IDB: long,
		Pointer: long, Errors: list,
	}
	for i := range s.UAData.Brands {
		s.UAData.Brands[i] = Brand{Brand: long, Version: long}
	}
	s.Clamp()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&s); err != nil {
		t.Fatal(err)
	}
	if buf.Len() > 12<<10 {
		t.Fatalf("a clamped report encodes to %d bytes", buf.Len())
	}
	if len(s.UA) > MaxUALen || len(s.Vendor) > MaxTextLen || strings.ContainsAny(s.Vendor, "\x00\x1f") || len(s.Langs) != MaxListLen ||
		len(s.Langs[0]) > MaxItemLen || len(s.UAData.Brands) != MaxBrands || len(s.Screen) != MaxReads || len(s.Canvas) != MaxReads {
		t.Fatalf("bounds not applied: %s", buf.Bytes())
	}
	for _, str := range []string{s.UA, s.Platform, s.Langs[3], s.UAData.Brands[1].Version} {
		if !strings.HasSuffix(str, "é") {
			t.Fatalf("cut inside a character: %q", str[len(str)-4:])
		}
	}
	// What is stored is what was assessed: the clamped report still reads as
	// automation (webdriver and a headless UA survive the cut).
	if v := Assess(&s, Options{Key: testKey}); !v.Automation {
		t.Fatalf("clamped report: %+v", v)
	}
}
