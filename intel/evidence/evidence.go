// Package evidence validates and compares the experimental device evidence of
// SPEC 2.5 (GpuEvidence) and 2.6 (BrowserConsistencyEvidence). It is pure: no
// state, no clock, no I/O. Client values can be forged; nothing here is
// hardware attestation, and nothing here changes a score by itself.
package evidence

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
)

// Protocol constants (SPEC 2.4).
const (
	GPUProtocol         = "atomic-order-group-median-v1:128x128:32:low-power"
	ConsistencyProtocol = "browser-consistency-v1"
	Features            = 128
	ComputationLen      = 32
)

// GPU is a validated GpuEvidence object.
type GPU struct {
	Challenge string
	Features  [Features]float32
}

// ValidChallenge reports whether s is 64 lowercase hex characters.
func ValidChallenge(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func strict(raw []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		return errors.New("malformed object")
	}
	if _, err := d.Token(); err != io.EOF {
		return errors.New("trailing data")
	}
	return nil
}

// ParseGPU validates a raw GpuEvidence object.
func ParseGPU(raw []byte) (GPU, error) {
	var j struct {
		Challenge *string     `json:"challenge"`
		Protocol  *string     `json:"protocol"`
		Features  *[]*float64 `json:"features"` // nil element: null, not a number
	}
	var g GPU
	if err := strict(raw, &j); err != nil {
		return g, err
	}
	switch {
	case j.Challenge == nil || !ValidChallenge(*j.Challenge):
		return g, errors.New("challenge must be 64 lowercase hex characters")
	case j.Protocol == nil || *j.Protocol != GPUProtocol:
		return g, errors.New("unknown protocol")
	case j.Features == nil || len(*j.Features) != Features:
		return g, fmt.Errorf("features must hold exactly %d numbers", Features)
	}
	for i, f := range *j.Features {
		if f == nil || math.IsNaN(*f) || *f < 0 || *f > 1 {
			return g, fmt.Errorf("features[%d] must be a number from 0 to 1", i)
		}
		g.Features[i] = float32(*f)
	}
	g.Challenge = *j.Challenge
	return g, nil
}

// RMS is the root-mean-square distance between two feature vectors: smaller
// is closer; resemblance only.
func RMS(a, b *[Features]float32) float64 {
	var s float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		s += d * d
	}
	return math.Sqrt(s / Features)
}

// Claim is one BrowserClaim; "" is null.
type Claim struct {
	Browser, OS string
	Present     bool // false: the worker slot was null
}

// Browser is a validated BrowserConsistencyEvidence object.
type Browser struct {
	Challenge    string
	Page         [2]Claim
	Worker       [2]Claim
	WebGL        string
	WebGPU       string
	Fallback     bool
	Computations [2][]uint32 // nil: null
}

var (
	browsers = set("chromium", "firefox", "safari")
	oses     = set("windows", "macos", "linux", "android", "ios", "chromeos")
	vendors  = set("apple", "intel", "amd", "nvidia", "qualcomm", "arm", "software")
)

func set(s ...string) map[string]bool {
	m := make(map[string]bool, len(s))
	for _, v := range s {
		m[v] = true
	}
	return m
}

// enum checks a required nullable enum field: present, and null or a member.
func enum(raw json.RawMessage, allowed map[string]bool, name string) (string, error) {
	if raw == nil {
		return "", fmt.Errorf("%s is required", name)
	}
	if string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) != nil || !allowed[s] {
		return "", fmt.Errorf("%s has an unknown value", name)
	}
	return s, nil
}

func claim(raw json.RawMessage, nullable bool, name string) (Claim, error) {
	if nullable && string(raw) == "null" {
		return Claim{}, nil
	}
	var j struct {
		Browser json.RawMessage `json:"browser"`
		OS      json.RawMessage `json:"os"`
	}
	if raw == nil || strict(raw, &j) != nil {
		return Claim{}, fmt.Errorf("%s must be a BrowserClaim", name)
	}
	c := Claim{Present: true}
	var err error
	if c.Browser, err = enum(j.Browser, browsers, name+".browser"); err != nil {
		return c, err
	}
	if c.OS, err = enum(j.OS, oses, name+".os"); err != nil {
		return c, err
	}
	return c, nil
}

