package device

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// Bounds of one report. Clamp cuts a report to them before it is assessed
// and stored, so what an event keeps is bounded whatever a page sends, and
// assessing the stored signals again gives the verdict the event holds. Real
// reports stay far inside them: about 1 KB in all, user agents under 300
// bytes, a handful of languages and findings.
const (
	MaxUALen   = 512 // navigator.userAgent
	MaxTextLen = 128 // every other string
	MaxItemLen = 64  // one entry of a list of names or hashes
	MaxListLen = 16  // languages, lies, automation artefacts, failed steps
	MaxBrands  = 8   // client-hint brands
	MaxReads   = 4   // canvas and audio readings, screen and window figures
)

// Clamp cuts every string and list of s to the bounds above, in place. A
// string is cut on a character boundary; invalid UTF-8 and control characters
// (which no reading contains, and which JSON spells in six bytes) are dropped.
func (s *Signals) Clamp() {
	s.UA = clampText(s.UA, MaxUALen)
	for _, p := range []*string{&s.Platform, &s.Vendor, &s.TZ, &s.NotifPerm, &s.PermQuery, &s.OPFS, &s.IDB, &s.Pointer} {
		*p = clampText(*p, MaxTextLen)
	}
	if s.UAData != nil {
		s.UAData.Platform = clampText(s.UAData.Platform, MaxTextLen)
		s.UAData.Brands = s.UAData.Brands[:min(len(s.UAData.Brands), MaxBrands)]
		for i := range s.UAData.Brands {
			b := &s.UAData.Brands[i]
			b.Brand, b.Version = clampText(b.Brand, MaxItemLen), clampText(b.Version, MaxItemLen)
		}
	}
	if s.GL != nil {
		s.GL.Vendor, s.GL.Renderer = clampText(s.GL.Vendor, MaxTextLen), clampText(s.GL.Renderer, MaxTextLen)
	}
	s.Langs = clampList(s.Langs, MaxListLen)
	s.Lies = clampList(s.Lies, MaxListLen)
	s.Auto = clampList(s.Auto, MaxListLen)
	s.Errors = clampList(s.Errors, MaxListLen)
	s.Canvas = clampList(s.Canvas, MaxReads)
	s.Audio = clampList(s.Audio, MaxReads)
	if len(s.Screen) > MaxReads {
		s.Screen = s.Screen[:MaxReads]
	}
	if len(s.Window) > MaxReads {
		s.Window = s.Window[:MaxReads]
	}
}

// Compact clamps s and returns the JSON an event keeps: the known fields
// only, without HTML escaping (a stored reading is never rendered).
func (s *Signals) Compact() ([]byte, error) {
	s.Clamp()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// clampList keeps at most n entries, each cut to MaxItemLen. A nil list stays
// nil (the check did not run), an empty one empty.
func clampList(l []string, n int) []string {
	if l == nil {
		return nil
	}
	l = l[:min(len(l), n)]
	for i := range l {
		l[i] = clampText(l[i], MaxItemLen)
	}
	return l
}

// clampText cuts s to at most n bytes of valid UTF-8 without control
// characters.
func clampText(s string, n int) string {
	if len(s) <= n && plainText(s) {
		return s
	}
	out := make([]byte, 0, min(len(s), n))
	for _, r := range s {
		if r == utf8.RuneError || r < 0x20 || r == 0x7f {
			continue
		}
		if len(out)+utf8.RuneLen(r) > n {
			break
		}
		out = utf8.AppendRune(out, r)
	}
	return string(out)
}

// plainText: valid UTF-8 without control characters.
func plainText(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return false
		}
	}
	return utf8.ValidString(s)
}
