// Package console embeds the operator console served at /console: one page,
// one script and one stylesheet, on the admin API only. Its sources live in
// the repository's console/ directory; `node console/build.mjs` writes the
// files here, and the build's output is committed so neither the Go build
// nor the service needs Node. Nothing is fetched from elsewhere: no CDN, no
// web fonts.
package console

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
)

// Asset is one served file.
type Asset struct {
	Type string
	Body []byte
	ETag string
}

var (
	//go:embed index.html
	indexHTML []byte
	//go:embed console.js
	consoleJS []byte
	//go:embed console.css
	consoleCSS []byte
)

var assets = map[string]*Asset{
	"":            asset("text/html; charset=utf-8", indexHTML),
	"console.js":  asset("application/javascript; charset=utf-8", consoleJS),
	"console.css": asset("text/css; charset=utf-8", consoleCSS),
}

func asset(typ string, body []byte) *Asset {
	s := sha256.Sum256(body)
	return &Asset{Type: typ, Body: body, ETag: `"` + hex.EncodeToString(s[:12]) + `"`}
}

// Lookup returns the asset /console/name serves; "" is the page itself.
func Lookup(name string) (*Asset, bool) {
	a, ok := assets[name]
	return a, ok
}

// Names lists the served files' names ("" is the page).
func Names() []string { return []string{"", "console.js", "console.css"} }

// CSP is the pages' Content-Security-Policy: scripts, styles, images and
// API calls from this origin only, no inline script or style, no framing,
// no form posts, no plugins.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"form-action 'none'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"

// MaxGzip is the budget of all assets together, gzipped (issue 16).
const MaxGzip = 150 << 10
