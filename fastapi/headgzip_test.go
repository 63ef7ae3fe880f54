package fastapi

import "testing"

// TestHeadMatchesGetHeaders: RFC 9110 §9.3.2, a HEAD answer carries the
// header fields GET's would; over 1 KB with gzip accepted, HEAD left out
// Vary and Content-Encoding and gave the uncompressed Content-Length.
func TestHeadMatchesGetHeaders(t *testing.T) {
	e := newTestEnv(t)
	hdr := map[string]string{"Accept-Encoding": "gzip"}
	get := e.serveHTTP("GET", "/openapi.json", hdr)
	head := e.serveHTTP("HEAD", "/openapi.json", hdr)
	for _, h := range []string{"Vary", "Content-Encoding", "Content-Length", "ETag"} {
		if g, hd := string(get.Response.Header.Peek(h)), string(head.Response.Header.Peek(h)); g != hd {
			t.Errorf("%s: GET %q, HEAD %q", h, g, hd)
		}
	}
}
