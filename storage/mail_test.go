package storage

import (
	"encoding/hex"
	"reflect"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestMailOutbox(t *testing.T) {
	db, err := Open("d", Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < 5; i++ {
		m := &Mail{ID: string(rune('a' + i)), At: base.Add(time.Duration(i) * time.Hour), To: "o@x.y", Kind: "k", Status: "recorded"}
		if err := db.PutMail(m); err != nil {
			t.Fatal(err)
		}
	}
	got, err := db.RecentMail(3)
	if err != nil || len(got) != 3 || got[0].ID != "e" || got[2].ID != "c" {
		t.Fatalf("recent: %v %v", got, err)
	}
	if err := db.PruneMail(base.Add(2 * time.Hour)); err != nil {
		t.Fatal(err)
	}
	got, _ = db.RecentMail(10)
	if len(got) != 3 || got[2].ID != "c" {
		t.Fatalf("after prune: %d records", len(got))
	}
}

// TestMailOutboxOfAccount: RecentMailOf reads past newer records of other
// accounts to the account's own, newest first, up to the limit.
func TestMailOutboxOfAccount(t *testing.T) {
	db, err := Open("d", Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < 300; i++ {
		acct := "acc_other"
		if i < 3 {
			acct = "acc_mine"
		}
		if err := db.PutMail(&Mail{ID: string(rune('a' + i)), At: base.Add(time.Duration(i) * time.Minute), Account: acct, Status: "recorded"}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := db.RecentMailOf("acc_mine", 2)
	if err != nil || len(got) != 2 || got[0].ID != "c" || got[1].ID != "b" {
		t.Fatalf("the account's two newest: %v %v", got, err)
	}
	if got, _ := db.RecentMailOf("acc_mine", 200); len(got) != 3 {
		t.Fatalf("all of the account's: %d", len(got))
	}
	if got, _ := db.RecentMailOf("", 200); len(got) != 0 {
		t.Fatalf("no account: %d records", len(got))
	}
}

func TestMailFormatPinned(t *testing.T) {
	m := &Mail{ID: "m", At: time.Unix(1, 0).UTC(), To: "t", Status: "sent"}
	const want = "01" + "016d" + "8194ebdc03" + "00" + "0174" + "00" + "00" + "00" + "0473656e74" + "00"
	if got := hex.EncodeToString(MarshalMail(nil, m)); got != want {
		t.Fatalf("mail format changed: %s", got)
	}
	back, err := UnmarshalMail(MarshalMail(nil, m))
	if err != nil || !reflect.DeepEqual(back, m) {
		t.Fatalf("round trip: %+v %v", back, err)
	}
}
