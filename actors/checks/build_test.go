package checks

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/actors/devicehist"
	"github.com/fraudd/fraudd/actors/events"
	"github.com/fraudd/fraudd/intel/device"
	"github.com/fraudd/fraudd/intel/score"
	"github.com/fraudd/fraudd/internal/secrets"
	"github.com/fraudd/fraudd/wire"
)

func encodeBody(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func newDeviceHist(t testing.TB) *devicehist.Client {
	t.Helper()
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	c, err := devicehist.New(sys.Root, devicehist.Config{Shards: 2, Secret: secrets.FromBytes([]byte("unit"))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	return c
}

// TestAccountObjectShape pins the `account` object's keys, their order and
// its nulls.
func TestAccountObjectShape(t *testing.T) {
	var b histBlock
	full := devicehist.Facts{Device: true, Account: true, DeviceAccounts24h: 3, AccountDevices24h: 2, IPAccounts24h: 4, IPCounted: true, NewDevice: true, RelatedAccounts90d: 5}
	if got, want := encodeBody(t, b.account(&full, true)),
		`{"accounts_24h_on_this_device":3,"devices_24h_for_this_account":2,"accounts_24h_from_this_ip":4,"new_device":true,"related_accounts_90d":5}`; got != want {
		t.Fatalf("full:\n got %s\nwant %s", got, want)
	}
	bare := devicehist.Facts{Account: true, AccountDevices24h: 1}
	if got, want := encodeBody(t, b.account(&bare, true)),
		`{"accounts_24h_on_this_device":null,"devices_24h_for_this_account":1,"accounts_24h_from_this_ip":null,"new_device":null,"related_accounts_90d":0}`; got != want {
		t.Fatalf("no device, shared exit:\n got %s\nwant %s", got, want)
	}
	if b.account(&full, false) != nil || b.account(&devicehist.Facts{Device: true}, true) != nil {
		t.Fatal("account object without a live key or an accountId")
	}
	if a := scoreAccount(&full, true); a != (score.Account{DeviceAccounts24h: 3, AccountDevices24h: 2, IPAccounts24h: 4, NewDevice: true}) {
		t.Fatalf("score account: %+v", a)
	}
	if a := scoreAccount(&full, false); a != (score.Account{}) {
		t.Fatalf("score account off a live key: %+v", a)
	}
	if a := scoreAccount(&bare, true); a != (score.Account{AccountDevices24h: 1}) {
		t.Fatalf("score account without device or address: %+v", a)
	}
}

func TestDeviceHistoryFields(t *testing.T) {
	var b histBlock
	f := devicehist.Facts{Device: true, Account: true, LinkedAccounts: 2, Visits24h: 3,
		History: devicehist.History{Visits: 3, FirstSeen: fixedNow.Add(-2 * time.Hour), LastSeen: fixedNow, Accounts: 2}}
	var d wire.EvalDevice
	h := b.device(&d, &f)
	if d.LinkedAccounts == nil || *d.LinkedAccounts != 2 || !d.MultiAccount {
		t.Fatalf("device fields: %+v", d)
	}
	if got, want := encodeBody(t, h),
		`{"visits":3,"returning":true,"first_seen":"2026-11-22T10:00:00Z","last_seen":"2026-11-22T12:00:00Z","accounts":2,"window_days":90}`; got != want {
		t.Fatalf("customer_history:\n got %s\nwant %s", got, want)
	}
	// Without an accountId: no linked_accounts, no multi_account.
	f.Account = false
	if b.device(&d, &f); d.LinkedAccounts != nil || d.MultiAccount {
		t.Fatalf("without account: %+v", d)
	}
	// Without device-history facts (observe failed): no customer_history.
	if h := b.device(&d, &devicehist.Facts{}); h != nil {
		t.Fatal("customer_history without facts")
	}

	var in score.Input
	in.Device.Present = true
	f = devicehist.Facts{Device: true, Account: true, LinkedAccounts: 2, Visits24h: devicehist.HighActivityVisits24h}
	applyHistory(&in, &f, true, 1, fixedNow, fixedNow)
	if !in.Device.HighActivity || !in.Device.MultiAccount {
		t.Fatalf("score device: %+v", in.Device)
	}
	f.Visits24h, f.LinkedAccounts = 1, 1
	applyHistory(&in, &f, true, devicehist.HighActivityDaily, fixedNow.Add(-time.Hour), fixedNow)
	if !in.Device.HighActivity || in.Device.MultiAccount {
		t.Fatalf("global high activity: %+v", in.Device)
	}
}

// TestDeviceSightingsFields: times_seen, first_seen and returning come from
// the device's global sightings alone, written once.
func TestDeviceSightingsFields(t *testing.T) {
	ev := getEvaluation()
	defer ev.Release()
	ev.in.Device = score.Device{Present: true, VisitorID: "v1"}
	ev.seen = deviceSeen{checked: []string{"automation"}, timesSeen: 7, firstSeen: time.Date(2026, 10, 1, 8, 0, 0, 0, time.FixedZone("x", 3600))}
	ev.opts.seen = &ev.seen
	score.Evaluate(&ev.in, &ev.res)
	ev.build()
	d := ev.Body().Device
	if d.TimesSeen != 7 || d.FirstSeen != "2026-10-01T07:00:00Z" || !d.Returning || d.LinkedAccounts != nil || d.CustomerHistory != nil {
		t.Fatalf("without history: %+v", d)
	}
	ev.histFacts = devicehist.Facts{Device: true, Account: true, LinkedAccounts: 2, History: devicehist.History{Visits: 1, FirstSeen: fixedNow, LastSeen: fixedNow}}
	ev.opts.hist = &ev.histFacts
	ev.build()
	d = ev.Body().Device
	if d.TimesSeen != 7 || d.FirstSeen != "2026-10-01T07:00:00Z" || d.LinkedAccounts == nil || *d.LinkedAccounts != 2 || d.CustomerHistory == nil {
		t.Fatalf("with history: %+v", d)
	}
}

// observeDevice runs the history step of a chain alone for the request's
// evidence: the device id is the resolved event's visitor id.
func (ts *testService) observeDevice(c *Call, eventID, deviceID, accountID string, n *score.Network) (devicehist.Facts, error) {
	ch := ts.newChain(c, evalToken)
	defer ch.release()
	ch.obs = observation(c, eventID, accountID, n)
	if err := ts.chHistory.Prepare(ch.obs, &ch.observe); err != nil {
		return devicehist.Facts{}, err
	}
	ch.obs.DeviceID = deviceID
	ch.observe.SetDevice(deviceID)
	ch.observeP = true
	ch.toObserve()
	if !ch.wait() {
		return devicehist.Facts{}, errors.New("no answer")
	}
	return ch.facts, ch.histErr
}

func TestObserveDeviceFromRequest(t *testing.T) {
	ts := newTestService(t, Config{History: newDeviceHist(t)})
	c := ts.call(accounts.KeyLive)
	n := score.Network{IP: netip.MustParseAddr("73.5.5.5")}
	f, err := ts.observeDevice(c, "ev_1", "visitor1", "user-1", &n)
	if err != nil || !f.Device || !f.Account || !f.IPCounted || f.History.Visits != 1 {
		t.Fatalf("live: %v %+v", err, f)
	}
	// A VPN exit is not counted; the test key records nothing.
	n.VPN = true
	c.Auth.Kind = accounts.KeyTest
	f, err = ts.observeDevice(c, "ev_2", "visitor1", "user-2", &n)
	if err != nil || f.IPCounted || f.History.Visits != 2 || f.LinkedAccounts != 2 {
		t.Fatalf("test key on a VPN: %v %+v", err, f)
	}
	c.Auth.Kind = accounts.KeyLive
	n = score.Network{Degraded: true}
	if f, _ = ts.observeDevice(c, "ev_3", "visitor1", "user-1", &n); f.History.Visits != 2 || f.LinkedAccounts != 1 || f.IPCounted {
		t.Fatalf("degraded: %+v", f)
	}
	if f, err = ts.observeDevice(c, "", "", "", &n); err != nil || f != (devicehist.Facts{}) {
		t.Fatalf("nothing sent: %v %+v", err, f)
	}
}

// TestHistBlockAllocs: filling the wire shapes allocates nothing.
func TestHistBlockAllocs(t *testing.T) {
	var b histBlock
	var d wire.EvalDevice
	f := devicehist.Facts{Device: true, Account: true, LinkedAccounts: 2, IPCounted: true,
		History: devicehist.History{Visits: 3, FirstSeen: fixedNow, LastSeen: fixedNow, Accounts: 2}}
	if n := testing.AllocsPerRun(100, func() {
		b.device(&d, &f)
		b.account(&f, true)
	}); n != 0 {
		t.Fatalf("%.0f allocations", n)
	}
}

// TestSDKBlockedAddressNotCounted: SPEC 2.2 account: "accounts from this
// address in 24 h (null when unmeasured or a shared exit ...; 3 or more adds
// `ip_many_accounts`)"; network.sdk_blocked: "a token arrived but
// measurement failed (reported address private, missing or the network
// check's own infrastructure)". Such an address is unmeasured: not counted,
// null, and no ip_many_accounts.
func TestSDKBlockedAddressNotCounted(t *testing.T) {
	ts := newTestService(t, Config{History: newDeviceHist(t)})
	c := ts.call(accounts.KeyLive)
	for _, ip := range []string{"10.0.0.5", "73.9.9.9"} { // private; the check's own infrastructure
		n := score.Network{IP: netip.MustParseAddr(ip), SDKBlocked: true}
		var f devicehist.Facts
		for _, acct := range []string{"user-1", "user-2", "user-3"} {
			var err error
			if f, err = ts.observeDevice(c, "", "", acct, &n); err != nil {
				t.Fatal(err)
			}
		}
		var b histBlock
		if a := b.account(&f, true); a == nil || a.AccountsFromIP24h != nil {
			t.Errorf("%s: sdk_blocked address counted: %+v", ip, f)
		}
		in := score.Input{Network: n, Account: scoreAccount(&f, true)}
		var res score.Result
		score.Evaluate(&in, &res)
		if res.Reasons.Has(score.ReasonIPManyAccounts) {
			t.Errorf("%s: ip_many_accounts on an unmeasured address: %+v", ip, f)
		}
	}
}

// TestCheckedSignalsListHistory: device.checked_signals lists the device
// booleans actually checked (SPEC 2.2); high_activity is checked whenever
// the history was read, multi_account when an accountId came with the
// device, and a sample lists them as a live answer does.
func TestCheckedSignalsListHistory(t *testing.T) {
	evs := shortChainWithEvents(t)
	ts := newTestService(t, Config{Events: evs, History: newDeviceHist(t)})
	all := device.AllChecked &^ device.CheckIncognito
	for _, c := range []struct {
		account string
		want    []string
	}{
		{"", []string{"automation", "antidetect", "emulator", "virtual_machine", "privacy_mode", "ip_blocklisted", "high_activity"}},
		{"user-1", []string{"automation", "antidetect", "emulator", "virtual_machine", "privacy_mode", "ip_blocklisted", "high_activity", "multi_account"}},
	} {
		id, err := evs.Collect(events.Collected{Account: ts.accounts.view.ID, Now: fixedNow,
			Verdict: &device.Verdict{VisitorID: "v-checked", Complete: true, Checked: all}})
		if err != nil {
			t.Fatal(err)
		}
		ev, ref := ts.Evaluate(ts.call(accounts.KeyLive), &EvalRequest{FingerprintEventID: events.FormatEventID(id), AccountID: c.account})
		if ref != nil {
			t.Fatalf("refused %+v", ref)
		}
		d := ev.Body().Device
		if d == nil || ev.opts.hist == nil {
			t.Fatalf("device %+v, history read %v", d, ev.opts.hist != nil)
		}
		if !slices.Equal(d.CheckedSignals, c.want) {
			t.Errorf("accountId %q: checked_signals %v, want %v", c.account, d.CheckedSignals, c.want)
		}
		ev.Release()
	}
	sample, _ := ts.Sample("clean")
	defer sample.Release()
	want := []string{"automation", "antidetect", "emulator", "virtual_machine", "incognito", "privacy_mode", "ip_blocklisted", "high_activity"}
	if got := sample.Body().Device.CheckedSignals; !slices.Equal(got, want) {
		t.Errorf("sample checked_signals %v, want %v", got, want)
	}
}

// TestResubmittedEventCountsOnceInHistory: an event resubmitted after more
// newer events than the device's history keeps ids of is a replay to the
// events actor, and adds no visit to customer_history (SPEC 2.2: "repeated
// submissions count once").
func TestResubmittedEventCountsOnceInHistory(t *testing.T) {
	evs := shortChainWithEvents(t)
	ts := newTestService(t, Config{Events: evs, History: newDeviceHist(t)})
	var first string
	visits := func(id string) (int, bool) {
		ev, ref := ts.Evaluate(ts.call(accounts.KeyLive), &EvalRequest{FingerprintEventID: id})
		if ref != nil {
			t.Fatalf("refused %+v", ref)
		}
		defer ev.Release()
		d := ev.Body().Device
		if d == nil || d.CustomerHistory == nil {
			t.Fatalf("no customer_history: %+v", d)
		}
		b := ev.Body()
		return d.CustomerHistory.Visits, b.Evidence != nil && b.Evidence.DeviceReplayed != nil && *b.Evidence.DeviceReplayed
	}
	for i := range 40 {
		id := collectEvent(t, evs, ts, "v-resubmit")
		if i == 0 {
			first = id
		}
		if n, _ := visits(id); n != i+1 {
			t.Fatalf("event %d: visits %d", i+1, n)
		}
	}
	if n, replayed := visits(first); n != 40 || !replayed {
		t.Fatalf("the first event resubmitted after 39 others: visits %d (want 40), device_replayed %v", n, replayed)
	}
}

// TestTestKeyUseLeavesLiveHistory: the personal test key's evaluation of an
// event is test traffic, which customer_history excludes (SPEC 2.2:
// "excludes test-key traffic"): the live evaluation of the same event
// afterwards is its first live use — not a replay, a visit counted, and its
// account linked for good (a device record without a visit lost its links
// on the next observation).
func TestTestKeyUseLeavesLiveHistory(t *testing.T) {
	evs := shortChainWithEvents(t)
	ts := newTestService(t, Config{Events: evs, History: newDeviceHist(t)})
	eval := func(kind accounts.KeyKind, id, user string) (visits int, replayed bool, linked int64) {
		t.Helper()
		ev, ref := ts.Evaluate(ts.call(kind), &EvalRequest{FingerprintEventID: id, AccountID: user})
		if ref != nil {
			t.Fatalf("refused %+v", ref)
		}
		defer ev.Release()
		b := ev.Body()
		d := b.Device
		if d == nil || d.CustomerHistory == nil || d.LinkedAccounts == nil {
			t.Fatalf("no customer_history: %+v", d)
		}
		return d.CustomerHistory.Visits, b.Evidence != nil && b.Evidence.DeviceReplayed != nil && *b.Evidence.DeviceReplayed, *d.LinkedAccounts
	}
	first := collectEvent(t, evs, ts, "v-testkey")
	if n, replayed, _ := eval(accounts.KeyTest, first, "user-1"); n != 1 || replayed {
		t.Fatalf("test key, first use: visits %d, device_replayed %v", n, replayed)
	}
	if n, replayed, linked := eval(accounts.KeyLive, first, "user-1"); n != 1 || replayed || linked != 1 {
		t.Fatalf("live key after the test key: visits %d (want 1), device_replayed %v (want false), linked %d", n, replayed, linked)
	}
	if n, replayed, linked := eval(accounts.KeyLive, collectEvent(t, evs, ts, "v-testkey"), "user-2"); n != 2 || replayed || linked != 2 {
		t.Fatalf("live key, second event: visits %d (want 2), device_replayed %v, linked %d (want 2)", n, replayed, linked)
	}
	if _, replayed, _ := eval(accounts.KeyLive, first, "user-1"); !replayed {
		t.Fatal("the live key's second use of an event is not a replay")
	}
}
