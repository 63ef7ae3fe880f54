package devicehist

import (
	"net/netip"
	"testing"
	"time"

	"github.com/fraudd/fraudd/storage"
)

var t0 = time.Date(2026, 11, 10, 9, 30, 0, 0, time.UTC)

// world is one customer's records as plain maps: the state logic without
// actors, shards or a store.
type world struct {
	devices   map[string]*storage.HistCustomerDevice
	accounts  map[storage.AccountHash]*storage.HistAccount
	addresses map[netip.Addr]*storage.HistAddress
	seen      map[storage.AccountHash]struct{}
	now       int64
}

func newWorld() *world {
	return &world{
		devices:   map[string]*storage.HistCustomerDevice{},
		accounts:  map[storage.AccountHash]*storage.HistAccount{},
		addresses: map[netip.Addr]*storage.HistAddress{},
		seen:      map[storage.AccountHash]struct{}{},
	}
}

func (w *world) customerDevice(id string) *storage.HistCustomerDevice {
	r := w.devices[id]
	if r != nil {
		trimDevice(r, w.now)
	}
	return r
}

func (w *world) address(a netip.Addr) *storage.HistAddress {
	r := w.addresses[a]
	if r != nil {
		trimAddress(r, w.now)
	}
	return r
}

func acct(b byte) storage.AccountHash { return storage.AccountHash{b} }

// obs applies one observation at now; dev "" is no device, acc 0 no account,
// ip invalid no (countable) address.
func (w *world) obs(now time.Time, ev uint64, dev string, acc byte, ip netip.Addr) Facts {
	w.now = now.Unix()
	var (
		cd *storage.HistCustomerDevice
		ac *storage.HistAccount
		ad *storage.HistAddress
	)
	if dev != "" {
		if cd = w.devices[dev]; cd == nil {
			cd = &storage.HistCustomerDevice{Customer: "c", Device: dev}
			w.devices[dev] = cd
		}
	}
	if acc != 0 {
		h := acct(acc)
		if ac = w.accounts[h]; ac == nil {
			ac = &storage.HistAccount{Customer: "c", Hash: h}
			w.accounts[h] = ac
		}
		if ip.IsValid() {
			if ad = w.addresses[ip]; ad == nil {
				ad = &storage.HistAddress{Customer: "c", Addr: ip}
				w.addresses[ip] = ad
			}
		}
	}
	return step(&stepIn{now: w.now, ev: ev, acct: acct(acc)}, cd, ac, ad, w, w.seen)
}

var (
	ip1 = netip.MustParseAddr("73.1.1.1")
	ip2 = netip.MustParseAddr("73.2.2.2")
	ip3 = netip.MustParseAddr("2001:db8:1::7")
)

func TestCustomerHistoryVisitsAndDedupe(t *testing.T) {
	w := newWorld()
	f := w.obs(t0, 1, "d1", 0, netip.Addr{})
	if !f.Device || f.Account || f.Repeated || f.History != (History{Visits: 1, FirstSeen: t0, LastSeen: t0}) || f.History.Returning() || f.Visits24h != 1 {
		t.Fatalf("first visit: %+v", f)
	}
	// The same event again (a retried evaluate) counts once.
	f = w.obs(t0.Add(time.Minute), 1, "d1", 0, netip.Addr{})
	if !f.Repeated || f.History.Visits != 1 || !f.History.LastSeen.Equal(t0) {
		t.Fatalf("repeat: %+v", f)
	}
	// Without an event id nothing can be deduplicated.
	f = w.obs(t0.Add(2*time.Minute), 0, "d1", 0, netip.Addr{})
	if f.Repeated || f.History.Visits != 2 || !f.History.Returning() {
		t.Fatalf("no event id: %+v", f)
	}
	f = w.obs(t0.Add(3*time.Minute), 2, "d1", 0, netip.Addr{})
	if f.History.Visits != 3 || !f.History.LastSeen.Equal(t0.Add(3*time.Minute)) || !f.History.FirstSeen.Equal(t0) {
		t.Fatalf("third: %+v", f)
	}
	// The ring remembers the last maxEvents ids.
	for i := 0; i < maxEvents; i++ {
		w.obs(t0.Add(4*time.Minute), uint64(100+i), "d1", 0, netip.Addr{})
	}
	if f = w.obs(t0.Add(5*time.Minute), 100, "d1", 0, netip.Addr{}); !f.Repeated {
		t.Fatal("id within the ring counted again")
	}
	if f = w.obs(t0.Add(5*time.Minute), 2, "d1", 0, netip.Addr{}); f.Repeated {
		t.Fatal("id pushed out of the ring still remembered")
	}
	if n := len(w.devices["d1"].Events); n != maxEvents {
		t.Fatalf("ring holds %d", n)
	}
	// Devices are per customer-device: another device starts fresh.
	if f = w.obs(t0, 1, "d2", 0, netip.Addr{}); f.History.Visits != 1 || f.Repeated {
		t.Fatalf("other device: %+v", f)
	}
}

