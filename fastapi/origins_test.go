package fastapi

import (
	"slices"
	"testing"
)

// TestCanonicalOriginsDropDefaultPorts: an origin given with its scheme's
// default port is kept as a browser's Origin header names it (no port);
// another port stays.
func TestCanonicalOriginsDropDefaultPorts(t *testing.T) {
	got, err := canonicalOrigins([]string{"https://Shop.Example:443", "http://shop.example:80/", "https://shop.example:8443", "HTTP://[::1]:80", "https://shop.example:80"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"https://shop.example", "http://shop.example", "https://shop.example:8443", "http://[::1]", "https://shop.example:80"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// TestCanonicalOriginsPunycode: an internationalised host is kept in the
// ASCII form a browser's Origin header carries.
func TestCanonicalOriginsPunycode(t *testing.T) {
	got, err := canonicalOrigins([]string{"https://Bücher.example", "https://bücher.example:8443", "https://xn--bcher-kva.example:443"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"https://xn--bcher-kva.example", "https://xn--bcher-kva.example:8443", "https://xn--bcher-kva.example"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}
