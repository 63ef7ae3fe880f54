package checks

import (
	"net/netip"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/actors/recent"
	"github.com/fraudd/fraudd/actors/webhook"
	"github.com/fraudd/fraudd/intel/score"
	"github.com/fraudd/fraudd/storage"
)

func TestWebhookEventMirrorsEvaluation(t *testing.T) {
	now := time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)
	rule := func(sig, act string) score.Rule {
		r, err := score.ParseRule(sig, act)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	pin := func(ip, act, label string) score.Pin {
		p, err := score.ParsePin(ip, "", act, label)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	addr := netip.MustParseAddr("198.51.100.4")
	cases := []struct {
		name string
		in   score.Input
		want *webhook.Event // nil: no webhook
	}{
		{"clean", score.Input{Network: score.Network{IP: addr, Country: "NL"}}, nil},
		{"degraded allow", score.Input{Network: score.Network{Degraded: true}}, nil},
		{"tor", score.Input{Network: score.Network{IP: addr, Country: "NL", Tor: true}},
			&webhook.Event{IP: "198.51.100.4", ThreatType: "Tor", Details: webhook.Details{Country: "NL", Tor: true, Decision: "block"}}},
		{"privacy relay", score.Input{Network: score.Network{IP: addr, Proxy: true, PrivacyRelay: true}},
			&webhook.Event{IP: "198.51.100.4", ThreatType: "Privacy relay", Details: webhook.Details{Proxied: true, PrivacyRelay: true, Decision: "review"}}},
		{"datacenter with an emulator", score.Input{Network: score.Network{IP: addr, Datacenter: true}, Device: score.Device{Present: true, Emulator: true, VirtualMachine: true}},
			&webhook.Event{IP: "198.51.100.4", ThreatType: "Datacenter with tampering", Details: webhook.Details{DCH: true, Tampering: true, VirtualMachine: true, Decision: "block"}}},
		{"bot with antidetect", score.Input{Network: score.Network{IP: addr}, Device: score.Device{Present: true, Automation: true, Antidetect: true}},
			&webhook.Event{IP: "198.51.100.4", ThreatType: "Bot", Details: webhook.Details{Bot: true, Antidetect: true, Tampering: true, Decision: "block"}}},
		{"degraded rule block", score.Input{Network: score.Network{Degraded: true, Tor: true}, Email: score.Email{Sent: true, Disposable: true},
			Policy: score.Policy{Rules: []score.Rule{rule("disposable_email", "block")}}},
			&webhook.Event{IP: "unknown", ThreatType: "Custom rule (disposable_email)", Details: webhook.Details{Decision: "block", RuleMatched: []string{"disposable_email"}}}},
		{"pin block", score.Input{Network: score.Network{IP: addr, VPN: true}, Policy: score.Policy{Pins: []score.Pin{pin("198.51.100.0/24", "block", "ring")}}},
			&webhook.Event{IP: "198.51.100.4", ThreatType: "Customer exception (ring)", Details: webhook.Details{VPN: true, Decision: "block", ExceptionMatched: []string{"ring"}}}},
	}
	for _, c := range cases {
		var res score.Result
		score.Evaluate(&c.in, &res)
		got, ok := webhookEvent("acc_1", now, &c.in, &res)
		if c.want == nil {
			if ok {
				t.Errorf("%s: fired %+v", c.name, got)
			}
			continue
		}
		c.want.Account, c.want.At = "acc_1", now
		if !ok || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.want)
		}
	}
}

// recents keeps what the record stage hands the console's recent list.
type recents struct {
	mu      sync.Mutex
	entries []recent.Entry
}

func (r *recents) Record(e recent.Entry) {
	r.mu.Lock()
	r.entries = append(r.entries, e)
	r.mu.Unlock()
}

// TestRecentEvaluationsRecorded: the recent list is stored, so it gets the
// answered visitor checks of an account, the personal test key's marked
// test (SPEC §5.2: "stores events flagged as test"), and nothing SPEC says
// is never stored: not a test token's (2.9: "never billed, ... stored or
// webhooked"), not the bare degraded allow (2.8.6: "omitted from evaluation
// totals and stored events"); nor a refused one, a 400, the sandbox or a
// sample.
func TestRecentEvaluationsRecorded(t *testing.T) {
	rec := &recents{}
	ts := newTestService(t, Config{Recent: rec})
	pin, err := score.ParsePin("89.187.178.24", "", "allow", "office")
	if err != nil {
		t.Fatal(err)
	}
	ts.accounts.view.Policy = score.Policy{Pins: []score.Pin{pin}}
	answer := func(kind accounts.KeyKind, req EvalRequest, id string) {
		t.Helper()
		c := ts.call(kind)
		copy(c.RequestID[:], id)
		req.TokenSent = req.Token != ""
		ev, ref := ts.Evaluate(c, &req)
		if ev != nil {
			ev.Release()
		}
		_ = ref
	}
	answer(accounts.KeyLive, EvalRequest{Token: "test_vpn"}, "req_testtoken")
	answer(accounts.KeyTest, EvalRequest{Token: "test_tor"}, "req_testtoken_testkey")
	answer(accounts.KeyLive, EvalRequest{}, "req_bare")
	answer(accounts.KeyTest, EvalRequest{}, "req_bare_testkey")
	answer(accounts.KeyLive, EvalRequest{Email: "a@mailinator.com", EmailSent: true}, "req_degraded")
	answer(accounts.KeyTest, EvalRequest{Email: "a@mailinator.com", EmailSent: true}, "req_testkey")
	answer(accounts.KeyLive, EvalRequest{Token: "not-a-token"}, "req_rejected")
	ts.quota.result = quota.ChargeResult{Refusal: quota.RefusedHourly}
	answer(accounts.KeyLive, EvalRequest{Email: "a@mailinator.com", EmailSent: true}, "req_refused")
	ts.quota.result = quota.ChargeResult{}
	sb := &Call{Now: fixedNow, Sandbox: true}
	if ev, ref := ts.Evaluate(sb, &EvalRequest{Token: "test_tor", TokenSent: true}); ref != nil {
		t.Fatal(ref.Msg)
	} else {
		ev.Release()
	}
	if ev, _ := ts.Sample("vpn"); ev != nil {
		ev.Release()
	}

	if len(rec.entries) != 2 {
		t.Fatalf("%d entries recorded, want 2: %+v", len(rec.entries), rec.entries)
	}
	id := func(e recent.Entry) string { return strings.TrimRight(string(e.RequestID[:]), "\x00") }
	d, tk := rec.entries[0], rec.entries[1]
	if id(d) != "req_degraded" || d.Account != "acc_unit" || !d.At.Equal(fixedNow) || d.IP.IsValid() || d.Country != [2]byte{} ||
		d.Test || d.Source != score.SourceEngine || d.Decision != score.Review || !d.Reasons.Has(score.ReasonDisposableEmail) {
		t.Fatalf("degraded entry: %+v", d)
	}
	if id(tk) != "req_testkey" || !tk.Test || !tk.Reasons.Has(score.ReasonDisposableEmail) {
		t.Fatalf("test-key entry: %+v", tk)
	}
}