func TestVisitWindows(t *testing.T) {
	w := newWorld()
	for i := 0; i < 5; i++ { // five visits over five days
		w.obs(t0.Add(time.Duration(i)*24*time.Hour), uint64(i+1), "d", 0, netip.Addr{})
	}
	// 24 h: the current hour and the 23 before it.
	at := t0.Add(4 * 24 * time.Hour)
	if f := w.obs(at.Add(23*time.Hour), 10, "d", 0, netip.Addr{}); f.Visits24h != 2 || f.History.Visits != 6 {
		t.Fatalf("23 h later: %+v", f)
	}
	if f := w.obs(at.Add(24*time.Hour+31*time.Minute), 11, "d", 0, netip.Addr{}); f.Visits24h != 2 {
		t.Fatalf("24 h later the first drops out: %+v", f)
	}
	// 90 days: a day bucket stays while any part of it is within 90 days.
	day90 := t0.Add(90 * 24 * time.Hour)
	f := w.obs(day90, 20, "d", 0, netip.Addr{})
	if f.History.Visits != 8 || !f.History.FirstSeen.Equal(t0) {
		t.Fatalf("day 90, same day as the first visit: %+v", f)
	}
	midnight := time.Date(t0.Year(), t0.Month(), t0.Day()+91, 0, 0, 0, 0, time.UTC)
	f = w.obs(midnight, 21, "d", 0, netip.Addr{})
	if f.History.Visits != 8 || !f.History.FirstSeen.Equal(t0.Add(24*time.Hour)) {
		t.Fatalf("the first day left the window: %+v", f)
	}
	// Unseen for a whole window: the record starts over.
	f = w.obs(midnight.Add(95*24*time.Hour), 22, "d", 0, netip.Addr{})
	if f.History.Visits != 1 || !f.History.FirstSeen.Equal(midnight.Add(95*24*time.Hour)) || f.History.Returning() {
		t.Fatalf("after 95 quiet days: %+v", f)
	}
	if cd := w.devices["d"]; len(cd.Days) != 1 || len(cd.Events) != 1 || len(cd.Hours) != 1 {
		t.Fatalf("old buckets kept: %+v", cd)
	}
}

