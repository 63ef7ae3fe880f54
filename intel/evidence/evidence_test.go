package evidence

import (
	"fmt"
	"strings"
	"testing"
)

var ch = strings.Repeat("ab", 32)

func feats(n int, v string) string {
	s := make([]string, n)
	for i := range s {
		s[i] = v
	}
	return "[" + strings.Join(s, ",") + "]"
}

func TestParseGPU(t *testing.T) {
	ok := fmt.Sprintf(`{"challenge":%q,"protocol":%q,"features":%s}`, ch, GPUProtocol, feats(128, "0.5"))
	cases := []struct {
		name, in string
		ok       bool
	}{
		{"valid", ok, true},
		{"ones and zeros", fmt.Sprintf(`{"challenge":%q,"protocol":%q,"features":%s}`, ch, GPUProtocol, feats(128, "1")), true},
		{"127 features", fmt.Sprintf(`{"challenge":%q,"protocol":%q,"features":%s}`, ch, GPUProtocol, feats(127, "0.5")), false},
		{"129 features", fmt.Sprintf(`{"challenge":%q,"protocol":%q,"features":%s}`, ch, GPUProtocol, feats(129, "0.5")), false},
		{"above 1", fmt.Sprintf(`{"challenge":%q,"protocol":%q,"features":%s}`, ch, GPUProtocol, feats(128, "1.01")), false},
		{"negative", fmt.Sprintf(`{"challenge":%q,"protocol":%q,"features":%s}`, ch, GPUProtocol, feats(128, "-0.1")), false},
		{"string feature", fmt.Sprintf(`{"challenge":%q,"protocol":%q,"features":%s}`, ch, GPUProtocol, feats(128, `"0.5"`)), false},
		{"uppercase challenge", fmt.Sprintf(`{"challenge":%q,"protocol":%q,"features":%s}`, strings.ToUpper(ch), GPUProtocol, feats(128, "0.5")), false},
		{"short challenge", fmt.Sprintf(`{"challenge":"abcd","protocol":%q,"features":%s}`, GPUProtocol, feats(128, "0.5")), false},
		{"wrong protocol", fmt.Sprintf(`{"challenge":%q,"protocol":"x","features":%s}`, ch, feats(128, "0.5")), false},
		{"missing features", fmt.Sprintf(`{"challenge":%q,"protocol":%q}`, ch, GPUProtocol), false},
		{"unknown field", fmt.Sprintf(`{"challenge":%q,"protocol":%q,"features":%s,"x":1}`, ch, GPUProtocol, feats(128, "0.5")), false},
		{"not an object", `[1]`, false},
	}
	for _, c := range cases {
		g, err := ParseGPU([]byte(c.in))
		if (err == nil) != c.ok {
			t.Errorf("%s: err = %v, want ok %v", c.name, err, c.ok)
		}
		if c.ok && g.Challenge != ch {
			t.Errorf("%s: challenge %q", c.name, g.Challenge)
		}
	}
}

func TestRMS(t *testing.T) {
	var a, b [Features]float32
	if RMS(&a, &b) != 0 {
		t.Fatal("equal vectors not at 0")
	}
	for i := range b {
		b[i] = 1
	}
	if d := RMS(&a, &b); d != 1 {
		t.Fatalf("RMS = %v, want 1", d)
	}
}

func browser(page, worker, graphics, comps string) string {
	return fmt.Sprintf(`{"protocol":%q,"challenge":%q,"page":%s,"worker":%s,"graphics":%s,"computations":%s}`,
		ConsistencyProtocol, ch, page, worker, graphics, comps)
}

const (
	winChrome = `{"browser":"chromium","os":"windows"}`
	macSafari = `{"browser":"safari","os":"macos"}`
	nvidia    = `{"webgl":"nvidia","webgpu":"nvidia","fallback":false}`
	apple     = `{"webgl":"apple","webgpu":"apple","fallback":false}`
)

