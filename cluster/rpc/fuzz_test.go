package rpc

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/fraudd/fraudd/actors/quota"
)

// FuzzChargeRequest: whatever bytes a peer sends, decoding and checking a
// Charge never panics, and a request that passes the check converts back to
// the same message (nothing is dropped or invented between the wire and the
// actors). Protobuf decoding itself is generated; the check is ours.
func FuzzChargeRequest(f *testing.F) {
	for _, c := range []quota.Charge{capped, uncapped} {
		b, err := proto.Marshal(chargeMsg(&c, 7))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x08, 0x00})
	// A field this build does not know, inside Limits (found by the fuzzer:
	// the comparison must ignore unknown fields at every depth).
	withUnknown := chargeMsg(&capped, 7)
	withUnknown.Limits.ProtoReflect().SetUnknown([]byte{0x32, 0x01, '0'})
	b, err := proto.Marshal(withUnknown)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		var r ChargeRequest
		if proto.Unmarshal(b, &r) != nil {
			return
		}
		c, err := chargeOf(&r)
		if err != nil {
			return
		}
		back := chargeMsg(&c, r.Token)
		back.Version = r.Version
		r.ProtoReflect().SetUnknown(nil)
		r.Limits.ProtoReflect().SetUnknown(nil)
		if !proto.Equal(back, &r) {
			t.Fatalf("%v converts back to %v", &r, back)
		}
	})
}