func TestAccountCounts(t *testing.T) {
	w := newWorld()
	// Account 1 on device A from ip1.
	f := w.obs(t0, 1, "A", 1, ip1)
	want := Facts{Device: true, History: History{Visits: 1, FirstSeen: t0, LastSeen: t0, Accounts: 1}, Visits24h: 1, LinkedAccounts: 1,
		Account: true, DeviceAccounts24h: 1, AccountDevices24h: 1, IPAccounts24h: 1, IPCounted: true}
	if f != want {
		t.Fatalf("first:\n got %+v\nwant %+v", f, want)
	}
	// Account 2 on the same device and address: 2 accounts on the device
	// and the address; account 2 has one device; 1 related account.
	f = w.obs(t0.Add(time.Hour), 2, "A", 2, ip1)
	if f.DeviceAccounts24h != 2 || f.LinkedAccounts != 2 || f.AccountDevices24h != 1 || f.IPAccounts24h != 2 || f.NewDevice || f.RelatedAccounts90d != 1 {
		t.Fatalf("second account: %+v", f)
	}
	// Account 1 on a new device B from ip2: new device, 2 devices in 24 h;
	// related: account 2 (shared device A).
	f = w.obs(t0.Add(2*time.Hour), 3, "B", 1, ip2)
	if !f.NewDevice || f.AccountDevices24h != 2 || f.DeviceAccounts24h != 1 || f.IPAccounts24h != 1 || f.RelatedAccounts90d != 1 {
		t.Fatalf("new device: %+v", f)
	}
	// Back on A: not new.
	if f = w.obs(t0.Add(3*time.Hour), 4, "A", 1, ip1); f.NewDevice {
		t.Fatalf("known device called new: %+v", f)
	}
	// Account 3 only shares address ip2 with account 1: related via address.
	f = w.obs(t0.Add(4*time.Hour), 5, "C", 3, ip2)
	if f.RelatedAccounts90d != 1 || f.NewDevice {
		t.Fatalf("account 3: %+v", f)
	}
	// Account 1 now relates to 2 (device A) and 3 (address ip2).
	if f = w.obs(t0.Add(5*time.Hour), 6, "A", 1, ip1); f.RelatedAccounts90d != 2 {
		t.Fatalf("account 1 related: %+v", f)
	}
	// Without device evidence: device counts absent, account counts kept.
	f = w.obs(t0.Add(6*time.Hour), 0, "", 1, netip.Addr{})
	if f.Device || f.NewDevice || f.DeviceAccounts24h != 0 || f.AccountDevices24h != 2 || f.IPCounted || f.RelatedAccounts90d != 2 {
		t.Fatalf("no device, no address: %+v", f)
	}
	// A first check without a device is not a new device later on either
	// device: the account was never seen on another device.
	w.obs(t0.Add(7*time.Hour), 0, "", 9, ip3)
	if f = w.obs(t0.Add(8*time.Hour), 7, "Z", 9, ip3); f.NewDevice || f.AccountDevices24h != 1 {
		t.Fatalf("first device of a known account: %+v", f)
	}

	// 24 h later the 24 h counts fall back; 90-day ones stay.
	later := t0.Add(5*time.Hour + 24*time.Hour)
	f = w.obs(later, 8, "A", 1, ip1)
	if f.DeviceAccounts24h != 1 || f.AccountDevices24h != 1 || f.IPAccounts24h != 1 || f.LinkedAccounts != 2 || f.RelatedAccounts90d != 2 {
		t.Fatalf("a day later: %+v", f)
	}
	// 90 days after account 2 and 3 were last seen, the links are gone.
	f = w.obs(t0.Add(4*time.Hour+90*24*time.Hour), 9, "A", 1, ip1)
	if f.LinkedAccounts != 1 || f.RelatedAccounts90d != 0 || f.IPAccounts24h != 1 {
		t.Fatalf("90 days on: %+v", f)
	}
	// The device B link of account 1 expired too: B is "new" again? No —
	// account 1 was last on B 90+ days ago, so B is not remembered, and
	// account 1 was seen on another device (A): new device.
	if f = w.obs(t0.Add(4*time.Hour+90*24*time.Hour+time.Minute), 10, "B", 1, ip2); !f.NewDevice {
		t.Fatalf("device forgotten after 90 days: %+v", f)
	}
}

