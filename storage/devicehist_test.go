package storage

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

var histT0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC).Unix()

func testAccountHash(b byte) (h AccountHash) {
	for i := range h {
		h[i] = b
	}
	return h
}

func testCustomerDevice() *HistCustomerDevice {
	return &HistCustomerDevice{
		Customer: "acc_1", Device: "0123456789abcdef0123",
		LastSeen: histT0 + 7200,
		Days:     []DayVisits{{Day: dayOfUnix(histT0) - 1, N: 2, First: histT0 - 86400}, {Day: dayOfUnix(histT0), N: 3, First: histT0}},
		Hours:    []HourCount{{Hour: uint32(histT0 / 3600), N: 2}, {Hour: uint32(histT0/3600) + 2, N: 1}},
		Events:   []uint64{1, 0xfedcba9876543210},
		Accounts: []SeenAccount{{Hash: testAccountHash(0xaa), Last: histT0 + 7200}},
	}
}

func testAccount() *HistAccount {
	return &HistAccount{
		Customer: "acc_1", Hash: testAccountHash(0xaa), Sealed: []byte{9, 8, 7},
		FirstCheck: histT0 - 86400, LastCheck: histT0,
		Devices: []SeenDevice{{ID: "dev1", Last: histT0}},
		Addrs:   []SeenAddr{{Addr: netip.MustParseAddr("203.0.113.9"), Last: histT0}, {Addr: netip.MustParseAddr("2001:db8::1"), Last: histT0 - 60}},
	}
}

func testAddress() *HistAddress {
	return &HistAddress{Customer: "acc_1", Addr: netip.MustParseAddr("203.0.113.9"),
		Accounts: []SeenAccount{{Hash: testAccountHash(1), Last: histT0}, {Hash: testAccountHash(2), Last: histT0 - 5}}}
}

// TestHistFormatPinned pins the on-disk form of the three records: a change
// must bump histVersion and keep decoding version 1.
func TestHistFormatPinned(t *testing.T) {
	for _, tc := range []struct {
		rec  HistRecord
		back HistRecord
		want string
	}{
		{testCustomerDevice(), &HistCustomerDevice{Customer: "acc_1", Device: "0123456789abcdef0123"},
			"01" + "e08b9dd706" + // version, last seen
				"02" + "95a201" + "02" + "c0b097d706" + "96a201" + "03" + "c0d39cd706" + // days
				"02" + "9cb41e" + "02" + "9eb41e" + "01" + // hours
				"02" + "0000000000000001" + "fedcba9876543210" + // events
				"01" + "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" + "e08b9dd706"}, // accounts
		{testAccount(), &HistAccount{Customer: "acc_1", Hash: testAccountHash(0xaa)},
			"01" + "03090807" + "c0b097d706" + "c0d39cd706" + // version, sealed, first, last check
				"01" + "0464657631" + "c0d39cd706" + // devices
				"02" + "00000000000000000000ffffcb007109" + "c0d39cd706" + "20010db8000000000000000000000001" + "84d39cd706"}, // addresses
		{testAddress(), &HistAddress{Customer: "acc_1", Addr: netip.MustParseAddr("203.0.113.9")},
			"01" + "02" + "01010101010101010101010101010101" + "c0d39cd706" + "02020202020202020202020202020202" + "bbd39cd706"},
	} {
		b := tc.rec.Marshal(nil)
		if got := hex.EncodeToString(b); got != tc.want {
			t.Errorf("%T bytes changed (bump histVersion, keep decoding the old form):\n got %s\nwant %s", tc.rec, got, tc.want)
		}
		if err := tc.back.Unmarshal(b); err != nil {
			t.Fatalf("%T: %v", tc.rec, err)
		}
		if !reflect.DeepEqual(tc.back, tc.rec) {
			t.Errorf("%T round trip:\n got %+v\nwant %+v", tc.rec, tc.back, tc.rec)
		}
		for i := range b {
			if err := tc.back.Unmarshal(b[:i]); err == nil {
				t.Errorf("%T truncated at %d decoded", tc.rec, i)
			}
		}
		if err := tc.back.Unmarshal(append([]byte{2}, b[1:]...)); err == nil {
			t.Errorf("%T: unknown version decoded", tc.rec)
		}
		if err := tc.back.Unmarshal(append(b[:len(b):len(b)], 0)); err == nil {
			t.Errorf("%T: trailing byte decoded", tc.rec)
		}
	}
	// A huge list length must fail before allocating.
	if err := (&HistAddress{}).Unmarshal([]byte{1, 0xff, 0xff, 0xff, 0xff, 0x0f}); err == nil {
		t.Error("absurd list length decoded")
	}
}

