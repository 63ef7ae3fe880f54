// Package weborigin reads a web origin (scheme://host[:port]) in the form a
// browser's Origin header names it, so that an origin an operator listed, one
// stored by an older version and the header a page sends compare as strings.
// The admin API and the MCP origin list canonicalise their input with it, and
// the accounts service the origins it loads from storage.
package weborigin

import (
	"net/url"
	"strings"

	"golang.org/x/net/idna"
)

// Canonical reads an origin: scheme://host[:port] and nothing more, http or
// https; "null", a port without a host ("http://:80"), an IPv6 zone and
// anything with a path, query, fragment or user is not one.
// The scheme and host are lower case, an internationalised host is in its
// ASCII (punycode) form and the scheme's default port is dropped, as a
// browser sends them.
func Canonical(o string) (string, bool) {
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return "", false
	}
	if strings.Contains(u.Host, "%") {
		// An IPv6 zone ("[fe80::1%25eth0]", or a %25 elsewhere in the
		// host) names an interface of one machine: no browser sends one,
		// and kept unescaped it would not read back.
		return "", false
	}
	host := strings.ToLower(u.Host)
	if name := u.Hostname(); !isASCII(name) {
		// A browser's Origin names an internationalised host in its ASCII
		// (punycode) form: an operator's "https://bücher.example" is kept
		// as the browser will send it.
		a, err := idna.Lookup.ToASCII(name)
		if err != nil || a == "" {
			// Code points IDNA maps to nothing (U+034F, a soft hyphen) leave no
			// host at all.
			return "", false
		}
		host = a
		if p := u.Port(); p != "" {
			host += ":" + p
		}
	}
	return u.Scheme + "://" + HostWithoutDefaultPort(host, u.Scheme), true
}

// HostWithoutDefaultPort drops :80 from an http host and :443 from https.
func HostWithoutDefaultPort(host, scheme string) string {
	if (scheme == "http" && strings.HasSuffix(host, ":80")) || (scheme == "https" && strings.HasSuffix(host, ":443")) {
		return host[:strings.LastIndexByte(host, ':')]
	}
	return host
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
