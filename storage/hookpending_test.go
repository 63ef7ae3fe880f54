package storage

import (
	"encoding/hex"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func samplePendingHook() *PendingHook {
	return &PendingHook{Account: "a", EventID: "e", Event: "test", Attempts: 1, Due: time.Unix(1, 0).UTC(),
		EventAt: time.Unix(0, 5).UTC(), IP: "1.2.3.4", ThreatType: "Tor", Country: "DE",
		Flags: HookTor | HookProxied, Decision: "block", RuleMatched: []string{"tor"}}
}

// TestPendingHookFormatPinned pins the stored bytes: a change of layout needs
// a new version byte, and old records must keep decoding.
func TestPendingHookFormatPinned(t *testing.T) {
	p := samplePendingHook()
	const want = "01" + "0161" + "0165" + "0474657374" + "01" + "8194ebdc03" + "06" +
		"07312e322e332e34" + "03546f72" + "024445" + "06" + "05626c6f636b" + "0103746f72" + "00"
	if got := hex.EncodeToString(MarshalPendingHook(nil, p)); got != want {
		t.Fatalf("pending webhook format changed: %s", got)
	}
	back, err := UnmarshalPendingHook(MarshalPendingHook(nil, p))
	p.ExceptionMatched = []string{} // decodes as an empty list
	if err != nil || !reflect.DeepEqual(back, p) {
		t.Fatalf("round trip: %+v %v", back, err)
	}
	full := MarshalPendingHook(nil, p)
	for _, bad := range [][]byte{{9}, full[:len(full)-1], append(full, 0), nil} {
		if _, err := UnmarshalPendingHook(bad); !errors.Is(err, errCorrupt) {
			t.Errorf("%x decoded: %v", bad, err)
		}
	}
}

func TestPendingHooksStoreListDelete(t *testing.T) {
	db, err := Open("d", Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, id := range []string{"e2", "e1"} {
		for _, acc := range []string{"acc_b", "acc_a"} {
			p := samplePendingHook()
			p.Account, p.EventID = acc, id
			if err := db.PutPendingHook(p); err != nil {
				t.Fatal(err)
			}
		}
	}
	p := samplePendingHook()
	p.Account, p.EventID, p.Attempts = "acc_a", "e1", 2 // a later attempt replaces the record
	if err := db.PutPendingHook(p); err != nil {
		t.Fatal(err)
	}
	if err := db.DeletePendingHook("acc_b", "e2"); err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := db.PendingHooks(func(p *PendingHook) error {
		got = append(got, p.Account+"/"+p.EventID+"/"+string(rune('0'+p.Attempts)))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"acc_a/e1/2", "acc_a/e2/1", "acc_b/e1/1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("pending: %v, want %v", got, want)
	}
	for _, bad := range []*PendingHook{{EventID: "e"}, {Account: "a"}, {Account: "a\x00b", EventID: "e"}} {
		if err := db.PutPendingHook(bad); err == nil {
			t.Errorf("stored %+v", bad)
		}
	}
	// A record that does not decode stops the walk with its key.
	b := db.newBatch()
	_ = b.Set(pendingHookKey("acc_c", "e9"), []byte{1, 0xff}, nil)
	if err := db.commitBehind(b); err != nil {
		t.Fatal(err)
	}
	if err := db.PendingHooks(func(*PendingHook) error { return nil }); !errors.Is(err, errCorrupt) {
		t.Fatalf("corrupt record: %v", err)
	}
}

// FuzzUnmarshalPendingHook: any bytes decode to a record or an error, never a
// panic, and a decoded record encodes back to the same bytes.
func FuzzUnmarshalPendingHook(f *testing.F) {
	f.Add(MarshalPendingHook(nil, samplePendingHook()))
	f.Add(MarshalPendingHook(nil, &PendingHook{Account: "acc_1", EventID: "0123456789abcdef0123456789abcdef", Event: "threat.detected"}))
	f.Add([]byte{1})
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := UnmarshalPendingHook(b)
		if err != nil {
			return
		}
		again, err := UnmarshalPendingHook(MarshalPendingHook(nil, p))
		if err != nil || !reflect.DeepEqual(again, p) {
			t.Fatalf("re-encoding %+v: %+v %v", p, again, err)
		}
	})
}
