package storage

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"math"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

// Every stored record's decoder is fuzzed two ways: arbitrary bytes never
// panic (a damaged or foreign value is an error), and whatever decodes
// survives a round trip: decode(encode(x)) == x. The seeds are encodings of
// real records, so the fuzzer starts from the formats.

// roundTrip checks that a decoded value encodes to bytes that decode to it.
func roundTrip[T any](t *testing.T, b []byte, dec func([]byte) (T, error), enc func(T) []byte) {
	t.Helper()
	x, err := dec(b)
	if err != nil {
		return
	}
	again := enc(x)
	y, err := dec(again)
	if err != nil {
		t.Fatalf("re-encoding of %x (%x) does not decode: %v", b, again, err)
	}
	if !reflect.DeepEqual(x, y) {
		t.Fatalf("round trip of %x changed the value:\n%+v\n%+v", b, x, y)
	}
}

var fuzzTime = time.Date(2026, 11, 22, 12, 0, 0, 123, time.UTC)

func FuzzAccount(f *testing.F) {
	lim := int64(500)
	f.Add(MarshalAccount(nil, &Account{}))
	f.Add(MarshalAccount(nil, &Account{ID: "acc_1", Email: "a@b.co", Plan: "custom", CreatedAt: fuzzTime, HourlyLimit: &lim,
		Suspended: true, Allowlist: []string{"203.0.113.0/24"}, Origins: []string{"https://shop.example"}, DeviceEvidenceBeta: true,
		WebhookURL: "https://h.example/x", WebhookSecret: []byte{1, 2, 3}, PublishableKey: "pk_live_x",
		Live:     KeyRecord{Hash: [32]byte{9}, Prefix: "sk_live_", Last4: "abcd", Generation: 3, CreatedAt: fuzzTime},
		PrevLive: &KeyRecord{Prefix: "sk_live_", Last4: "wxyz", Generation: 2, ValidUntil: fuzzTime.Add(24 * time.Hour)},
		Test:     KeyRecord{Prefix: "sk_test_", Last4: "0000"}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip(t, b, UnmarshalAccount, func(a *Account) []byte { return MarshalAccount(nil, a) })
	})
}

func FuzzRules(f *testing.F) {
	f.Add(MarshalRules(nil, nil))
	f.Add(MarshalRules(nil, []Rule{{Signal: "vpn", Action: "block"}, {Signal: "tor", Action: "review"}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip(t, b, UnmarshalRules, func(r []Rule) []byte { return MarshalRules(nil, r) })
	})
}

func FuzzPins(f *testing.F) {
	f.Add(MarshalPins(nil, nil))
	f.Add(MarshalPins(nil, []Pin{{IP: "203.0.113.7/32", Action: "allow", Label: "office"}, {VisitorID: "v1", Action: "block"}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip(t, b, UnmarshalPins, func(p []Pin) []byte { return MarshalPins(nil, p) })
	})
}

func FuzzUsage(f *testing.F) {
	f.Add(MarshalMonthCounts(nil, MonthCounts{Used: 300, Lookups: 5, Warned: 3}), MarshalTotals(nil, Totals{Evaluations: 1 << 40, LimitHits: 2}))
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1, 0, 0}, []byte{1})
	// Totals of version 2, with the hourly warning times (one never set).
	f.Add(MarshalMonthCounts(nil, MonthCounts{}), MarshalTotals(nil, Totals{Evaluations: 7, HourWarned: [2]int64{fuzzTime.UnixNano(), 0}}))
	f.Add(MarshalMonthCounts(nil, MonthCounts{}), MarshalTotals(nil, Totals{LimitHits: 1, HourWarned: [2]int64{fuzzTime.UnixNano(), math.MaxInt64}}))
	f.Add([]byte{1, 0, 0, 0}, []byte{2, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0})
	f.Fuzz(func(t *testing.T, counts, totals []byte) {
		roundTrip(t, counts, UnmarshalMonthCounts, func(c MonthCounts) []byte { return MarshalMonthCounts(nil, c) })
		roundTrip(t, totals, UnmarshalTotals, func(x Totals) []byte { return MarshalTotals(nil, x) })
	})
}

func FuzzEvent(f *testing.F) {
	f.Add(MarshalEvent(nil, &DeviceEvent{}))
	f.Add(MarshalEvent(nil, &DeviceEvent{ID: [EventIDLen]byte{0, 0, 0x51, 0x2c, 1}, Account: "acc_1", Created: fuzzTime, Origin: "https://shop.example",
		Addr: netip.MustParseAddr("2001:db8::1"), Schema: 1, Signals: []byte(`{"v":1}`), Flags: EventAutomation | EventComplete,
		Tampering: 2500, Checked: 7, VisitorID: "0123456789abcdef", Findings: []string{"webdriver"}, Uses: 2, FirstUse: fuzzTime}))
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip(t, b, UnmarshalEvent, func(e *DeviceEvent) []byte { return MarshalEvent(nil, e) })
	})
}

