package rpc

import (
	"testing"

	"google.golang.org/protobuf/proto"
)

// FuzzDevicesReply: whatever bytes an owner answers, checking its device
// list never panics, and a list that passes holds named devices with
// counts that are not negative, no more than asked for.
func FuzzDevicesReply(f *testing.F) {
	for _, r := range []*DevicesReply{
		{Version: version, Token: 3, Devices: []*DeviceLine{{VisitorId: "v1", FirstSeenUnixNano: 1, LastSeenUnixNano: 2, Visits: 3, LinkedAccounts: 1}}},
		{Version: version, Devices: []*DeviceLine{{VisitorId: "", Visits: -1}}},
	} {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var r DevicesReply
		if proto.Unmarshal(b, &r) != nil {
			return
		}
		list, err := deviceViewsOf(&r, 2)
		if err != nil {
			return
		}
		if len(list) > 2 {
			t.Fatalf("%d devices past a limit of 2", len(list))
		}
		for _, d := range list {
			if d.VisitorID == "" || d.Visits < 0 || d.LinkedAccounts < 0 {
				t.Fatalf("a device line passed: %+v", d)
			}
		}
	})
}
