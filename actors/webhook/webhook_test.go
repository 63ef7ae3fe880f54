package webhook

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/actors/mailer"
	"github.com/fraudd/fraudd/storage"
)

// manualClock moves only when the test says so.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *manualClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// directory is a fake account directory whose URL and secret the test sets.
type directory struct {
	mu     sync.Mutex
	views  map[string]*accounts.View
	secret map[string]string
}

func (d *directory) set(id, url, secret string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	v := &accounts.View{}
	v.ID, v.Email, v.WebhookURL = id, id+"@example.com", url
	d.views[id], d.secret[id] = v, secret
}

func (d *directory) Get(id string) *accounts.View {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.views[id]
}

func (d *directory) WebhookSecret(v *accounts.View) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s, ok := d.secret[v.ID]
	if !ok {
		return "", errors.New("no secret")
	}
	return s, nil
}

type outbox struct {
	mu   sync.Mutex
	msgs []mailer.Message
}

func (o *outbox) Send(m mailer.Message) { o.mu.Lock(); o.msgs = append(o.msgs, m); o.mu.Unlock() }
func (o *outbox) count() int            { o.mu.Lock(); defer o.mu.Unlock(); return len(o.msgs) }

// hit is one request the receiver got.
type hit struct {
	path string
	ts   string
	sig  string
	id   string
	body []byte
}

// receiver is a loopback endpoint answering status (settable).
type receiver struct {
	*httptest.Server
	status atomic.Int32
	mu     sync.Mutex
	hits   []hit
}

func newReceiver(t *testing.T, status int) *receiver {
	r := &receiver{}
	r.status.Store(int32(status))
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.hits = append(r.hits, hit{path: req.URL.Path, ts: req.Header.Get("X-Service-Timestamp"), sig: req.Header.Get("X-Service-Signature"),
			id: req.Header.Get("X-Service-Event-Id"), body: b})
		r.mu.Unlock()
		if req.URL.Path == "/redirect" {
			http.Redirect(w, req, "/elsewhere", http.StatusFound)
			return
		}
		if req.URL.Path == "/slow" {
			time.Sleep(300 * time.Millisecond)
		}
		w.WriteHeader(int(r.status.Load()))
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) got() []hit {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]hit(nil), r.hits...)
}

type fixture struct {
	svc  *Service
	clk  *manualClock
	dir  *directory
	mail *outbox
	db   *storage.DB
	sys  *actor.ActorSystem
	cfg  Config
}

