package fastapi

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/fraudd/fraudd/actors/checks"
)

func TestDecodeEvaluate(t *testing.T) {
	long := func(n int, r string) string { return strings.Repeat(r, n) }
	for _, c := range []struct {
		name, ctype, body string
		want              checks.EvalRequest
		err               string
	}{
		{name: "json", ctype: "application/json", body: `{"token":"test_vpn","email":"a@b.c","tz":"Europe/Berlin","accountId":"u1","fingerprintEventId":"ev1"}`,
			want: checks.EvalRequest{Token: "test_vpn", TokenSent: true, Email: "a@b.c", EmailSent: true, TZ: "Europe/Berlin", TZSent: true, AccountID: "u1", FingerprintEventID: "ev1"}},
		{name: "text/plain", ctype: "text/plain; charset=utf-8", body: `{"token":"test_tor"}`, want: checks.EvalRequest{Token: "test_tor", TokenSent: true}},
		{name: "vendor json", ctype: "application/vnd.api+json", body: `{"token":"test_tor"}`, want: checks.EvalRequest{Token: "test_tor", TokenSent: true}},
		{name: "no content type", ctype: "", body: `{"token":"test_tor"}`, want: checks.EvalRequest{Token: "test_tor", TokenSent: true}},
		{name: "json as form type", ctype: "application/x-www-form-urlencoded", body: `{"token":"test_tor"}`, want: checks.EvalRequest{Token: "test_tor", TokenSent: true}},
		{name: "form", ctype: "application/x-www-form-urlencoded", body: `token=test_vpn&fingerprintEventId=e&email=x%40y.z&tz=Asia%2FTokyo`,
			want: checks.EvalRequest{Token: "test_vpn", TokenSent: true, FingerprintEventID: "e", Email: "x@y.z", EmailSent: true, TZ: "Asia/Tokyo", TZSent: true}},
		{name: "form aliases", ctype: "application/x-www-form-urlencoded", body: `netcheck=test_proxy&service_fp=e2&service_tz=UTC`,
			want: checks.EvalRequest{Token: "test_proxy", TokenSent: true, FingerprintEventID: "e2", TZ: "UTC", TZSent: true}},
		{name: "json aliases", ctype: "application/json", body: `{"netcheck":"test_proxy","service_fp":"e2","service_tz":"UTC"}`,
			want: checks.EvalRequest{Token: "test_proxy", TokenSent: true, FingerprintEventID: "e2", TZ: "UTC", TZSent: true}},
		{name: "token wins over netcheck", ctype: "application/json", body: `{"token":"test_vpn","netcheck":"test_tor"}`, want: checks.EvalRequest{Token: "test_vpn", TokenSent: true}},
		{name: "null token falls to netcheck", ctype: "application/json", body: `{"token":null,"netcheck":"test_tor"}`, want: checks.EvalRequest{Token: "test_tor", TokenSent: true}},
		{name: "empty token falls to netcheck", ctype: "application/json", body: `{"token":"","netcheck":"test_tor"}`, want: checks.EvalRequest{Token: "test_tor", TokenSent: true}},
		{name: "empty form token falls to netcheck", ctype: "application/x-www-form-urlencoded", body: `token=&netcheck=test_tor`, want: checks.EvalRequest{Token: "test_tor", TokenSent: true}},
		{name: "empty fingerprintEventId falls to service_fp", ctype: "application/json", body: `{"fingerprintEventId":"","service_fp":"e2","tz":"","service_tz":"UTC"}`, want: checks.EvalRequest{FingerprintEventID: "e2", TZ: "UTC", TZSent: true}},
		{name: "fingerprintEventId over 200 kept to 200", ctype: "application/json", body: `{"fingerprintEventId":"` + long(150, "é") + long(60, "e") + `"}`, want: checks.EvalRequest{FingerprintEventID: long(150, "é") + long(50, "e")}},
		{name: "multipart ignored", ctype: "multipart/form-data; boundary=x", body: "--x\r\n", want: checks.EvalRequest{}},
		{name: "empty body", ctype: "application/json", body: "", want: checks.EvalRequest{}},
		{name: "null token", ctype: "application/json", body: `{"token":null}`, want: checks.EvalRequest{}},
		{name: "empty token", ctype: "application/json", body: `{"token":""}`, want: checks.EvalRequest{}},
		{name: "escaped", ctype: "application/json", body: `{"token":"test\u005fclean"}`, want: checks.EvalRequest{Token: "test_clean", TokenSent: true}},
		{name: "unknown fields ignored", ctype: "application/json", body: `{"token":"t","extra":[1,2]}`, want: checks.EvalRequest{Token: "t", TokenSent: true}},
		{name: "numeric token", ctype: "application/json", body: `{"token":42}`, err: "Invalid token."},
		{name: "object token", ctype: "application/json", body: `{"token":{"a":1}}`, err: "Invalid token."},
		{name: "array body", ctype: "application/json", body: `["test_vpn"]`, err: "JSON object"},
		{name: "broken json", ctype: "application/json", body: `{"token":`, err: "not valid JSON"},
		{name: "email not string", ctype: "application/json", body: `{"email":1}`, err: "email must be a string"},
		{name: "accountId 256 chars ok", ctype: "application/json", body: `{"accountId":"` + long(256, "é") + `"}`, want: checks.EvalRequest{AccountID: long(256, "é")}},
		{name: "accountId 257 chars", ctype: "application/json", body: `{"accountId":"` + long(257, "a") + `"}`, err: "accountId is longer than 256"},
		{name: "email 255 chars", ctype: "application/json", body: `{"email":"` + long(255, "a") + `"}`, err: "email is longer than 254"},
		{name: "tz 65 chars", ctype: "application/x-www-form-urlencoded", body: `tz=` + long(65, "a"), err: "tz is longer than 64"},
		{name: "accountId not UTF-8", ctype: "application/x-www-form-urlencoded", body: `accountId=u%FF1`, err: "accountId is not valid UTF-8"},
		{name: "email not UTF-8", ctype: "application/x-www-form-urlencoded", body: `email=a%C3@b.c`, err: "email is not valid UTF-8"},
		{name: "accountId UTF-8 ok", ctype: "application/x-www-form-urlencoded", body: `accountId=%C3%A9`, want: checks.EvalRequest{AccountID: "é"}},
		{name: "gpu evidence kept", ctype: "application/json", body: `{"gpuEvidence":{"challenge":"x"}}`, want: checks.EvalRequest{GPUEvidence: []byte(`{"challenge":"x"}`)}},
		{name: "gpu evidence not object", ctype: "application/json", body: `{"gpuEvidence":[1]}`, err: "gpuEvidence must be a JSON object"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got checks.EvalRequest
			err := decodeEvaluate([]byte(c.ctype), []byte(c.body), &got, new(evalJSON))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got.GPUEvidence) != string(c.want.GPUEvidence) {
				t.Fatalf("gpu evidence %q", got.GPUEvidence)
			}
			got.GPUEvidence, c.want.GPUEvidence = nil, nil
			if got.Token != c.want.Token || got.TokenSent != c.want.TokenSent || got.FingerprintEventID != c.want.FingerprintEventID ||
				got.AccountID != c.want.AccountID || got.Email != c.want.Email || got.EmailSent != c.want.EmailSent || got.TZ != c.want.TZ || got.TZSent != c.want.TZSent {
				t.Fatalf("got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

// TestDecodeEvaluateCopies checks that decoded strings do not alias the
// request buffer, which fasthttp reuses after the handler returns.
func TestDecodeEvaluateCopies(t *testing.T) {
	body := []byte(`{"token":"test_vpn","email":"a@b.c"}`)
	var got checks.EvalRequest
	if err := decodeEvaluate([]byte("application/json"), body, &got, new(evalJSON)); err != nil {
		t.Fatal(err)
	}
	for i := range body {
		body[i] = 'x'
	}
	if got.Token != "test_vpn" || got.Email != "a@b.c" {
		t.Fatalf("decoded strings alias the body: %+v", got)
	}
}

func FuzzDecodeEvaluate(f *testing.F) {
	for _, s := range []string{`{"token":"test_vpn"}`, `token=a&tz=b`, `{"token":1}`, `{"netcheck":"x","service_tz":"UTC"}`, `{`, `null`, `{"email":"\u00e9"}`, `{"token":"test_tor","Token":""}`, `{"TZ":"UTC","Email":"a@b.c"}`} {
		f.Add("application/json", s)
		f.Add("application/x-www-form-urlencoded", s)
		f.Add("", s)
	}
	f.Fuzz(func(t *testing.T, ctype, body string) {
		var r checks.EvalRequest
		if err := decodeEvaluate([]byte(ctype), []byte(body), &r, new(evalJSON)); err != nil {
			return
		}
		if utf8.RuneCountInString(r.AccountID) > checks.MaxAccountID || utf8.RuneCountInString(r.Email) > checks.MaxEmail || utf8.RuneCountInString(r.TZ) > checks.MaxTZ || utf8.RuneCountInString(r.FingerprintEventID) > checks.MaxEventID {
			t.Fatalf("bounds not enforced: %+v", r)
		}
		if r.TokenSent != (r.Token != "") {
			t.Fatalf("TokenSent inconsistent: %+v", r)
		}
	})
}

func FuzzDecodeBulk(f *testing.F) {
	for _, s := range []string{
		`{"ips":["1.1.1.1","1.1.1.1:53","[2606:4700::1111]:443","::ffff:1.1.1.1","10.0.0.1",5,null]}`,
		`{"ips":[]}`, `{"ips":"1.1.1.1"}`, `{}`, `[`, `{"ips":["１．１．１．１","https://8.8.8.8/x"],"email":"a@b.c"}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		l, err := decodeBulk([]byte(body))
		if err != nil {
			return
		}
		if len(l.Addrs) > checks.MaxBulk || l.Invalid < 0 || l.NotChecked < 0 {
			t.Fatalf("bounds: %d addrs", len(l.Addrs))
		}
		seen := map[string]bool{}
		for _, a := range l.Addrs {
			if !a.IsValid() || a.Is4In6() || a.Zone() != "" || seen[a.String()] {
				t.Fatalf("bad or duplicate address %v in %q", a, body)
			}
			seen[a.String()] = true
		}
		if l.NotChecked > 0 && len(l.Addrs) != checks.MaxBulk {
			t.Fatalf("addresses not checked while under the cap: %+v", l)
		}
	})
}

// classifyContentTypeRef is classifyContentType as it was, lower-casing with
// bytes.ToLower: the stack copy must classify every type the same.
func classifyContentTypeRef(ct []byte) bodyKind {
	if i := bytes.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return classifyMediaType(bytes.ToLower(bytes.TrimSpace(ct)))
}

var contentTypeSeeds = []string{
	"", "application/json", "Application/JSON; charset=utf-8", " text/plain ", "TEXT/PLAIN",
	"application/x-www-form-urlencoded", "APPLICATION/X-WWW-FORM-URLENCODED;charset=utf-8",
	"application/vnd.api+json", "application/VND.API+JSON", "applİcation/json", "application/jſon",
	"application/" + strings.Repeat("x", 60) + "+json", "multipart/form-data", "application/xml", "+json",
}

func TestClassifyContentTypeAsBefore(t *testing.T) {
	for _, ct := range contentTypeSeeds {
		if got, want := classifyContentType([]byte(ct)), classifyContentTypeRef([]byte(ct)); got != want {
			t.Errorf("%q: %d, want %d", ct, got, want)
		}
	}
	if got := classifyContentType([]byte("Application/JSON")); got != bodyJSON {
		t.Fatalf("upper-case JSON: %d", got)
	}
	if n := testing.AllocsPerRun(100, func() { classifyContentType([]byte("application/json; charset=utf-8")) }); n != 0 && !raceEnabled {
		t.Fatalf("%.0f allocations", n)
	}
}

func FuzzClassifyContentType(f *testing.F) {
	for _, ct := range contentTypeSeeds {
		f.Add(ct)
	}
	f.Fuzz(func(t *testing.T, ct string) {
		if got, want := classifyContentType([]byte(ct)), classifyContentTypeRef([]byte(ct)); got != want {
			t.Fatalf("%q: %d, want %d", ct, got, want)
		}
	})
}