func TestHistIndexDay(t *testing.T) {
	cd := testCustomerDevice()
	if got := cd.IndexDay(); got != dayOfUnix(histT0)-1 {
		t.Fatalf("customer device index day %d", got)
	}
	cd.Accounts[0].Last = histT0 - 3*86400
	if got := cd.IndexDay(); got != dayOfUnix(histT0)-3 {
		t.Fatalf("oldest link decides: %d", got)
	}
	if got := testAccount().IndexDay(); got != dayOfUnix(histT0) {
		t.Fatalf("account index day %d", got)
	}
	if got := testAddress().IndexDay(); got != dayOfUnix(histT0) {
		t.Fatalf("address index day %d", got)
	}
}

func openHist(t *testing.T, fs vfs.FS) *DB {
	t.Helper()
	db, err := Open("h", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func histExpired(t *testing.T, db *DB, before Day) []HistRef {
	t.Helper()
	var out []HistRef
	if err := db.ExpiredHist(before, func(r HistRef) bool { out = append(out, r); return true }); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestHistWriteLoadReopen(t *testing.T) {
	fs := vfs.NewMem()
	db := openHist(t, fs)
	cd, ac, ad := testCustomerDevice(), testAccount(), testAddress()
	var w HistWrite
	var st [3]HistStored
	var err error
	for i, r := range []HistRecord{cd, ac, ad} {
		if st[i], err = w.Put(r, HistStored{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.WriteHist([]*HistWrite{&w}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openHist(t, fs)
	defer db.Close()
	for i, r := range []HistRecord{cd, ac, ad} {
		back := (&HistRef{Kind: r.Kind(), Customer: "acc_1", Device: cd.Device, Hash: ac.Hash, Addr: ad.Addr}).Record()
		got, ok, err := db.LoadHist(back)
		if err != nil || !ok || got != st[i] || !reflect.DeepEqual(back, r) {
			t.Fatalf("%T after reopen: %v %v %+v (stored %+v want %+v)", r, err, ok, back, got, st[i])
		}
	}
	if _, ok, err := db.LoadHist(&HistCustomerDevice{Customer: "acc_2", Device: cd.Device}); ok || err != nil {
		t.Fatalf("another customer's device found: %v %v", ok, err)
	}
	if _, _, err := db.LoadHist(&HistCustomerDevice{Customer: "acc_1"}); err == nil {
		t.Fatal("empty device id accepted")
	}

	// The expiry index names each record under its index day.
	refs := histExpired(t, db, dayOfUnix(histT0)+1)
	if len(refs) != 3 {
		t.Fatalf("expiry index: %+v", refs)
	}
	if refs[0].Kind != HistKindCustomerDevice || refs[0].Day != dayOfUnix(histT0)-1 || refs[0].Device != cd.Device ||
		refs[1].Kind != HistKindAccount || refs[1].Hash != ac.Hash || refs[2].Kind != HistKindAddress || refs[2].Addr != ad.Addr {
		t.Fatalf("expiry refs: %+v", refs)
	}
	if refs := histExpired(t, db, dayOfUnix(histT0)); len(refs) != 1 {
		t.Fatalf("only the customer device is under an earlier day: %+v", refs)
	}

	// Rewriting moves the index entries; deleting removes them.
	cd.Days = cd.Days[1:]
	cd.LastSeen += 60
	w.Reset()
	if st[0], err = w.Put(cd, st[0]); err != nil {
		t.Fatal(err)
	}
	w.Delete(ad, st[2])
	if err := db.WriteHist([]*HistWrite{&w}); err != nil {
		t.Fatal(err)
	}
	if refs := histExpired(t, db, dayOfUnix(histT0)); len(refs) != 0 {
		t.Fatalf("old index entry left behind: %+v", refs)
	}
	if refs := histExpired(t, db, dayOfUnix(histT0)+1); len(refs) != 2 {
		t.Fatalf("after move and delete: %+v", refs)
	}
	if _, ok, _ := db.LoadHist(&HistAddress{Customer: "acc_1", Addr: ad.Addr}); ok {
		t.Fatal("deleted address record still there")
	}
	recent, err := db.RecentHistDevices("acc_1", 50)
	if err != nil || len(recent) != 1 || recent[0].LastSeen != cd.LastSeen {
		t.Fatalf("recent after move: %v %+v", err, recent)
	}
	if r, e, n, err := db.HistKeys(); err != nil || r != 2 || e != 2 || n != 1 {
		t.Fatalf("keys: %d records, %d expiry, %d recent, %v", r, e, n, err)
	}
	ref := HistRef{Day: 7, Kind: HistKindAccount, Customer: "acc_1", Hash: ac.Hash}
	w.Reset()
	w.DropIndex(&ref)
	if w.Len() != 1 {
		t.Fatal("DropIndex wrote nothing")
	}
}

func TestRecentHistDevices(t *testing.T) {
	db := openHist(t, vfs.NewMem())
	defer db.Close()
	var w HistWrite
	stored := map[string]HistStored{}
	put := func(customer, dev string, seen int64) {
		t.Helper()
		r := &HistCustomerDevice{Customer: customer, Device: dev, LastSeen: seen, Days: []DayVisits{{Day: dayOfUnix(seen), N: 1, First: seen}}}
		w.Reset()
		st, err := w.Put(r, stored[customer+dev])
		if err != nil {
			t.Fatal(err)
		}
		stored[customer+dev] = st
		if err := db.WriteHist([]*HistWrite{&w}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 60; i++ {
		put("acc_1", string(rune('A'+i)), histT0+int64(i))
	}
	put("acc_10", "other", histT0+1000) // a customer whose id extends acc_1's
	put("acc_1", "A", histT0+500)       // seen again: moves to the front
	got, err := db.RecentHistDevices("acc_1", 50)
	if err != nil || len(got) != 50 {
		t.Fatalf("recent: %v %d", err, len(got))
	}
	if got[0].Device != "A" || got[1].Device != string(rune('A'+59)) || got[49].Device != string(rune('A'+11)) {
		t.Fatalf("order: %s %s … %s", got[0].Device, got[1].Device, got[49].Device)
	}
	for _, r := range got {
		if r.Customer != "acc_1" {
			t.Fatalf("another customer's device listed: %+v", r)
		}
	}
	if got, _ := db.RecentHistDevices("acc_10", 50); len(got) != 1 || got[0].Device != "other" {
		t.Fatalf("acc_10: %+v", got)
	}
	if got, _ := db.RecentHistDevices("acc_2", 50); len(got) != 0 {
		t.Fatalf("unknown customer: %+v", got)
	}
}

func TestHistRejectsBadIdentity(t *testing.T) {
	var w HistWrite
	long := string(make([]byte, MaxHistDevice+1))
	for _, r := range []HistRecord{
		&HistCustomerDevice{Customer: "", Device: "d"},
		&HistCustomerDevice{Customer: "c", Device: long},
		&HistAccount{Customer: long},
		&HistAddress{Customer: "c"},
	} {
		if _, err := w.Put(r, HistStored{}); err == nil {
			t.Errorf("%T %+v accepted", r, r)
		}
	}
	if w.Len() != 0 {
		t.Fatal("rejected records wrote keys")
	}
}

// BenchmarkWriteHist stores flushes of 128 device records each, spread at
// random over 100,000 devices of one customer, into a memtable that holds
// them all (the live path's pattern: a flush per sync interval touches
// records all over the key space). Memtable inserts dominate.
func BenchmarkWriteHist(b *testing.B) {
	db, err := Open(b.TempDir(), Options{SyncInterval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	const devices, batch = 100_000, 128
	rec := testCustomerDevice()
	rng := rand.New(rand.NewPCG(1, 2))
	put := func(n int) {
		ws := []*HistWrite{{}, {}}
		for i := range n {
			rec.Device = fmt.Sprintf("dev-%08x", rng.IntN(devices)*2654435761%(1<<32))
			rec.LastSeen++
			if _, err := ws[i%2].Put(rec, HistStored{}); err != nil {
				b.Fatal(err)
			}
		}
		if err := db.WriteHist(ws); err != nil {
			b.Fatal(err)
		}
	}
	for range devices / batch { // fill the memtable
		put(batch)
	}
	b.ResetTimer()
	for b.Loop() {
		put(batch)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/record")
}

// TestDropUndecodableHist: a stored device-history value damaged on disk
// reads as ErrHistUndecodable, naming the record and none of its bytes;
// DropUndecodableHist deletes it with its expiry-index entry and its
// recent-index entry, and never a record that decodes or one not stored.
func TestDropUndecodableHist(t *testing.T) {
	db := openHist(t, vfs.NewMem())
	defer db.Close()
	cd, acct, fine := testCustomerDevice(), testAccount(), testAddress()
	var w HistWrite
	for _, r := range []HistRecord{cd, acct, fine} {
		if _, err := w.Put(r, HistStored{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.WriteHist([]*HistWrite{&w}); err != nil {
		t.Fatal(err)
	}
	if err := db.settleHist(); err != nil {
		t.Fatal(err)
	}
	// Damage the device's and the account's values in place.
	b := db.newBatch()
	_ = b.Set(appendRecordKey(nil, cd), []byte{histVersion, 0xff}, nil)
	_ = b.Set(appendRecordKey(nil, acct), append([]byte{histVersion, 0xf0, 0xf0}, acct.Sealed...), nil)
	if err := db.commit(b); err != nil {
		t.Fatal(err)
	}
	for _, r := range []HistRecord{cd, acct} {
		_, found, err := db.LoadHist(blankHist(r))
		if found || !errors.Is(err, ErrHistUndecodable) {
			t.Fatalf("%T damaged: found=%v err=%v", r, found, err)
		}
		if !strings.Contains(err.Error(), "acc_1") {
			t.Errorf("the error does not name the record: %v", err)
		}
	}

	refs := histExpired(t, db, 1<<31)
	if len(refs) != 3 {
		t.Fatalf("index entries: %+v", refs)
	}
	var drop HistWrite
	dropped := 0
	for i := range refs {
		ok, err := db.DropUndecodableHist(&drop, &refs[i])
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			dropped++
			if refs[i].Kind == HistKindAddress {
				t.Fatal("a record that decodes was dropped")
			}
		}
	}
	if dropped != 2 {
		t.Fatalf("%d records dropped, want the 2 damaged ones", dropped)
	}
	if err := db.WriteHist([]*HistWrite{&drop}); err != nil {
		t.Fatal(err)
	}
	if r, e, n, err := db.HistKeys(); err != nil || r != 1 || e != 1 || n != 0 {
		t.Fatalf("keys left (records, expiry, recent): %d %d %d %v; want the address's 1 1 0", r, e, n, err)
	}
	if _, found, err := db.LoadHist(&HistAddress{Customer: "acc_1", Addr: fine.Addr}); !found || err != nil {
		t.Fatalf("the record that decodes: found=%v err=%v", found, err)
	}
	// Gone, or never stored: nothing to drop.
	var again HistWrite
	for i := range refs {
		if ok, err := db.DropUndecodableHist(&again, &refs[i]); ok || err != nil {
			t.Fatalf("%+v dropped again: %v %v", refs[i], ok, err)
		}
	}
	if again.Len() != 0 {
		t.Fatalf("%d operations for nothing to drop", again.Len())
	}
}

func blankHist(r HistRecord) HistRecord {
	switch r := r.(type) {
	case *HistCustomerDevice:
		return &HistCustomerDevice{Customer: r.Customer, Device: r.Device}
	case *HistAccount:
		return &HistAccount{Customer: r.Customer, Hash: r.Hash}
	}
	return &HistAddress{Customer: r.(*HistAddress).Customer, Addr: r.(*HistAddress).Addr}
}
