package evidence

import (
	"encoding/json"
	"fmt"
	"testing"
)

// FuzzParseEvidence: the gpuEvidence and browserEvidence objects of an
// evaluate body (a keyed caller's) parse or fail without a panic; what
// parses is one JSON value with features in [0, 1] and 32 readings per
// computation, and Compare decides it.
func FuzzParseEvidence(f *testing.F) {
	f.Add([]byte(fmt.Sprintf(`{"challenge":%q,"protocol":%q,"features":%s}`, ch, GPUProtocol, feats(128, "0.5"))))
	f.Add([]byte(browser(`[{"browser":"chromium","os":"linux"},{"browser":"chromium","os":"linux"}]`, `[null,{"browser":null,"os":"linux"}]`,
		`{"webgl":"intel","webgpu":null,"fallback":false}`, `[null,`+feats(32, "7")+`]`)))
	f.Fuzz(func(t *testing.T, raw []byte) {
		if g, err := ParseGPU(raw); err == nil {
			if !json.Valid(raw) || !ValidChallenge(g.Challenge) {
				t.Fatalf("%q accepted as %+v", raw, g)
			}
			for i, x := range g.Features {
				if !(x >= 0 && x <= 1) {
					t.Fatalf("%q: feature %d = %v", raw, i, x)
				}
			}
		}
		if b, err := ParseBrowser(raw); err == nil {
			if !json.Valid(raw) {
				t.Fatalf("%q is not JSON, accepted as %+v", raw, b)
			}
			for i, c := range b.Computations {
				if c != nil && len(c) != ComputationLen {
					t.Fatalf("%q: computation %d of %d", raw, i, len(c))
				}
			}
			r := Compare(&b)
			if r.GPUInconsistent != (r.Status == "inconsistent") {
				t.Fatalf("%q: %+v", raw, r)
			}
		}
	})
}
