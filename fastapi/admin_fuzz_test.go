package fastapi

import (
	"encoding/json"
	"testing"

	"github.com/fraudd/fraudd/wire"
)

// FuzzDecodeStrict: an admin API body (the operator's) is accepted only
// when it is exactly one JSON value of the expected shape.
func FuzzDecodeStrict(f *testing.F) {
	for _, s := range []string{`[{"ip":"203.0.113.7","action":"allow","label":"office"}]`, `[]`, `[{"visitor_id":"v","action":"block"}] `, `[{"ip":"1.1.1.1","x":1}]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var in []wire.Pin
		if decodeStrict(body, &in) != nil {
			return
		}
		if !json.Valid(body) {
			t.Fatalf("%q is not one JSON value, read as %+v", body, in)
		}
	})
}
