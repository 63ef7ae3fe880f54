package storage

import (
	"bytes"
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestHistParcelRoundTrip(t *testing.T) {
	long := strings.Repeat("c", MaxHistCustomer)
	for _, r := range []HistRecord{
		testCustomerDevice(),
		testAccount(),
		testAddress(),
		&HistCustomerDevice{Customer: long, Device: strings.Repeat("\xff", MaxHistDevice)}, // longest identity, empty value lists
		&HistAccount{Customer: "c", Hash: testAccountHash(0xff)},
		&HistAddress{Customer: "c", Addr: netip.MustParseAddr("2001:db8::9")},
	} {
		head := []byte("head")
		b, err := AppendHistParcel(head, r)
		if err != nil {
			t.Fatalf("%T: %v", r, err)
		}
		if !bytes.Equal(b[:len(head)], head) {
			t.Fatalf("%T: dst overwritten: %x", r, b)
		}
		// The layout: uvarint(len(identity)) | identity | value.
		id, val := r.appendIdentity(nil), r.Marshal(nil)
		want := append(append(appendUvarint([]byte("head"), uint64(len(id))), id...), val...)
		if !bytes.Equal(b, want) {
			t.Fatalf("%T parcel:\n got %x\nwant %x", r, b, want)
		}
		got, err := ParseHistParcel(b[len(head):])
		if err != nil {
			t.Fatalf("%T: %v", r, err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Fatalf("%T round trip:\n got %+v\nwant %+v", r, got, r)
		}
	}
}

// An IPv4-mapped address travels as its IPv4 form, as in the record key.
func TestHistParcelMappedAddress(t *testing.T) {
	b, err := AppendHistParcel(nil, &HistAddress{Customer: "c", Addr: netip.MustParseAddr("::ffff:203.0.113.9")})
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseHistParcel(b)
	if err != nil || got.(*HistAddress).Addr != netip.MustParseAddr("203.0.113.9") {
		t.Fatalf("%+v %v", got, err)
	}
}

func TestAppendHistParcelRejectsBadIdentity(t *testing.T) {
	long := strings.Repeat("x", MaxHistCustomer+1)
	for _, r := range []HistRecord{
		nil,
		&HistCustomerDevice{Customer: "", Device: "d"},
		&HistCustomerDevice{Customer: "c", Device: ""},
		&HistCustomerDevice{Customer: "c", Device: long},
		&HistAccount{Customer: long},
		&HistAddress{Customer: "c"}, // no address
	} {
		dst := []byte("head")
		b, err := AppendHistParcel(dst, r)
		if err == nil {
			t.Errorf("%T %+v accepted", r, r)
		}
		if string(b) != "head" {
			t.Errorf("%T %+v: appended %x on failure", r, r, b)
		}
	}
}

// parcel builds a parcel from its parts: the identity (with a length prefix
// made from its real length) and the value.
func parcel(id []byte, val []byte) []byte {
	return append(appendBytes(nil, id), val...)
}

func TestParseHistParcelRejects(t *testing.T) {
	cdID, cdVal := testCustomerDevice().appendIdentity(nil), testCustomerDevice().Marshal(nil)
	acVal := testAccount().Marshal(nil)
	adVal := testAddress().Marshal(nil)
	ident := func(kind HistKind, customer string, rest []byte) []byte {
		return append(appendCustomer([]byte{byte(kind)}, customer), rest...)
	}
	h16 := make([]byte, 16)
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"length only", []byte{byte(len(cdID))}},
		{"zero identity length", parcel(nil, cdVal)},
		{"identity longer than the parcel", append([]byte{byte(len(cdID) + 1)}, cdID...)},
		{"identity length overflows", append(bytes.Repeat([]byte{0xff}, 10), 1)},
		{"huge identity length", append(appendUvarint(nil, 1<<40), cdID...)},
		{"identity too long", parcel(ident(HistKindCustomerDevice, "c", bytes.Repeat([]byte{'d'}, 200)), cdVal)},
		{"kind 0", parcel(ident(0, "acc_1", []byte("dev")), cdVal)},
		{"kind 4", parcel(ident(4, "acc_1", h16), adVal)},
		{"empty customer", parcel(ident(HistKindCustomerDevice, "", []byte("dev")), cdVal)},
		{"empty customer, account", parcel(ident(HistKindAccount, "", h16), acVal)},
		{"customer too long", parcel(ident(HistKindAddress, strings.Repeat("c", MaxHistCustomer+1), h16), adVal)},
		{"customer length past the identity", parcel([]byte{byte(HistKindAccount), 40, 'c'}, acVal)},
		{"no customer length", parcel([]byte{byte(HistKindAccount)}, acVal)},
		{"empty device", parcel(ident(HistKindCustomerDevice, "acc_1", nil), cdVal)},
		{"device too long", parcel(ident(HistKindCustomerDevice, "acc_1", bytes.Repeat([]byte{'d'}, MaxHistDevice+1)), cdVal)},
		{"short account hash", parcel(ident(HistKindAccount, "acc_1", h16[:15]), acVal)},
		{"long account hash", parcel(ident(HistKindAccount, "acc_1", make([]byte, 17)), acVal)},
		{"short address", parcel(ident(HistKindAddress, "acc_1", h16[:4]), adVal)},
		{"no value", parcel(cdID, nil)},
		{"value of another kind", parcel(cdID, adVal)},
		{"unknown value version", parcel(cdID, append([]byte{2}, cdVal[1:]...))},
		{"trailing byte", append(parcel(cdID, cdVal), 0)},
		{"trailing parcel", append(parcel(cdID, cdVal), parcel(cdID, cdVal)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseHistParcel(tc.b)
			if err == nil {
				t.Fatalf("%x parsed: %+v", tc.b, r)
			}
			if !errors.Is(err, errCorrupt) {
				t.Fatalf("%x: %v does not wrap errCorrupt", tc.b, err)
			}
		})
	}
	// Every truncation of every kind's parcel fails.
	for _, r := range []HistRecord{testCustomerDevice(), testAccount(), testAddress()} {
		b, err := AppendHistParcel(nil, r)
		if err != nil {
			t.Fatal(err)
		}
		for i := range b {
			if got, err := ParseHistParcel(b[:i]); err == nil {
				t.Errorf("%T truncated at %d of %d parsed: %+v", r, i, len(b), got)
			}
		}
	}
}

