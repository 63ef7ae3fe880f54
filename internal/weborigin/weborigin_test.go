package weborigin

import (
	"strings"
	"testing"
)

func TestCanonical(t *testing.T) {
	for _, c := range []struct {
		in, want string
		ok       bool
	}{
		{"https://Shop.Example:443", "https://shop.example", true},
		{"http://shop.example:80/", "http://shop.example", true},
		{"https://shop.example:80", "https://shop.example:80", true},
		{"HTTP://[::1]:80", "http://[::1]", true},
		{"https://Bücher.example:443", "https://xn--bcher-kva.example", true},
		{"https://bücher.example:8443", "https://xn--bcher-kva.example:8443", true},
		{"https://bücher_shop.example", "", false},
		{"null", "", false},
		{"https://shop.example/path", "", false},
		{"https://user@shop.example", "", false},
		{"https://shop.example?q", "", false},
		{"https://shop.example#f", "", false},
		{"ftp://shop.example", "", false},
		{"https://", "", false},
		{"http://:80", "", false},
		{"https://:8443", "", false},
		{"https://\u00ad", "", false},
		{"https://[fe80::1%25eth0]", "", false},
	} {
		got, ok := Canonical(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("Canonical(%q) = %q, %v; want %q, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

// FuzzCanonical: any input is either refused or read as an http(s) origin
// with a host, without upper case, non-ASCII host or default port, and that
// reads again as itself: it is what the admin API stores and what the
// accounts service reads back from storage, which keeps and logs an origin
// it cannot read.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{"https://Shop.Example:443", "https://bücher.example", "http://[::1]:80", "null", "https://a/b", "https://%62.example"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		c, ok := Canonical(in)
		if !ok {
			if c != "" {
				t.Fatalf("refused %q with %q", in, c)
			}
			return
		}
		_, host, _ := strings.Cut(c, "://")
		if !strings.HasPrefix(c, "http://") && !strings.HasPrefix(c, "https://") || host == "" || host[0] == ':' {
			t.Fatalf("%q read as %q", in, c)
		}
		if !isASCII(c) || strings.ToLower(c) != c {
			t.Fatalf("%q read as %q, not lower-case ASCII", in, c)
		}
		if strings.HasSuffix(c, ":443") && strings.HasPrefix(c, "https://") || strings.HasSuffix(c, ":80") && strings.HasPrefix(c, "http://") {
			t.Fatalf("%q kept its default port: %q", in, c)
		}
		if again, ok := Canonical(c); !ok || again != c {
			t.Fatalf("%q → %q → %q (ok=%v)", in, c, again, ok)
		}
	})
}