func FuzzSightings(f *testing.F) {
	f.Add(MarshalSightings(nil, &Sightings{FirstSeen: fuzzTime, LastSeen: fuzzTime.Add(time.Hour), TimesSeen: 42}))
	f.Fuzz(func(t *testing.T, b []byte) {
		dec := func(b []byte) (Sightings, error) { return UnmarshalSightings("v", b) }
		roundTrip(t, b, dec, func(h Sightings) []byte { return MarshalSightings(nil, &h) })
	})
}

// histRoundTrip fuzzes one device-history record kind.
func histRoundTrip(t *testing.T, b []byte, fresh func() HistRecord) {
	roundTrip(t, b, func(b []byte) (HistRecord, error) {
		r := fresh()
		return r, r.Unmarshal(b)
	}, func(r HistRecord) []byte { return r.Marshal(nil) })
}

func FuzzHistCustomerDevice(f *testing.F) {
	f.Add((&HistCustomerDevice{LastSeen: 1_790_000_000, Days: []DayVisits{{Day: 20714, N: 3, First: 1_789_999_000}},
		Hours: []HourCount{{Hour: 497_222, N: 2}}, Events: []uint64{1, 2}, Accounts: []SeenAccount{{Hash: AccountHash{1}, Last: 1_790_000_000}}}).Marshal(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		histRoundTrip(t, b, func() HistRecord { return &HistCustomerDevice{Customer: "acc_1", Device: "dev"} })
	})
}

func FuzzHistAccount(f *testing.F) {
	f.Add((&HistAccount{Sealed: []byte("sealed"), FirstCheck: 1_789_000_000, LastCheck: 1_790_000_000,
		Devices: []SeenDevice{{ID: "dev", Last: 1_790_000_000}}, Addrs: []SeenAddr{{Addr: netip.MustParseAddr("73.1.1.1"), Last: 1_790_000_000}}}).Marshal(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		histRoundTrip(t, b, func() HistRecord { return &HistAccount{Customer: "acc_1"} })
	})
}

func FuzzHistAddress(f *testing.F) {
	f.Add((&HistAddress{Accounts: []SeenAccount{{Hash: AccountHash{7}, Last: 1_790_000_000}}}).Marshal(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		histRoundTrip(t, b, func() HistRecord { return &HistAddress{Customer: "acc_1", Addr: netip.MustParseAddr("73.1.1.1")} })
	})
}

// FuzzExpiryKey fuzzes the device-history expiry index's key parser: what
// parses names a record whose index key parses back to the same reference.
func FuzzExpiryKey(f *testing.F) {
	for _, r := range []HistRecord{&HistCustomerDevice{Customer: "acc_1", Device: "dev"}, &HistAccount{Customer: "acc_1", Hash: AccountHash{3}},
		&HistAddress{Customer: "acc_2", Addr: netip.MustParseAddr("2001:db8::7")}} {
		f.Add(appendExpiryKey(nil, 20714, r))
	}
	// A 255-byte customer: its length byte plus one wrapped to 0 once.
	f.Add(append(append([]byte{prefixHistExpiry, 0, 0, 0x50, 0xea, byte(HistKindCustomerDevice), 255}, strings.Repeat("c", 255)...), "dev"...))
	f.Fuzz(func(t *testing.T, k []byte) {
		ref, ok := parseExpiryKey(k)
		if !ok {
			return
		}
		again, ok := parseExpiryKey(appendExpiryKey(nil, ref.Day, ref.Record()))
		if !ok || !reflect.DeepEqual(ref, again) {
			t.Fatalf("expiry key %x: %+v, then %+v %v", k, ref, again, ok)
		}
	})
}

