package webhook

import (
	"net/url"
	"strings"
	"testing"
)

// FuzzCheckURL: any receiver URL an operator sends to the admin API is read
// without panicking. One that is accepted comes out in a form that is
// accepted again unchanged (it is what is stored and what every delivery
// parses), names the host that was checked, carries no fragment, and —
// without --allow-private-webhooks — is https on a public host; what is
// accepted without the flag is accepted alike with it.
func FuzzCheckURL(f *testing.F) {
	for _, s := range []string{"https://hooks.example/fraud", " HTTPS://Receiver.example.com:8443/x?y=1#frag ", "https://[::ffff:127.0.0.1]/hook",
		"http://127.0.0.1:8080/hook", "https://a.example/%2F%2f?x=%zz", "https://%C3%A9.example/", "https://u:p@a.example//x",
		"https://a.example:/x", "https://[fe80::1%25eth0]/", "https://0x7f.1/", "https://a.example/x;y#z%"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, raw string, allowPrivate bool) {
		out, err := CheckURL(raw, allowPrivate)
		if err != nil {
			if out != "" {
				t.Fatalf("%q refused (%v) with %q", raw, err, out)
			}
			return
		}
		u, err := url.Parse(out)
		if err != nil {
			t.Fatalf("%q accepted as %q, which does not parse: %v", raw, out, err)
		}
		in, _ := url.Parse(strings.TrimSpace(raw))
		if u.Hostname() != in.Hostname() {
			t.Fatalf("%q checked host %q but %q names %q", raw, in.Hostname(), out, u.Hostname())
		}
		if u.Fragment != "" || strings.Contains(out, "#") {
			t.Fatalf("%q accepted as %q, with a fragment", raw, out)
		}
		if !allowPrivate {
			if u.Scheme != "https" || !publicHost(u.Hostname()) {
				t.Fatalf("%q accepted as %q, not https on a public host", raw, out)
			}
			if also, err := CheckURL(raw, true); err != nil || also != out {
				t.Fatalf("%q accepted as %q, but with private receivers allowed as %q, %v", raw, out, also, err)
			}
		}
		if again, err := CheckURL(out, allowPrivate); err != nil || again != out {
			t.Fatalf("%q accepted as %q, which reads back as %q, %v", raw, out, again, err)
		}
	})
}
