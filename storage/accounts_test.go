package storage

import (
	"encoding/hex"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func sampleAccount() *Account {
	h := int64(500)
	return &Account{
		ID: "acc_1", Email: "Ops@Example.com", Plan: "custom",
		CreatedAt:   time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC),
		HourlyLimit: &h, Suspended: true,
		Allowlist: []string{"203.0.113.7/32"}, Origins: []string{"https://shop.example"},
		DeviceEvidenceBeta: true, WebhookURL: "https://hooks.example/x",
		WebhookSecret: []byte{1, 2, 3}, PublishableKey: "pk_live_abc",
		Live:     KeyRecord{Hash: [32]byte{7}, Prefix: "sk_live_", Last4: "wxyz", Generation: 2, CreatedAt: time.Unix(100, 0).UTC()},
		PrevLive: &KeyRecord{Hash: [32]byte{8}, Prefix: "sk_live_", Last4: "abcd", Generation: 1, ValidUntil: time.Unix(200, 0).UTC()},
		Test:     KeyRecord{Hash: [32]byte{9}, Prefix: "sk_test_", Last4: "tttt", Generation: 1},
	}
}

func TestAccountRoundTrip(t *testing.T) {
	a := sampleAccount()
	got, err := UnmarshalAccount(MarshalAccount(nil, a))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, got) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, a)
	}
	for n := range MarshalAccount(nil, a) {
		if _, err := UnmarshalAccount(MarshalAccount(nil, a)[:n]); err == nil {
			t.Fatalf("truncated record of %d bytes decoded without error", n)
		}
	}
}

// TestAccountFormatPinned fails when the on-disk account format changes. A
// change must bump accountVersion and keep decoding the old version.
func TestAccountFormatPinned(t *testing.T) {
	a := &Account{ID: "a", Email: "e", Plan: "free", CreatedAt: time.Unix(1, 0).UTC(),
		Live: KeyRecord{Prefix: "sk_live_", Last4: "1234", Generation: 1}, Test: KeyRecord{Prefix: "sk_test_", Last4: "5678", Generation: 1}}
	// version, id "a", email "e", plan "free", created 1s, then nine empty optional fields,
	// the live key (zero hash, prefix, last4, generation 1, no times), no previous key, the test key.
	const want = "01" + "0161" + "0165" + "0466726565" + "8194ebdc03" + "000000000000000000" +
		"0000000000000000000000000000000000000000000000000000000000000000" + "08736b5f6c6976655f" + "0431323334" + "01" + "0000" + "00" +
		"0000000000000000000000000000000000000000000000000000000000000000" + "08736b5f746573745f" + "0435363738" + "01" + "0000"
	got := hex.EncodeToString(MarshalAccount(nil, a))
	if got != want {
		t.Fatalf("account format changed:\n got %s\nwant %s", got, want)
	}
	if _, err := UnmarshalAccount(MarshalAccount(nil, a)); err != nil {
		t.Fatal(err)
	}
}

func TestPolicyRoundTrip(t *testing.T) {
	rules := []Rule{{"vpn", "block"}, {"tor", "allow"}}
	gotR, err := UnmarshalRules(MarshalRules(nil, rules))
	if err != nil || !reflect.DeepEqual(gotR, rules) {
		t.Fatalf("rules: %v %v", gotR, err)
	}
	if hex.EncodeToString(MarshalRules(nil, rules[:1])) != "01010376706e05626c6f636b" {
		t.Fatalf("rules format changed: %x", MarshalRules(nil, rules[:1]))
	}
	pins := []Pin{{IP: "203.0.113.0/24", Action: "allow", Label: "office"}, {VisitorID: "v1", Action: "block"}}
	gotP, err := UnmarshalPins(MarshalPins(nil, pins))
	if err != nil || !reflect.DeepEqual(gotP, pins) {
		t.Fatalf("pins: %v %v", gotP, err)
	}
}

func TestReopenKeepsEverything(t *testing.T) {
	fs := vfs.NewMem()
	db, err := Open("d", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	a := sampleAccount()
	if err := db.CreateAccount(a); err != nil {
		t.Fatal(err)
	}
	dup := sampleAccount()
	dup.ID = "acc_2"
	dup.Email = "ops@EXAMPLE.com"
	if err := db.CreateAccount(dup); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate email: %v", err)
	}
	if err := db.PutRules(a.ID, []Rule{{"vpn", "block"}}); err != nil {
		t.Fatal(err)
	}
	if err := db.PutPins(a.ID, []Pin{{IP: "1.2.3.4/32", Action: "allow"}}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open("d", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	got, err := db.GetAccount(a.ID)
	if err != nil || !reflect.DeepEqual(got, a) {
		t.Fatalf("reopened account: %+v %v", got, err)
	}
	n := 0
	if err := db.Accounts(func(*Account) error { n++; return nil }); err != nil || n != 1 {
		t.Fatalf("Accounts: n=%d err=%v", n, err)
	}
	if r, _ := db.GetRules(a.ID); len(r) != 1 || r[0].Action != "block" {
		t.Fatalf("rules after reopen: %v", r)
	}
	if p, _ := db.GetPins(a.ID); len(p) != 1 || p[0].IP != "1.2.3.4/32" {
		t.Fatalf("pins after reopen: %v", p)
	}
	if _, err := db.GetAccount("nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing account: %v", err)
	}
	if err := db.Probe(); err != nil || !db.Available() {
		t.Fatalf("probe: %v", err)
	}
}

func TestReplaceAndDeleteAccount(t *testing.T) {
	db, err := Open("d", Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	a := sampleAccount()
	if err := db.ReplaceAccount(a, []Rule{{"vpn", "block"}}, nil, ""); err != nil {
		t.Fatal(err)
	}
	if got, err := db.GetAccount(a.ID); err != nil || !reflect.DeepEqual(got, a) {
		t.Fatalf("replaced account: %+v %v", got, err)
	}
	// The email claim moves with the email: the old one is free again.
	moved := *a
	moved.Email = "new@example.com"
	if err := db.ReplaceAccount(&moved, nil, []Pin{{IP: "1.2.3.4/32", Action: "allow"}}, a.Email); err != nil {
		t.Fatal(err)
	}
	if r, _ := db.GetRules(a.ID); len(r) != 0 {
		t.Fatalf("rules not replaced: %v", r)
	}
	if p, _ := db.GetPins(a.ID); len(p) != 1 {
		t.Fatalf("pins not replaced: %v", p)
	}
	other := sampleAccount()
	other.ID = "acc_2"
	if err := db.CreateAccount(other); err != nil {
		t.Fatalf("old email still claimed: %v", err)
	}
	dup := sampleAccount()
	dup.ID, dup.Email = "acc_3", "NEW@example.com"
	if err := db.CreateAccount(dup); !errors.Is(err, ErrExists) {
		t.Fatalf("new email not claimed: %v", err)
	}
	if err := db.DeleteAccount(a.ID, moved.Email); err != nil {
		t.Fatal(err)
	}
	if _, err := db.GetAccount(a.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted account: %v", err)
	}
	if p, _ := db.GetPins(a.ID); len(p) != 0 {
		t.Fatalf("pins of a deleted account: %v", p)
	}
	if err := db.CreateAccount(dup); err != nil {
		t.Fatalf("email of a deleted account still claimed: %v", err)
	}
}