func FuzzDelivery(f *testing.F) {
	f.Add(MarshalDelivery(nil, &Delivery{}))
	f.Add(MarshalDelivery(nil, &Delivery{Account: "acc_1", EventID: "0123456789abcdef0123456789abcdef", Event: "threat.detected", Attempt: 2,
		EventAt: fuzzTime, At: fuzzTime.Add(time.Minute), Duration: 120 * time.Millisecond, URL: "https://h.example/x", StatusCode: 500,
		Error: "HTTP 500", NextAt: fuzzTime.Add(9 * time.Minute)}))
	// A duration past int64: the encoder never writes one.
	huge := binary.AppendUvarint([]byte{deliveryVersion, 0, 0, 0, 0, 0, 0}, 1<<63+5)
	f.Add(append(huge, 0, 0, 0, 0))
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip(t, b, UnmarshalDelivery, func(d *Delivery) []byte { return MarshalDelivery(nil, d) })
	})
}

func FuzzMail(f *testing.F) {
	f.Add(MarshalMail(nil, &Mail{}))
	f.Add(MarshalMail(nil, &Mail{ID: "0a1b", At: fuzzTime, Account: "acc_1", To: "o@example.com", Kind: "usage_hourly_80",
		Subject: "Usage warning", Body: "800 of 1000", Status: "failed", Error: "dial tcp: refused"}))
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip(t, b, UnmarshalMail, func(m *Mail) []byte { return MarshalMail(nil, m) })
	})
}

func FuzzTrafficAndHealth(f *testing.F) {
	f.Add(MarshalTraffic(nil, TrafficCounts{Total: 100, Threats: 7, VPN: 3, Proxy: 2, DCH: 1}), MarshalHealth(nil, &HealthDay{Samples: 8640, APIOK: 8640, StorageOK: 8600, AuthOK: 8600, FeedsOK: 8640}))
	f.Fuzz(func(t *testing.T, traffic, health []byte) {
		roundTrip(t, traffic, UnmarshalTraffic, func(c TrafficCounts) []byte { return MarshalTraffic(nil, c) })
		roundTrip(t, health, UnmarshalHealth, func(d HealthDay) []byte { return MarshalHealth(nil, &d) })
	})
}

// FuzzGPUSample: a sealed sample opens to what was sealed, and arbitrary
// keys and values never panic the opener.
func FuzzGPUSample(f *testing.F) {
	block, err := aes.NewCipher(make([]byte, 32))
	if err != nil {
		f.Fatal(err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		f.Fatal(err)
	}
	f.Add("acc_1", []byte("0123456789abcdef"), "visitor-1", int64(1_790_000_000), []byte{0x3f, 0x80, 0, 0}, []byte{0x35, 1}, []byte{1})
	f.Fuzz(func(t *testing.T, customer string, device []byte, visitor string, last int64, feats, key, val []byte) {
		_, _ = OpenGPUSample(aead, key, val)
		s := &GPUSample{Customer: customer, Visitor: visitor, Last: time.Unix(last, 0).UTC()}
		copy(s.Device[:], device)
		for i := range s.Features {
			if 4*i+4 <= len(feats) {
				s.Features[i] = math.Float32frombits(binary.BigEndian.Uint32(feats[4*i:]))
			}
		}
		k, v, err := SealGPUSample(aead, s)
		if err != nil {
			return // customer or visitor out of bounds
		}
		got, err := OpenGPUSample(aead, k, v)
		if err != nil {
			t.Fatalf("sealed sample does not open: %v", err)
		}
		if got.Customer != s.Customer || got.Device != s.Device || got.Visitor != s.Visitor || !got.Last.Equal(s.Last) {
			t.Fatalf("opened %+v, sealed %+v", got, s)
		}
		for i := range s.Features {
			if math.Float32bits(got.Features[i]) != math.Float32bits(s.Features[i]) {
				t.Fatalf("feature %d: %v, sealed %v", i, got.Features[i], s.Features[i])
			}
		}
	})
}
