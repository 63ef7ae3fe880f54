package fastapi

import (
	"bytes"
	"encoding/base64"
	"net/url"
	"strings"
	"testing"
)

// FuzzBearer: any Authorization value is read without panicking; a
// credential that is read is non-empty, trimmed, what the header ends with,
// and came with the Bearer scheme in any case.
func FuzzBearer(f *testing.F) {
	for _, s := range []string{"Bearer sk_live_abc", "bearer   tok ", "BEARER", "Bearer ", "Basic dTpw", "Bearer\tx\ty", "", " \t", "Bearer Bearer sk"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, h []byte) {
		tok, ok, hint := bearer(h)
		if !ok {
			if tok != "" || hint == "" {
				t.Fatalf("%q: refused with token %q hint %q", h, tok, hint)
			}
			return
		}
		trimmed := bytes.TrimSpace(h)
		if tok == "" || strings.TrimSpace(tok) != tok || !bytes.HasSuffix(trimmed, []byte(tok)) ||
			!bytes.EqualFold(trimmed[:6], []byte("bearer")) || hint != "" {
			t.Fatalf("%q: token %q", h, tok)
		}
	})
}

// FuzzBasicCredentials: any Authorization value is read without panicking,
// and credentials encoded as RFC 6749 §2.3.1 says come back as they were.
func FuzzBasicCredentials(f *testing.F) {
	f.Add([]byte("Basic b3BzQGV4YW1wbGUuY29tOnNrX2xpdmVfeA=="), "ops@example.com", "sk_live_x")
	f.Add([]byte("basic !!!"), "a:b", "c%2")
	f.Add([]byte("Bearer x"), "", "")
	f.Fuzz(func(t *testing.T, h []byte, id, secret string) {
		if _, _, _, present, ok := basicCredentials(h); ok && !present {
			t.Fatalf("%q: ok without the Basic scheme", h)
		}
		enc := base64.StdEncoding.EncodeToString([]byte(basicID(id) + ":" + url.QueryEscape(secret)))
		gid, sent, gsecret, present, ok := basicCredentials([]byte("Basic " + enc))
		if !present || !ok || gid != id || sent != basicID(id) || gsecret != secret {
			t.Fatalf("(%q, %q) read back as (%q, %q) present=%v ok=%v", id, secret, gid, gsecret, present, ok)
		}
	})
}

// basicID form-encodes a Basic client id as basicCredentials reads it: a
// space as %20, since a '+' there is the email's own.
func basicID(id string) string { return strings.ReplaceAll(url.QueryEscape(id), "+", "%20") }
