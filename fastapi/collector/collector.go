// Package collector embeds the browser collector served at /collector.js.
// Its source and tests live in the repository's collector/ directory;
// `node collector/build.mjs` writes collector.min.js here, and the build's
// output is committed so neither the Go build nor the service needs Node.
package collector

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
)

// JS is the served script.
//
//go:embed collector.min.js
var JS []byte

// ETag is a strong validator of JS.
var ETag = func() string {
	s := sha256.Sum256(JS)
	return `"` + hex.EncodeToString(s[:12]) + `"`
}()

// MaxBytes is the size budget of the served script (COLLECTOR.md).
const MaxBytes = 20 << 10