// FuzzHistParcel fuzzes the parcel parser the way fuzz_test.go fuzzes the
// stored records: arbitrary bytes never panic, and a parcel that parses
// re-encodes to one that parses to the same record.
func FuzzHistParcel(f *testing.F) {
	for _, r := range []HistRecord{
		testCustomerDevice(), testAccount(), testAddress(),
		&HistCustomerDevice{Customer: "acc_1", Device: "dev", LastSeen: 1_790_000_000, Days: []DayVisits{{Day: 20714, N: 3, First: 1_789_999_000}},
			Hours: []HourCount{{Hour: 497_222, N: 2}}, Events: []uint64{1, 2}, Accounts: []SeenAccount{{Hash: AccountHash{1}, Last: 1_790_000_000}}},
		&HistAccount{Customer: "acc_1", Hash: AccountHash{3}, Sealed: []byte("sealed"), FirstCheck: 1_789_000_000, LastCheck: 1_790_000_000,
			Devices: []SeenDevice{{ID: "dev", Last: 1_790_000_000}}, Addrs: []SeenAddr{{Addr: netip.MustParseAddr("73.1.1.1"), Last: 1_790_000_000}}},
		&HistAddress{Customer: "acc_2", Addr: netip.MustParseAddr("2001:db8::7"), Accounts: []SeenAccount{{Hash: AccountHash{7}, Last: 1_790_000_000}}},
		&HistCustomerDevice{Customer: strings.Repeat("c", MaxHistCustomer), Device: strings.Repeat("d", MaxHistDevice)},
	} {
		b, err := AppendHistParcel(nil, r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip(t, b, ParseHistParcel, func(r HistRecord) []byte {
			again, err := AppendHistParcel(nil, r)
			if err != nil {
				t.Fatalf("parsed parcel %x does not encode: %+v: %v", b, r, err)
			}
			return again
		})
	})
}