func TestParseBrowser(t *testing.T) {
	comp := feats(32, "4294967295")
	cases := []struct {
		name, in string
		ok       bool
	}{
		{"valid", browser("["+winChrome+","+winChrome+"]", "["+winChrome+",null]", nvidia, "["+comp+",null]"), true},
		{"null claims", browser(`[{"browser":null,"os":null},{"browser":null,"os":null}]`, "[null,null]", `{"webgl":null,"webgpu":null,"fallback":true}`, "[null,null]"), true},
		{"one page claim", browser("["+winChrome+"]", "[null,null]", nvidia, "[null,null]"), false},
		{"null page claim", browser("["+winChrome+",null]", "[null,null]", nvidia, "[null,null]"), false},
		{"unknown browser", browser(`[{"browser":"opera","os":"windows"},`+winChrome+"]", "[null,null]", nvidia, "[null,null]"), false},
		{"os missing", browser(`[{"browser":"chromium"},`+winChrome+"]", "[null,null]", nvidia, "[null,null]"), false},
		{"unknown vendor", browser("["+winChrome+","+winChrome+"]", "[null,null]", `{"webgl":"matrox","webgpu":null,"fallback":false}`, "[null,null]"), false},
		{"fallback missing", browser("["+winChrome+","+winChrome+"]", "[null,null]", `{"webgl":null,"webgpu":null}`, "[null,null]"), false},
		{"31 integers", browser("["+winChrome+","+winChrome+"]", "[null,null]", nvidia, "["+feats(31, "1")+",null]"), false},
		{"too large", browser("["+winChrome+","+winChrome+"]", "[null,null]", nvidia, "["+feats(32, "4294967296")+",null]"), false},
		{"fraction", browser("["+winChrome+","+winChrome+"]", "[null,null]", nvidia, "["+feats(32, "1.5")+",null]"), false},
		{"one computation", browser("["+winChrome+","+winChrome+"]", "[null,null]", nvidia, "[null]"), false},
	}
	for _, c := range cases {
		if _, err := ParseBrowser([]byte(c.in)); (err == nil) != c.ok {
			t.Errorf("%s: err = %v, want ok %v", c.name, err, c.ok)
		}
	}
}

func TestCompare(t *testing.T) {
	cases := []struct {
		name, page, worker, graphics, want string
	}{
		{"consistent", "[" + winChrome + "," + winChrome + "]", "[" + winChrome + "," + winChrome + "]", nvidia, "consistent"},
		{"worker disagrees", "[" + winChrome + "," + winChrome + "]", "[" + macSafari + ",null]", nvidia, "inconsistent"},
		{"apple gpu on windows", "[" + winChrome + "," + winChrome + "]", "[null,null]", apple, "inconsistent"},
		{"webgl vs webgpu", "[" + winChrome + "," + winChrome + "]", "[null,null]", `{"webgl":"intel","webgpu":"nvidia","fallback":false}`, "inconsistent"},
		{"fallback excuses webgl vs webgpu", "[" + winChrome + "," + winChrome + "]", "[null,null]", `{"webgl":"software","webgpu":"nvidia","fallback":true}`, "consistent"},
		{"all null", `[{"browser":null,"os":null},{"browser":null,"os":null}]`, "[null,null]", `{"webgl":null,"webgpu":null,"fallback":false}`, "inconclusive"},
	}
	for _, c := range cases {
		b, err := ParseBrowser([]byte(browser(c.page, c.worker, c.graphics, "[null,null]")))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		r := Compare(&b)
		if r.Status != c.want || r.GPUInconsistent != (c.want == "inconsistent") {
			t.Errorf("%s: %+v, want %s", c.name, r, c.want)
		}
	}
}

// SPEC 2.5: features is "an array of exactly 128 numbers, each 0 to 1"; a
// null element is not a number and must not be read as 0.
func TestParseGPUNullFeature(t *testing.T) {
	f := strings.Replace(feats(128, "0.5"), "0.5", "null", 1)
	for _, fs := range []string{f, feats(128, "null")} {
		in := fmt.Sprintf(`{"challenge":%q,"protocol":%q,"features":%s}`, ch, GPUProtocol, fs)
		if g, err := ParseGPU([]byte(in)); err == nil {
			t.Errorf("null feature accepted: features[0] = %v", g.Features[0])
		}
	}
}
