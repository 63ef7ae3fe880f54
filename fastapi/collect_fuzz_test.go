package fastapi

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/bytedance/sonic"

	"github.com/fraudd/fraudd/intel/device"
	"github.com/fraudd/fraudd/storage"
)

// FuzzCollectDeviceBody: POST /v1/collect/device's body (any page's, with
// the public publishable key) is read as handleCollectDevice reads it; what
// the event keeps (Signals.Compact) is bounded, valid UTF-8 JSON, and
// assessing what is kept gives the verdict the event was stored with.
func FuzzCollectDeviceBody(f *testing.F) {
	for _, s := range []string{
		`{"key":"pk_x","v":1,"ua":"Mozilla/5.0 (X11; Linux x86_64) Chrome/126.0","platform":"Linux x86_64","uad":{"brands":[{"brand":"Chromium","version":"126"}],"platform":"Linux"},"langs":["en"],"wd":false,"hc":8,"mem":8,"touch":0,"screen":[1920,1080,24,1],"win":[1920,1040,1920,940],"tz":"Europe/Berlin","tzo":-60,"gl":{"vendor":"Google Inc.","renderer":"ANGLE (Intel)"},"canvas":["a","a"],"audio":["b","b"],"lies":[],"auto":[],"chrome":true,"quota":1e10,"timer":0.1,"pointer":"fine","ms":12.5}`,
		`{"ua":"Android","win":[0],"screen":[1],"uad":{"brands":[{}]}}`,
		`{"ua":"\u00e9\u0000x","langs":["` + string(bytes.Repeat([]byte("é"), 40)) + `"],"mem":-0}`,
	} {
		f.Add([]byte(s))
	}
	opts := device.Options{Key: []byte("visitor-id-unit-key"), IPChecked: true}
	f.Fuzz(func(t *testing.T, raw []byte) {
		raw = bytes.TrimSpace(raw)
		var body collectDeviceBody
		if len(raw) == 0 || len(raw) > maxDeviceBody || raw[0] != '{' || sonic.ConfigStd.Unmarshal(raw, &body) != nil {
			return
		}
		kept, err := body.Signals.Compact()
		if err != nil || len(kept) > storage.MaxEventSignals {
			return // refused with 413
		}
		v := device.Assess(&body.Signals, opts)
		if !utf8.Valid(kept) || !json.Valid(kept) {
			t.Fatalf("%q kept as %q", raw, kept)
		}
		for name, dec := range map[string]func([]byte, any) error{"encoding/json": json.Unmarshal, "sonic": sonic.ConfigStd.Unmarshal} {
			var back device.Signals
			if err := dec(kept, &back); err != nil {
				t.Fatalf("%s cannot read the kept signals %q: %v", name, kept, err)
			}
			if again := device.Assess(&back, opts); !reflect.DeepEqual(again, v) {
				t.Fatalf("%q: re-assessed (%s) as %+v, stored %+v", raw, name, again, v)
			}
		}
	})
}