func TestAccountRecordExpires(t *testing.T) {
	w := newWorld()
	w.obs(t0, 1, "A", 1, ip1)
	ac := w.accounts[acct(1)]
	ac.Sealed = []byte("sealed")
	if !trimAccount(ac, t0.Add(90*24*time.Hour-time.Second).Unix()) || len(ac.Sealed) == 0 {
		t.Fatal("account dropped before 90 days")
	}
	if trimAccount(ac, t0.Add(90*24*time.Hour).Unix()) || ac.Sealed != nil || ac.LastCheck != 0 || len(ac.Devices)+len(ac.Addrs) != 0 {
		t.Fatalf("account kept 90 days after its last check: %+v", ac)
	}
	ad := w.addresses[ip1]
	if !trimAddress(ad, t0.Add(90*24*time.Hour-time.Second).Unix()) || trimAddress(ad, t0.Add(90*24*time.Hour).Unix()) {
		t.Fatal("address links: 90 days exactly")
	}
}

func TestLinkBounds(t *testing.T) {
	var ls []storage.SeenAccount
	now := t0.Unix()
	for i := 0; i < maxLinks+10; i++ {
		ls = linkAccount(ls, storage.AccountHash{byte(i), byte(i >> 8)}, now+int64(i))
	}
	if len(ls) != maxLinks {
		t.Fatalf("%d links", len(ls))
	}
	for _, l := range ls {
		if l.Last < now+10 {
			t.Fatal("an oldest link survived")
		}
	}
	var ds []storage.SeenDevice
	for i := 0; i < maxAccountDevices+3; i++ {
		ds = seeDevice(ds, string(rune('a'+i)), now+int64(i))
	}
	if len(ds) != maxAccountDevices {
		t.Fatalf("%d devices", len(ds))
	}
	var as []storage.SeenAddr
	for i := 0; i < maxAccountAddrs+3; i++ {
		as = seeAddr(as, netip.AddrFrom4([4]byte{73, 0, 0, byte(i)}), now+int64(i))
	}
	if len(as) != maxAccountAddrs {
		t.Fatalf("%d addresses", len(as))
	}
}

func TestClockBackwards(t *testing.T) {
	w := newWorld()
	w.obs(t0, 1, "d", 0, netip.Addr{})
	f := w.obs(t0.Add(-48*time.Hour), 2, "d", 0, netip.Addr{})
	cd := w.devices["d"]
	if f.History.Visits != 2 || len(cd.Days) != 1 || len(cd.Hours) != 1 || !f.History.LastSeen.Equal(t0) {
		t.Fatalf("a clock set back: %+v %+v", f, cd)
	}
}

func TestHighActivity(t *testing.T) {
	now := t0
	for _, tc := range []struct {
		visits int
		times  int64
		first  time.Time
		want   bool
	}{
		{0, 0, time.Time{}, false},
		{HighActivityVisits24h - 1, 0, time.Time{}, false},
		{HighActivityVisits24h, 0, time.Time{}, true},
		{1, HighActivityDaily - 1, now, false},
		{1, HighActivityDaily, now, true},                                        // within its first day
		{1, HighActivityDaily, now.Add(-36 * time.Hour), false},                  // second day: needs 2×
		{1, 2 * HighActivityDaily, now.Add(-36 * time.Hour), true},               //
		{1, 10 * HighActivityDaily, now.Add(-80 * 24 * time.Hour), false},        // a busy device long known
		{1, HighActivityDaily * 100, now.Add(-80 * 24 * time.Hour), true},        // far above the daily average
		{1, HighActivityDaily * 100, time.Time{}, false},                         // unknown first sighting
		{HighActivityVisits24h, 1, now.Add(-80 * 24 * time.Hour), true},          // the customer's own burst
		{1, HighActivityDaily, now.Add(time.Hour), true},                         // first_seen after now (clock skew)
		{1, HighActivityDaily - 1, now.Add(-2 * time.Hour), false},               //
		{1, 3 * HighActivityDaily, now.Add(-3*24*time.Hour + time.Minute), true}, //
	} {
		if got := HighActivity(tc.visits, tc.times, tc.first, now); got != tc.want {
			t.Errorf("HighActivity(%d, %d, %v) = %v", tc.visits, tc.times, tc.first, got)
		}
	}
}