// lastEntry keeps the last entry only: a recent list that allocates nothing.
type lastEntry struct{ e recent.Entry }

func (l *lastEntry) Record(e recent.Entry) { l.e = e }

// evaluated is an answered evaluation of the fake account, decided by a pin.
func evaluated(t testing.TB, ts *testService) (*Call, *Evaluation) {
	pin, err := score.ParsePin("89.187.178.24", "", "allow", "office")
	if err != nil {
		t.Fatal(err)
	}
	ts.accounts.view.Policy = score.Policy{Pins: []score.Pin{pin}}
	c := ts.call(accounts.KeyLive)
	copy(c.RequestID[:], "req_0123456789abcdef01234567")
	ev, ref := ts.Evaluate(c, &EvalRequest{Token: "test_vpn", TokenSent: true, Email: "a@b.co", EmailSent: true})
	if ref != nil {
		t.Fatal(ref.Msg)
	}
	return c, ev
}

// TestRecentRecordDoesNotAllocate: handing an evaluation to the recent list
// costs evaluate no allocation (the entry goes by value, even through the
// interface).
func TestRecentRecordDoesNotAllocate(t *testing.T) {
	l := &lastEntry{}
	ts := newTestService(t, Config{Recent: l})
	c, ev := evaluated(t, ts)
	defer ev.Release()
	if n := testing.AllocsPerRun(1000, func() { ts.recent.Record(recentEntry(c, ev)) }); n != 0 {
		t.Fatalf("the record stage's recent entry allocates %.1f", n)
	}
	// The entry carries the answer: its address and country, the pin that
	// decided and the engine's own decision.
	if e := l.e; e.Pin.Name() != "office" || e.Account != "acc_unit" || e.Source != score.SourceException ||
		e.Decision != score.Allow || e.Engine != score.Review || e.IP != netip.MustParseAddr("89.187.178.24") ||
		e.Country != [2]byte{'N', 'L'} || e.Risk == 0 || e.Reasons == 0 {
		t.Fatalf("entry: %+v", l.e)
	}
}

// BenchmarkRecentRecord is all an evaluation pays for the console's recent
// list: building the entry and recent.Client.Record into the real client.
// Every 1024 entries the timer stops while a List hands the batch to the
// owner and waits for it to be written (to an in-memory Pebble), so the
// owner's work — which runs on its own goroutine, off the evaluate path —
// is not in the figure and the pending buffer is reused as when served.
func BenchmarkRecentRecord(b *testing.B) {
	db, err := storage.Open("r", storage.Options{FS: vfs.NewMem()})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	rc, err := recent.New(sys.Root, recent.Config{Store: db, FlushEvery: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer rc.Stop()
	ts := newTestService(b, Config{Recent: rc})
	c, ev := evaluated(b, ts)
	defer ev.Release()
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		ts.recent.Record(recentEntry(c, ev))
		if n++; n%1024 == 0 {
			b.StopTimer()
			if _, err := rc.List(recent.List{Account: "acc_unit", Now: fixedNow, Limit: 1}); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	}
}

// TestWebhookIPOfAnUnmeasuredAddress: a live evaluation whose network token
// named no address shows ip "unknown"; its webhook says the same, not Go's
// "invalid IP".
func TestWebhookIPOfAnUnmeasuredAddress(t *testing.T) {
	ev := getEvaluation()
	defer ev.Release()
	ev.in = score.Input{Network: score.Network{SDKBlocked: true}, Device: score.Device{Present: true, Automation: true}}
	score.Evaluate(&ev.in, &ev.res)
	ev.build()
	e, ok := webhookEvent("acc_1", time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC), &ev.in, &ev.res)
	if !ok {
		t.Fatal("a bot fires no webhook")
	}
	if e.IP != "unknown" || e.IP != ev.Body().IP {
		t.Fatalf("webhook ip %q, evaluate answer ip %q", e.IP, ev.Body().IP)
	}
}
