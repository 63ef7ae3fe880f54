package storage

import (
	"encoding/hex"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestHealthDays(t *testing.T) {
	db, err := Open("d", Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	d0 := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	for i := 0; i < 3; i++ {
		if err := db.PutHealth(d0.AddDate(0, 0, -90), &HealthDay{Day: d0.AddDate(0, 0, i), Samples: 10, APIOK: 10, StorageOK: uint64(9 + i%2)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.PutHealth(d0.AddDate(0, 0, 1), &HealthDay{Day: d0.AddDate(0, 0, 3), Samples: 1}); err != nil {
		t.Fatal(err)
	}
	got, err := db.Health(d0)
	if err != nil || len(got) != 3 || !got[0].Day.Equal(d0.AddDate(0, 0, 1)) || got[0].StorageOK != 10 {
		t.Fatalf("health: %+v %v", got, err)
	}
	if h := hex.EncodeToString(MarshalHealth(nil, &HealthDay{Samples: 2880, APIOK: 2880, StorageOK: 1})); h != "01c016c016010000" {
		t.Fatalf("health format changed: %s", h)
	}
}

// TestHealthAllOK: a day whose services failed in different probes keeps
// its count of probes with all three healthy (version 2); any other day is
// written as version 1, as before, and a version 1 record reads that count
// as the smallest of the three.
func TestHealthAllOK(t *testing.T) {
	split := HealthDay{Samples: 10, APIOK: 7, StorageOK: 7, AuthOK: 7, FeedsOK: 10, AllOK: 4}
	b := MarshalHealth(nil, &split)
	if b[0] != 2 {
		t.Fatalf("split day written as version %d", b[0])
	}
	if got, err := UnmarshalHealth(b); err != nil || got != split {
		t.Fatalf("split day: %+v %v", got, err)
	}
	old, _ := hex.DecodeString("010a0709070a") // version 1: 10 samples, API 7, storage 9, auth 7, feeds 10
	got, err := UnmarshalHealth(old)
	if err != nil || got.AllOK != 7 {
		t.Fatalf("version 1 record: %+v %v", got, err)
	}
	if again := MarshalHealth(nil, &got); hex.EncodeToString(again) != "010a0709070a" {
		t.Fatalf("version 1 day re-encoded as %x", again)
	}
	bad := MarshalHealth(nil, &HealthDay{Samples: 10, APIOK: 7, StorageOK: 7, AuthOK: 7, AllOK: 3})
	bad[len(bad)-1] = 8 // more probes with all healthy than with the API healthy
	if _, err := UnmarshalHealth(bad); err == nil {
		t.Fatal("AllOK above a service's count decoded")
	}
}
