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