// histOfFixture stores records of several customers across the three kinds
// and returns them in key order.
func histOfFixture(t *testing.T, db *DB) []HistRecord {
	t.Helper()
	var recs []HistRecord
	for _, c := range []string{"acc_1", "acc_2", "acc_10", "b", strings.Repeat("\xff", MaxHistCustomer)} {
		for i, dev := range []string{"d1", "d2", "d3"} {
			cd := testCustomerDevice()
			cd.Customer, cd.Device, cd.LastSeen = c, dev, cd.LastSeen+int64(i)
			recs = append(recs, cd)
		}
		for _, h := range []byte{1, 2} {
			ac := testAccount()
			ac.Customer, ac.Hash = c, testAccountHash(h)
			recs = append(recs, ac)
		}
		ad := testAddress()
		ad.Customer = c
		recs = append(recs, ad)
	}
	var w HistWrite
	for _, r := range recs {
		if _, err := w.Put(r, HistStored{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.WriteHist([]*HistWrite{&w}); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(recs, func(a, b HistRecord) int {
		return bytes.Compare(appendRecordKey(nil, a), appendRecordKey(nil, b))
	})
	return recs
}

// keysOf and recordKeys are the record keys of refs and recs, to compare
// identities.
func keysOf(refs []HistRef) []string {
	out := make([]string, len(refs))
	for i := range refs {
		out[i] = string(appendRecordKey(nil, refs[i].Record()))
	}
	return out
}

func recordKeys(recs []HistRecord) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(appendRecordKey(nil, r))
	}
	return out
}

func TestHistOf(t *testing.T) {
	db := openHist(t, vfs.NewMem())
	defer db.Close()
	all := histOfFixture(t, db)
	// Keys that are not valid record keys, beside the records: skipped.
	b := db.newBatch()
	_ = b.Set([]byte{prefixHist, byte(HistKindCustomerDevice), 5, 'a', 'c', 'c', '_', '1'}, testCustomerDevice().Marshal(nil), nil) // empty device
	_ = b.Set([]byte{prefixHist, byte(HistKindAccount), 40, 'a'}, []byte{0xff}, nil)                                                // customer past the key
	_ = b.Set([]byte{prefixHist, byte(HistKindAccount)}, []byte{0xff}, nil)                                                         // no customer
	_ = b.Set(append(appendCustomer([]byte{prefixHist, 4}, "acc_1"), make([]byte, 16)...), []byte{0xff}, nil)                       // unknown kind
	if err := db.commit(b); err != nil {
		t.Fatal(err)
	}

	in := func(cs ...string) func(string) bool {
		return func(c string) bool { return slices.Contains(cs, c) }
	}
	want := func(match func(string) bool) []string {
		var out []HistRecord
		for _, r := range all {
			if match == nil || match(HistCustomerOf(r)) {
				out = append(out, r)
			}
		}
		return recordKeys(out)
	}
	for _, tc := range []struct {
		name  string
		match func(string) bool
		stop  int // fn returns false at this record (1-based); 0: never
		want  []string
	}{
		{"one customer", in("acc_1"), 0, want(in("acc_1"))},
		{"two customers", in("acc_1", "acc_10"), 0, want(in("acc_1", "acc_10"))},
		{"all 0xff customer", in(strings.Repeat("\xff", MaxHistCustomer)), 0, want(in(strings.Repeat("\xff", MaxHistCustomer)))},
		{"nil match", nil, 0, recordKeys(all)},
		{"none", in(), 0, []string{}},
		{"unknown customer", in("acc_3"), 0, []string{}},
		{"stop", in("acc_1", "acc_2"), 4, want(in("acc_1", "acc_2"))[:4]},
		{"stop across kinds", in("acc_1", "b"), 8, want(in("acc_1", "b"))[:8]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asked := map[string]int{}
			match := tc.match
			if match != nil {
				match = func(c string) bool { asked[c]++; return tc.match(c) }
			}
			var got []HistRef
			err := db.HistOf(match, func(r HistRef) bool {
				got = append(got, r)
				return len(got) != tc.stop
			})
			if err != nil {
				t.Fatal(err)
			}
			if keys := keysOf(got); !slices.Equal(keys, tc.want) {
				t.Fatalf("got %d records, want %d:\n got %q\nwant %q", len(keys), len(tc.want), keys, tc.want)
			}
			for c, n := range asked {
				if n > 3 { // once per kind at most
					t.Errorf("match asked %d times about %q", n, c)
				}
			}
		})
	}
}