// restart stops the service and starts a new one on the same store, as a
// process restart would.
func (f *fixture) restart(t *testing.T) {
	t.Helper()
	if err := f.svc.Stop(); err != nil {
		t.Fatal(err)
	}
	svc, err := New(f.sys.Root, f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.svc = svc
}

func (f *fixture) pending(t *testing.T) []*storage.PendingHook {
	t.Helper()
	var out []*storage.PendingHook
	if err := f.db.PendingHooks(func(p *storage.PendingHook) error { out = append(out, p); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

var t0 = time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)

func newFixture(t *testing.T, cfg Config) *fixture {
	t.Helper()
	return newFixtureOn(t, cfg, vfs.NewMem())
}

// newFixtureOn is newFixture with the store on fs (a failing one, say).
func newFixtureOn(t *testing.T, cfg Config, fs vfs.FS) *fixture {
	t.Helper()
	return newFixtureWith(t, cfg, storage.Options{FS: fs})
}

// newFixtureWith is newFixture with the store opened with opts (a crashable
// file system and a group sync that never ticks, say).
func newFixtureWith(t *testing.T, cfg Config, opts storage.Options) *fixture {
	t.Helper()
	db, err := storage.Open("d", opts)
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	f := &fixture{clk: &manualClock{t: t0}, dir: &directory{views: map[string]*accounts.View{}, secret: map[string]string{}}, mail: &outbox{}, db: db}
	cfg.Accounts, cfg.DB, cfg.Mail, cfg.Clock, cfg.Logger = f.dir, db, f.mail, f.clk, quiet
	if cfg.TickEvery == 0 {
		cfg.TickEvery = 2 * time.Millisecond
	}
	cfg.Shards = 2
	f.sys, f.cfg = sys, cfg
	if f.svc, err = New(sys.Root, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.svc.Stop(); err != nil {
			t.Error(err)
		}
		db.Close()
	})
	return f
}

// eventually polls cond for up to 30 s (real time; only ever a bound on a
// wait that normally ends in milliseconds, generous because a busy 2-core
// machine can starve the shards' ticks for seconds).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// settle lets several ticks pass, for checks that something does NOT happen.
func settle() { time.Sleep(40 * time.Millisecond) }

func (f *fixture) deliveries(t *testing.T, acc string) []*storage.Delivery {
	t.Helper()
	ds, err := f.svc.Recent(acc, f.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func threat(acc string) *Event {
	return &Event{Account: acc, At: t0, IP: "198.51.100.4", ThreatType: "Tor", Details: Details{Country: "NL", Tor: true, Decision: "block"}}
}

func TestRetryScheduleAndFreshSignatures(t *testing.T) {
	f := newFixture(t, Config{AllowPrivate: true})
	rcv := newReceiver(t, 503)
	f.dir.set("acc_r", rcv.URL+"/hook", "whsec_one")
	f.svc.Notify(threat("acc_r"))

	eventually(t, "attempt 1 logged", func() bool { return len(f.deliveries(t, "acc_r")) == 1 })
	d := f.deliveries(t, "acc_r")[0]
	if d.Attempt != 1 || d.StatusCode != 503 || d.Error != "HTTP 503" || !d.At.Equal(t0) || !d.NextAt.Equal(t0.Add(time.Minute)) || d.Event != KindThreat {
		t.Fatalf("attempt 1: %+v", d)
	}

	// The first retry is due 1 minute after the end of attempt 1, by the
	// service clock, and not a second before.
	f.clk.Advance(59 * time.Second)
	settle()
	if n := len(rcv.got()); n != 1 {
		t.Fatalf("retried early: %d hits", n)
	}
	f.svc.cfg.Accounts.(*directory).set("acc_r", rcv.URL+"/hook", "whsec_two") // rotation applies to the retry
	f.clk.Advance(time.Second)
	eventually(t, "attempt 2 logged", func() bool { return len(f.deliveries(t, "acc_r")) == 2 })
	d = f.deliveries(t, "acc_r")[0]
	t1 := t0.Add(time.Minute)
	if d.Attempt != 2 || !d.At.Equal(t1) || !d.NextAt.Equal(t1.Add(8*time.Minute)) {
		t.Fatalf("attempt 2: %+v", d)
	}

	f.clk.Advance(8*time.Minute - time.Second)
	settle()
	if n := len(rcv.got()); n != 2 {
		t.Fatalf("second retry early: %d hits", n)
	}
	f.clk.Advance(time.Second)
	eventually(t, "attempt 3 logged", func() bool { return len(f.deliveries(t, "acc_r")) == 3 })
	d = f.deliveries(t, "acc_r")[0]
	if d.Attempt != 3 || !d.NextAt.IsZero() || d.Error != "HTTP 503" {
		t.Fatalf("attempt 3: %+v", d)
	}

	// Three attempts, then nothing more.
	f.clk.Advance(time.Hour)
	settle()
	hits := rcv.got()
	if len(hits) != MaxAttempts {
		t.Fatalf("%d attempts, want %d", len(hits), MaxAttempts)
	}
	wantTS := []int64{t0.Unix(), t1.Unix(), t1.Add(8 * time.Minute).Unix()}
	for i, h := range hits {
		secret := "whsec_one"
		if i > 0 {
			secret = "whsec_two"
		}
		if h.ts != strconv.FormatInt(wantTS[i], 10) {
			t.Errorf("attempt %d timestamp %s, want %d", i+1, h.ts, wantTS[i])
		}
		ts, _ := strconv.ParseInt(h.ts, 10, 64)
		if h.sig != Sign(secret, ts, h.body) {
			t.Errorf("attempt %d not signed with the current secret", i+1)
		}
		if h.id != hits[0].id || len(h.id) != 32 || string(h.body) != string(hits[0].body) {
			t.Errorf("attempt %d: event id %s / body changed", i+1, h.id)
		}
		if !strings.Contains(string(h.body), `"event_id":"`+h.id+`"`) {
			t.Errorf("body does not carry the header's event id: %s", h.body)
		}
	}
	if f.mail.count() != 0 {
		t.Fatal("one failed event emailed the owner")
	}
}

func TestSuccessEndsDelivery(t *testing.T) {
	f := newFixture(t, Config{AllowPrivate: true})
	rcv := newReceiver(t, 204)
	f.dir.set("acc_ok", rcv.URL, "whsec_x")
	id, err := f.svc.SendTest("acc_ok", t0)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "delivery logged", func() bool { return len(f.deliveries(t, "acc_ok")) == 1 })
	d := f.deliveries(t, "acc_ok")[0]
	if d.EventID != id || d.Event != KindTest || d.StatusCode != 204 || d.Error != "" || !d.NextAt.IsZero() {
		t.Fatalf("delivery: %+v", d)
	}
	f.clk.Advance(time.Hour)
	settle()
	if n := len(rcv.got()); n != 1 {
		t.Fatalf("a delivered event was retried: %d hits", n)
	}
	if !strings.Contains(string(rcv.got()[0].body), `"event":"test"`) {
		t.Fatalf("test event body: %s", rcv.got()[0].body)
	}
}

func TestRedirectNotFollowed(t *testing.T) {
	f := newFixture(t, Config{AllowPrivate: true})
	rcv := newReceiver(t, 200)
	f.dir.set("acc_3xx", rcv.URL+"/redirect", "whsec_x")
	f.svc.Notify(threat("acc_3xx"))
	eventually(t, "attempt logged", func() bool { return len(f.deliveries(t, "acc_3xx")) == 1 })
	d := f.deliveries(t, "acc_3xx")[0]
	if d.StatusCode != http.StatusFound || d.Error != "redirect not followed" || d.NextAt.IsZero() {
		t.Fatalf("redirect: %+v", d)
	}
	for _, h := range rcv.got() {
		if h.path != "/redirect" {
			t.Fatalf("redirect followed to %s", h.path)
		}
	}
}

func TestTimeoutAndPrivateAddressAreFailures(t *testing.T) {
	f := newFixture(t, Config{AllowPrivate: true, Timeout: 100 * time.Millisecond})
	rcv := newReceiver(t, 200)
	f.dir.set("acc_slow", rcv.URL+"/slow", "whsec_x")
	f.svc.Notify(threat("acc_slow"))
	eventually(t, "timeout logged", func() bool { return len(f.deliveries(t, "acc_slow")) == 1 })
	if d := f.deliveries(t, "acc_slow")[0]; d.StatusCode != 0 || !strings.Contains(d.Error, "timeout") || d.NextAt.IsZero() {
		t.Fatalf("timeout: %+v", d)
	}

	g := newFixture(t, Config{})
	// https://, as a receiver must be without the flag: refused at the dial.
	g.dir.set("acc_priv", "https://"+strings.TrimPrefix(rcv.URL, "http://"), "whsec_x")
	before := len(rcv.got())
	g.svc.Notify(threat("acc_priv"))
	eventually(t, "refusal logged", func() bool { return len(g.deliveries(t, "acc_priv")) == 1 })
	if d := g.deliveries(t, "acc_priv")[0]; !strings.Contains(d.Error, "non-public") {
		t.Fatalf("private address: %+v", d)
	}
	if len(rcv.got()) != before {
		t.Fatal("a private receiver was contacted without --allow-private-webhooks")
	}
}

// TestPlainHTTPRefusedWithoutFlag: without --allow-private-webhooks a
// receiver must be https:// (CLARIFICATIONS: Webhooks). An http:// URL
// stored while the flag was on (a development run on the same data, a
// restored backup) was still posted to, signed payload in clear text: the
// admin API checks the scheme when the URL is set, delivery did not. The
// receiver here names a public host; the test's dialer reaches it on
// loopback, so only the scheme is in question.
func TestPlainHTTPRefusedWithoutFlag(t *testing.T) {
	f := newFixture(t, Config{})
	rcv := newReceiver(t, 200)
	f.svc.client.Transport.(*http.Transport).DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", rcv.Listener.Addr().String())
	}
	f.dir.set("acc_http", "http://hooks.example/fraudd", "whsec_x")
	f.svc.Notify(threat("acc_http"))
	eventually(t, "refusal logged", func() bool { return len(f.deliveries(t, "acc_http")) == 1 })
	if d := f.deliveries(t, "acc_http")[0]; d.StatusCode != 0 || !strings.Contains(d.Error, "https://") || d.NextAt.IsZero() {
		t.Fatalf("http:// receiver without the flag: %+v", d)
	}
	if n := len(rcv.got()); n != 0 {
		t.Fatalf("an http:// receiver got %d requests without --allow-private-webhooks", n)
	}
}

func TestNoReceiverDropsEvent(t *testing.T) {
	f := newFixture(t, Config{AllowPrivate: true})
	f.dir.set("acc_none", "", "whsec_x")
	f.svc.Notify(threat("acc_none"))
	f.svc.Notify(threat("acc_unknown"))
	settle()
	if n := len(f.deliveries(t, "acc_none")) + len(f.deliveries(t, "acc_unknown")); n != 0 {
		t.Fatalf("%d deliveries without a receiver", n)
	}
}

func TestFailureStreakEmailsOwnerOnce(t *testing.T) {
	f := newFixture(t, Config{AllowPrivate: true})
	rcv := newReceiver(t, 500)
	// A path that is the receiver's credential, as a chat webhook's is: the
	// notice names the host, not the path.
	f.dir.set("acc_f", rcv.URL+"/services/T0/B0/s3cr3tToken", "whsec_x")
	round := 0
	failEvents(t, f, &round, 4)
	settle()
	if f.mail.count() != 0 {
		t.Fatal("emailed after 4 failed events")
	}
	failEvents(t, f, &round, 1)
	eventually(t, "failure notice", func() bool { return f.mail.count() == 1 })
	m := f.mail.msgs[0]
	if m.Account != "acc_f" || m.Kind != "webhook_failures" || !strings.Contains(m.Body, rcv.URL+"/…") || strings.Contains(m.Body, "s3cr3tToken") || !strings.Contains(m.Body, "HTTP 500") {
		t.Fatalf("notice: %+v", m)
	}
	failEvents(t, f, &round, 3)
	settle()
	if f.mail.count() != 1 {
		t.Fatal("emailed again during the same streak")
	}

	// A success resets the streak; five more failed events email again.
	rcv.status.Store(200)
	f.clk.Advance(time.Second) // the newest attempt lists first
	f.svc.Notify(threat("acc_f"))
	eventually(t, "success logged", func() bool { return f.deliveries(t, "acc_f")[0].StatusCode == 200 })
	rcv.status.Store(500)
	failEvents(t, f, &round, 4)
	settle()
	if f.mail.count() != 1 {
		t.Fatal("streak not reset by a success")
	}
	failEvents(t, f, &round, 1)
	eventually(t, "second notice", func() bool { return f.mail.count() == 2 })
}

func TestLogKeepsTheMostRecent(t *testing.T) {
	f := newFixture(t, Config{AllowPrivate: true})
	rcv := newReceiver(t, 200)
	f.dir.set("acc_many", rcv.URL, "whsec_x")
	for i := 0; i < 60; i++ {
		f.clk.Advance(time.Second)
		f.svc.Notify(threat("acc_many"))
	}
	eventually(t, "all delivered", func() bool { return len(rcv.got()) == 60 })
	// Attempts finish out of order: the 60th may be logged before the 59th.
	if !f.svc.settled(10 * time.Second) {
		t.Fatal("attempts still running")
	}
	eventually(t, "all logged", func() bool {
		ds := f.deliveries(t, "acc_many")
		return len(ds) == ListLen && ds[0].At.Equal(t0.Add(60*time.Second))
	})
	ds, _ := f.db.Deliveries("acc_many", time.Time{}, 1000)
	if len(ds) >= 2*ListLen {
		t.Fatalf("log not trimmed: %d records", len(ds))
	}
	for i := 1; i < len(ds); i++ {
		if ds[i].At.After(ds[i-1].At) {
			t.Fatal("not newest first")
		}
	}
	// 30 days later the list is empty (retention).
	f.clk.Advance(Retention + time.Minute)
	if ds := f.deliveries(t, "acc_many"); len(ds) != 0 {
		t.Fatalf("deliveries older than 30 days listed: %d", len(ds))
	}
	eventually(t, "pruned", func() bool {
		ds, _ := f.db.Deliveries("acc_many", time.Time{}, 1000)
		return len(ds) == 0
	})
}

// TestQueueFullDropsCounted: events past maxQueued waiting or retrying
// for one account are dropped, not queued or stored, and each is counted
// (Dropped, the webhook_dropped_total metric) and logged with its id.
func TestQueueFullDropsCounted(t *testing.T) {
	f := newFixture(t, Config{AllowPrivate: true, Timeout: 5 * time.Second})
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(block) })
	f.dir.set("acc_full", srv.URL, "whsec")
	for range maxQueued + 10 {
		f.svc.Notify(threat("acc_full"))
	}
	deadline := time.Now().Add(5 * time.Second)
	for f.svc.Dropped() < 10 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if d, n := f.svc.Dropped(), len(f.pending(t)); d != 10 || n != maxQueued {
		t.Fatalf("dropped %d, pending stored %d; want 10 and %d", d, n, maxQueued)
	}
	// The operator's test event is dropped too, and SendTest says so (the
	// admin API's 409) instead of the 202 that promised a delivery.
	if id, err := f.svc.SendTest("acc_full", time.Now()); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("SendTest on a full queue: %q %v, want ErrQueueFull", id, err)
	}
	if d := f.svc.Dropped(); d != 11 {
		t.Fatalf("dropped %d after the test event, want 11", d)
	}
}

