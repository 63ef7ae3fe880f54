package collector

import (
	"bytes"
	"testing"
)

func TestEmbedded(t *testing.T) {
	if len(JS) == 0 || len(JS) >= MaxBytes {
		t.Fatalf("collector.min.js is %d bytes; budget %d", len(JS), MaxBytes)
	}
	for _, want := range []string{"FraudCollector", "/v1/collect/network", "/v1/collect/device", "netcheck", "service_fp", "service_tz"} {
		if !bytes.Contains(JS, []byte(want)) {
			t.Errorf("collector.min.js lacks %q", want)
		}
	}
	if len(ETag) != 26 {
		t.Fatalf("etag %s", ETag)
	}
}