// Only keys are read, and a customer match refuses is asked about once per
// kind: a corrupt value anywhere goes unnoticed (its owner finds it when it
// loads the record).
func TestHistOfSkipsOtherCustomers(t *testing.T) {
	db := openHist(t, vfs.NewMem())
	defer db.Close()
	all := histOfFixture(t, db)
	bad := &HistAccount{Customer: "acc_2", Hash: testAccountHash(0)} // before its other accounts
	b := db.newBatch()
	_ = b.Set(appendRecordKey(nil, bad), []byte{1, 0xff}, nil)
	if err := db.commit(b); err != nil {
		t.Fatal(err)
	}

	asked := map[string]int{}
	var got []HistRef
	err := db.HistOf(func(c string) bool { asked[c]++; return c != "acc_2" }, func(r HistRef) bool {
		got = append(got, r)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(all)-6 {
		t.Fatalf("%d records, want %d", len(got), len(all)-6)
	}
	for _, r := range got {
		if r.Customer == "acc_2" {
			t.Fatalf("refused customer's record passed: %+v", r)
		}
	}
	// Asked once per kind and customer, though acc_2 has several records
	// of each kind.
	for _, c := range []string{"acc_1", "acc_2", "acc_10", "b"} {
		if asked[c] != 3 {
			t.Errorf("match asked %d times about %q, want 3", asked[c], c)
		}
	}
	n := 0
	if err := db.HistOf(func(c string) bool { return c == "acc_2" }, func(HistRef) bool { n++; return true }); err != nil {
		t.Fatal(err)
	}
	if n != 7 { // its 3 devices, 3 accounts (the corrupt one included) and 1 address
		t.Fatalf("%d records of acc_2, want 7", n)
	}
}

// TestHistIdentitiesOf: a customer's records of all three kinds, and
// never another customer's, also one whose id starts with it (acc_1 and
// acc_10); a key that does not parse is skipped; fn can stop the walk.
func TestHistIdentitiesOf(t *testing.T) {
	db := openHist(t, vfs.NewMem())
	defer db.Close()
	all := histOfFixture(t, db)
	b := db.newBatch()
	_ = b.Set(appendCustomer([]byte{prefixHist, byte(HistKindAccount)}, "acc_1"), []byte{0xff}, nil)                  // no hash
	_ = b.Set(append(appendCustomer([]byte{prefixHist, byte(HistKindAddress)}, "acc_1"), 1, 2, 3), []byte{0xff}, nil) // short address
	if err := db.commit(b); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"acc_1", "acc_10", strings.Repeat("\xff", MaxHistCustomer), "acc_3"} {
		var want []string
		for _, r := range all {
			if HistCustomerOf(r) == c {
				want = append(want, string(appendRecordKey(nil, r)))
			}
		}
		got := []string{}
		kinds := map[HistKind]int{}
		err := db.HistIdentitiesOf(c, func(kind HistKind, id []byte) bool {
			kinds[kind]++
			got = append(got, string(append(appendCustomer([]byte{prefixHist, byte(kind)}, c), id...)))
			return true
		})
		if err != nil {
			t.Fatal(err)
		}
		if want == nil {
			want = []string{}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%q: got %q\nwant %q", c, got, want)
		}
		if len(want) > 0 && (kinds[HistKindCustomerDevice] != 3 || kinds[HistKindAccount] != 2 || kinds[HistKindAddress] != 1) {
			t.Fatalf("%q: kinds %v", c, kinds)
		}
	}
	n := 0
	if err := db.HistIdentitiesOf("acc_1", func(HistKind, []byte) bool { n++; return n < 4 }); err != nil {
		t.Fatal(err)
	}
	if n != 4 {
		t.Fatalf("walked %d after fn stopped at 4", n)
	}
	if err := db.HistIdentitiesOf("", func(HistKind, []byte) bool { return true }); err == nil {
		t.Fatal("empty customer accepted")
	}
}