// TestRemovedReceiverEndsTheListedDelivery: an event whose retry comes due
// after the receiver was removed is dropped, as before, and the list of
// deliveries (ADMIN.md: GET …/webhook/deliveries, status code or error)
// says so with a last record without a next attempt; it showed the last
// attempt as retrying, with a next attempt that never came.
func TestRemovedReceiverEndsTheListedDelivery(t *testing.T) {
	f := newFixture(t, Config{AllowPrivate: true})
	rcv := newReceiver(t, 503)
	f.dir.set("acc_gone", rcv.URL+"/hook", "whsec_x")
	f.svc.Notify(threat("acc_gone"))
	eventually(t, "attempt 1 logged", func() bool { return len(f.deliveries(t, "acc_gone")) == 1 })
	f.dir.set("acc_gone", "", "whsec_x")
	f.clk.Advance(time.Minute)
	eventually(t, "the drop logged", func() bool { return len(f.deliveries(t, "acc_gone")) == 2 })
	d := f.deliveries(t, "acc_gone")[0]
	if d.Attempt != 1 || !d.NextAt.IsZero() || d.Error != errNotRetried || !d.At.Equal(t0.Add(time.Minute)) {
		t.Fatalf("last record: %+v", d)
	}
	if n := len(rcv.got()); n != 1 {
		t.Fatalf("%d attempts, want 1", n)
	}
	if p := f.pending(t); len(p) != 0 {
		t.Fatalf("still pending: %+v", p)
	}
}

// TestMailedURLHidesThePath: the failure notice names a receiver by its
// scheme and host; a path or query (a chat webhook's token) is not mailed.
func TestMailedURLHidesThePath(t *testing.T) {
	for in, want := range map[string]string{
		"https://hooks.slack.com/services/T000/B000/XXXXXXXX": "https://hooks.slack.com/…",
		"https://discord.com/api/webhooks/123/tok":            "https://discord.com/…",
		"https://example.com":                                 "https://example.com",
		"https://example.com/":                                "https://example.com",
		"https://example.com:8443/?token=abc":                 "https://example.com:8443/…",
		"https://user:pw@example.com/hook":                    "https://example.com/…",
		"::not a url":                                         "your webhook endpoint",
	} {
		if got := mailedURL(in); got != want {
			t.Errorf("mailedURL(%q) = %q, want %q", in, got, want)
		}
	}
}