// ParseBrowser validates a raw BrowserConsistencyEvidence object.
func ParseBrowser(raw []byte) (Browser, error) {
	var j struct {
		Protocol  *string           `json:"protocol"`
		Challenge *string           `json:"challenge"`
		Page      []json.RawMessage `json:"page"`
		Worker    []json.RawMessage `json:"worker"`
		Graphics  *struct {
			WebGL    json.RawMessage `json:"webgl"`
			WebGPU   json.RawMessage `json:"webgpu"`
			Fallback *bool           `json:"fallback"`
		} `json:"graphics"`
		Computations []json.RawMessage `json:"computations"`
	}
	var b Browser
	if err := strict(raw, &j); err != nil {
		return b, err
	}
	switch {
	case j.Protocol == nil || *j.Protocol != ConsistencyProtocol:
		return b, errors.New("unknown protocol")
	case j.Challenge == nil || !ValidChallenge(*j.Challenge):
		return b, errors.New("challenge must be 64 lowercase hex characters")
	case len(j.Page) != 2:
		return b, errors.New("page must hold exactly 2 claims")
	case len(j.Worker) != 2:
		return b, errors.New("worker must hold exactly 2 entries")
	case j.Graphics == nil || j.Graphics.Fallback == nil:
		return b, errors.New("graphics requires webgl, webgpu and fallback")
	case len(j.Computations) != 2:
		return b, errors.New("computations must hold exactly 2 entries")
	}
	b.Challenge = *j.Challenge
	var err error
	for i := range 2 {
		if b.Page[i], err = claim(j.Page[i], false, fmt.Sprintf("page[%d]", i)); err != nil {
			return b, err
		}
		if b.Worker[i], err = claim(j.Worker[i], true, fmt.Sprintf("worker[%d]", i)); err != nil {
			return b, err
		}
	}
	if b.WebGL, err = enum(j.Graphics.WebGL, vendors, "graphics.webgl"); err != nil {
		return b, err
	}
	if b.WebGPU, err = enum(j.Graphics.WebGPU, vendors, "graphics.webgpu"); err != nil {
		return b, err
	}
	b.Fallback = *j.Graphics.Fallback
	for i, c := range j.Computations {
		if string(c) == "null" {
			continue
		}
		var ns []json.Number
		if json.Unmarshal(c, &ns) != nil || len(ns) != ComputationLen || bytes.Contains(c, []byte{'"'}) {
			return b, fmt.Errorf("computations[%d] must be null or %d integers", i, ComputationLen)
		}
		v := make([]uint32, ComputationLen)
		for k, n := range ns {
			x, err := n.Int64()
			if err != nil || x < 0 || x > math.MaxUint32 {
				return b, fmt.Errorf("computations[%d][%d] must be an integer from 0 to 4294967295", i, k)
			}
			v[k] = uint32(x)
		}
		b.Computations[i] = v
	}
	return b, nil
}

// Check is one entry of browser_consistency.checks.
type Check struct {
	Name   string `json:"name"`
	Status string `json:"status"` // pass, fail, skipped
}

// Report is the transient comparison of one BrowserConsistencyEvidence.
type Report struct {
	Status          string // consistent, inconsistent, inconclusive
	GPUInconsistent bool
	Checks          []Check
}

// Compare looks for contradictions between the page's, the worker's and the
// graphics claims. Unknown (null) values never contradict anything.
func Compare(b *Browser) Report {
	r := Report{}
	known := 0
	contra := false
	add := func(name string, compared, ok bool) {
		st := "skipped"
		if compared {
			known++
			st = "pass"
			if !ok {
				st, contra = "fail", true
			}
		}
		r.Checks = append(r.Checks, Check{Name: name, Status: st})
	}
	// Page vs worker browser and OS.
	var pb, po, wb, wo string
	cmp := func(vals ...Claim) (browser, os string, bOK, oOK bool) {
		bOK, oOK = true, true
		for _, c := range vals {
			if !c.Present {
				continue
			}
			if c.Browser != "" {
				if browser != "" && browser != c.Browser {
					bOK = false
				}
				browser = c.Browser
			}
			if c.OS != "" {
				if os != "" && os != c.OS {
					oOK = false
				}
				os = c.OS
			}
		}
		return
	}
	var pbOK, poOK, wbOK, woOK bool
	pb, po, pbOK, poOK = cmp(b.Page[0], b.Page[1])
	wb, wo, wbOK, woOK = cmp(b.Worker[0], b.Worker[1])
	add("page_stable", pb != "" || po != "", pbOK && poOK)
	add("worker_stable", wb != "" || wo != "", wbOK && woOK)
	add("page_worker_browser", pb != "" && wb != "", pb == wb)
	add("page_worker_os", po != "" && wo != "", po == wo)
	// Graphics vs platform claims.
	gpu := b.WebGPU
	if gpu == "" {
		gpu = b.WebGL
	}
	add("webgl_webgpu", b.WebGL != "" && b.WebGPU != "" && !b.Fallback, b.WebGL == b.WebGPU)
	osForGPU := po
	if osForGPU == "" {
		osForGPU = wo
	}
	add("graphics_platform", gpu != "" && gpu != "software" && osForGPU != "", gpuFits(gpu, osForGPU))
	r.GPUInconsistent = contra
	switch {
	case contra:
		r.Status = "inconsistent"
	case known == 0:
		r.Status = "inconclusive"
	default:
		r.Status = "consistent"
	}
	return r
}

// gpuFits reports whether a graphics vendor is plausible on an OS.
func gpuFits(vendor, os string) bool {
	switch os {
	case "ios":
		return vendor == "apple"
	case "macos":
		return vendor == "apple" || vendor == "intel" || vendor == "amd" || vendor == "nvidia"
	case "windows", "linux", "chromeos":
		return vendor != "apple"
	case "android":
		return vendor == "qualcomm" || vendor == "arm" || vendor == "nvidia" || vendor == "intel" || vendor == "amd"
	}
	return true
}
