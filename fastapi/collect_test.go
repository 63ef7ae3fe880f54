package fastapi

import (
	"encoding/json"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/valyala/fasthttp"

	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/actors/events"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/fastapi/collector"
	"github.com/fraudd/fraudd/intel/device"
	"github.com/fraudd/fraudd/intel/nettoken"
	"github.com/fraudd/fraudd/storage"
)

// collectEnv is the unit-test server with the collector's dependencies.
type collectEnv struct {
	*testEnv
	codec *nettoken.Codec
}

func newCollectEnv(t *testing.T) *collectEnv {
	e := newTestEnv(t)
	sys := actor.NewActorSystem()
	devs := events.New(sys.Root, events.Config{Shards: 2})
	t.Cleanup(func() { devs.Stop(); sys.Shutdown() })
	codec := nettoken.New([]byte("network-token-unit-key-000000000"))
	e.srv.deps.NetTokens = codec
	e.srv.deps.Devices = devs
	e.srv.deps.VisitorKey = []byte("visitor-id-unit-key")
	e.srv.deps.Backup = fakeBackup
	e.srv.cfg.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	e.srv.rewire()
	return &collectEnv{testEnv: e, codec: codec}
}

// call runs one request from remote with the given headers.
func (e *collectEnv) call(method, uri, remote string, hdr map[string]string, body string) *fasthttp.RequestCtx {
	tr := testRequest{method: method, uri: uri, remote: remote, header: [][2]string{{"User-Agent", "Mozilla/5.0 unit"}}}
	for k, v := range hdr {
		tr.header = append(tr.header, [2]string{k, v})
	}
	if body != "" {
		tr.body = []byte(body)
	}
	return e.serve(tr)
}

func (e *collectEnv) token(t *testing.T, pk, remote string, hdr map[string]string, body string) string {
	t.Helper()
	ctx := e.call("POST", "/v1/collect/network", remote, hdr, strings.Replace(body, "PK", pk, 1))
	if ctx.Response.StatusCode() != 200 {
		t.Fatalf("collect network: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	var out struct {
		Token     string `json:"token"`
		ExpiresIn int    `json:"expires_in"`
	}
	if err := json.Unmarshal(ctx.Response.Body(), &out); err != nil || out.ExpiresIn != 900 || !strings.HasPrefix(out.Token, nettoken.Prefix) {
		t.Fatalf("collect network answer: %v %s", err, ctx.Response.Body())
	}
	return out.Token
}

func (e *collectEnv) deviceEvent(t *testing.T, pk, remote, fixture string) string {
	t.Helper()
	b, err := os.ReadFile("../intel/device/testdata/" + fixture + ".json")
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		Signals map[string]any `json:"signals"`
	}
	if err := json.Unmarshal(b, &fx); err != nil {
		t.Fatal(err)
	}
	fx.Signals["key"] = pk
	body, _ := json.Marshal(fx.Signals)
	ctx := e.call("POST", "/v1/collect/device", remote, map[string]string{"Content-Type": "text/plain", "Origin": "https://shop.example"}, string(body))
	if ctx.Response.StatusCode() != 200 {
		t.Fatalf("collect device: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	var out struct {
		EventID string `json:"event_id"`
	}
	json.Unmarshal(ctx.Response.Body(), &out)
	if _, ok := events.ParseEventID(out.EventID); !ok {
		t.Fatalf("event id %q", out.EventID)
	}
	return out.EventID
}

func (e *collectEnv) evaluate(t *testing.T, key string, body map[string]any) (int, map[string]any, []byte) {
	t.Helper()
	b, _ := json.Marshal(body)
	ctx := e.post("/v1/evaluate", "Bearer "+key, "application/json", string(b))
	var m map[string]any
	json.Unmarshal(ctx.Response.Body(), &m)
	return ctx.Response.StatusCode(), m, normalise(ctx.Response.Body())
}

func TestCollectorScript(t *testing.T) {
	e := newCollectEnv(t)
	ctx := e.call("GET", "/collector.js", "73.0.0.1:5000", nil, "")
	h := &ctx.Response.Header
	if ctx.Response.StatusCode() != 200 || string(h.ContentType()) != "application/javascript; charset=utf-8" ||
		string(h.Peek("Cache-Control")) != collectorCache || string(h.Peek("ETag")) != collector.ETag || len(ctx.Response.Body()) != len(collector.JS) {
		t.Fatalf("%d %q %q %q", ctx.Response.StatusCode(), h.ContentType(), h.Peek("Cache-Control"), h.Peek("ETag"))
	}
	ctx = e.call("GET", "/collector.js", "73.0.0.1:5000", map[string]string{"If-None-Match": collector.ETag}, "")
	if ctx.Response.StatusCode() != 304 || len(ctx.Response.Body()) != 0 {
		t.Fatalf("revalidation: %d", ctx.Response.StatusCode())
	}
}

func TestCollectPreflightAndOrigins(t *testing.T) {
	e := newCollectEnv(t)
	pk := e.acct.PublishableKey
	ctx := e.call("OPTIONS", "/v1/collect/device", "73.0.0.1:5000", map[string]string{"Origin": "https://shop.example", "Access-Control-Request-Method": "POST"}, "")
	h := &ctx.Response.Header
	if ctx.Response.StatusCode() != 204 || string(h.Peek("Access-Control-Allow-Origin")) != "https://shop.example" ||
		!strings.Contains(string(h.Peek("Access-Control-Allow-Headers")), "X-Publishable-Key") {
		t.Fatalf("preflight: %d %s", ctx.Response.StatusCode(), h.String())
	}
	// No origins listed: any origin, echoed.
	ctx = e.call("POST", "/v1/collect/network", "73.0.0.1:5000", map[string]string{"Origin": "https://any.example", "X-Publishable-Key": pk}, "")
	if ctx.Response.StatusCode() != 200 || string(ctx.Response.Header.Peek("Access-Control-Allow-Origin")) != "https://any.example" {
		t.Fatalf("open key: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	// Listed origins confine the key.
	origins := []string{"https://shop.example"}
	if _, err := e.accts.Update(e.acct.View.ID, accounts.Patch{Origins: &origins}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		origin string
		status int
	}{{"https://shop.example", 200}, {"https://evil.example", 403}, {"", 403}} {
		hdr := map[string]string{}
		if c.origin != "" {
			hdr["Origin"] = c.origin
		}
		ctx = e.call("POST", "/v1/collect/network", "73.0.0.1:5000", hdr, `{"v":1,"key":"`+pk+`"}`)
		acao := string(ctx.Response.Header.Peek("Access-Control-Allow-Origin"))
		if ctx.Response.StatusCode() != c.status || (c.status == 200 && acao != c.origin) || (c.status != 200 && acao != "") {
			t.Fatalf("origin %q: %d acao %q %s", c.origin, ctx.Response.StatusCode(), acao, ctx.Response.Body())
		}
	}
	for _, bad := range []string{"", "pk_live_nope", e.acct.LiveKey} {
		ctx = e.call("POST", "/v1/collect/device", "73.0.0.1:5000", map[string]string{"Origin": "https://shop.example"}, `{"v":1,"key":"`+bad+`"}`)
		if ctx.Response.StatusCode() != 401 {
			t.Fatalf("key %q: %d", bad, ctx.Response.StatusCode())
		}
	}
	ctx = e.call("POST", "/v1/collect/device", "73.0.0.1:5000", nil, `not json`)
	if ctx.Response.StatusCode() != 400 {
		t.Fatalf("garbage body: %d", ctx.Response.StatusCode())
	}
}

// TestEvaluateWithNetworkToken: the token's address drives the network
// layer; proxy evidence from headers and WebRTC; refused tokens.
func TestEvaluateWithNetworkToken(t *testing.T) {
	e := newCollectEnv(t)
	pk, live := e.acct.PublishableKey, e.acct.LiveKey
	body := `{"v":1,"key":"PK","webrtc":{"status":"ok","addrs":["192.168.1.20","73.0.0.9"]}}`

	tok := e.token(t, pk, "73.0.0.1:40000", nil, body)
	st, m, raw := e.evaluate(t, live, map[string]any{"token": tok, "tz": "America/New_York"})
	if st != 200 || m["decision"] != "allow" || m["ip"] != "73.0.0.1" || m["country"] != "US" || m["device_status"] != "not_sent" {
		t.Fatalf("%d %s", st, raw)
	}
	golden(t, "evaluate_live_network", raw)

	for _, c := range []struct {
		name, remote string
		hdr          map[string]string
		body         string
		check        func(m map[string]any) bool
	}{
		{"via header", "73.0.0.1:1", map[string]string{"Via": "1.1 squid"}, body, func(m map[string]any) bool {
			return collectNetOf(m)["proxy"] == true && m["decision"] == "block" && collectHasReason(m, "proxy_detected")
		}},
		{"webrtc elsewhere", "73.0.0.1:1", nil, `{"v":1,"key":"PK","webrtc":{"status":"ok","addrs":["24.0.0.1"]}}`, func(m map[string]any) bool {
			return collectNetOf(m)["proxy"] == true && m["decision"] == "block"
		}},
		{"xff chain behind our proxy", "10.1.1.1:1", map[string]string{"X-Forwarded-For": "24.0.0.1, 73.0.0.1"}, body, func(m map[string]any) bool {
			return m["ip"] == "73.0.0.1" && collectNetOf(m)["proxy"] == true
		}},
		{"tor", "102.130.113.9:1", nil, body, func(m map[string]any) bool {
			return collectNetOf(m)["tor"] == true && m["decision"] == "block" && collectHasReason(m, "tor_exit_node")
		}},
		{"vpn label", "2.56.252.1:1", nil, `{"v":1,"key":"PK","webrtc":{"status":"ok","addrs":["73.0.0.1"]}}`, func(m map[string]any) bool {
			n := collectNetOf(m)
			return n["vpn"] == true && n["service"] == "NordVPN" && n["proxy"] == false && m["decision"] == "review"
		}},
		{"privacy relay", "104.28.28.1:1", nil, body, func(m map[string]any) bool {
			n := collectNetOf(m)
			return n["privacy_relay"] == true && m["decision"] == "review" && collectHasReason(m, "privacy_relay")
		}},
		{"datacenter", "1.178.1.1:1", nil, `{"v":1,"key":"PK"}`, func(m map[string]any) bool {
			n := collectNetOf(m)
			return n["datacenter"] == true && n["proxy"] == false && n["residential"] == false && m["decision"] == "allow"
		}},
		// A cloud server relaying a browser whose WebRTC shows a home address.
		{"datacenter relaying a home browser", "1.178.1.1:1", nil, body, func(m map[string]any) bool {
			n := collectNetOf(m)
			return n["datacenter"] == true && n["proxy"] == true && m["decision"] == "block"
		}},
		{"private address", "192.168.1.1:1", nil, body, func(m map[string]any) bool {
			n := collectNetOf(m)
			return n["sdk_blocked"] == true && n["complete"] == false && m["degraded"] == false && m["decision"] == "allow"
		}},
		{"our own proxy", "10.1.1.1:1", nil, body, func(m map[string]any) bool {
			return collectNetOf(m)["sdk_blocked"] == true
		}},
		{"no browser report", "73.0.0.1:1", map[string]string{"X-Publishable-Key": pk}, "", func(m map[string]any) bool {
			n := collectNetOf(m)
			return n["complete"] == false && n["sdk_blocked"] == false
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tok := e.token(t, pk, c.remote, c.hdr, c.body)
			st, m, raw := e.evaluate(t, live, map[string]any{"netcheck": tok})
			if st != 200 || !c.check(m) {
				t.Fatalf("%d %s", st, raw)
			}
		})
	}

	// An old token still evaluates, with its age.
	f := nettoken.Facts{Issued: fixedNow.Add(-2 * time.Hour), Addr: netip.MustParseAddr("73.0.0.1"), Report: true}
	old := e.codec.Sign(e.acct.View.ID, &f)
	if st, m, raw := e.evaluate(t, live, map[string]any{"token": old}); st != 200 || m["evidence"].(map[string]any)["network_age_s"] != float64(7200) {
		t.Fatalf("old token: %d %s", st, raw)
	}
	// Refused: tampered, malformed, another account's.
	other, err := e.accts.Create(accounts.NewAccount{Email: "other@example.com", Plan: "starter"})
	if err != nil {
		t.Fatal(err)
	}
	foreign := e.token(t, other.PublishableKey, "73.0.0.1:1", nil, body)
	tampered := tok[:len(tok)-2] + map[bool]string{true: "AA", false: "BA"}[tok[len(tok)-2:] != "AA"]
	for _, bad := range []string{foreign, tampered, "nt1.", "nt1.@@@", "garbage"} {
		st, m, raw := e.evaluate(t, live, map[string]any{"token": bad})
		if st != 400 || m["error"] != "Invalid token." {
			t.Fatalf("token %q: %d %s", bad, st, raw)
		}
	}
	if st, _, _ := e.evaluate(t, other.LiveKey, map[string]any{"token": foreign}); st != 200 {
		t.Fatal("the other account's own token refused")
	}
}

// TestEvaluateIPv6TimeZoneAUFiller: users of Asian IPv6 networks whose
// blocks the IPv6 country table fills with AU (the AU-filler rule of
// intel/feeds corrects them) evaluate with their own time zone and no
// timezone_mismatch; an Australian address still mismatches Bangkok.
func TestEvaluateIPv6TimeZoneAUFiller(t *testing.T) {
	e := newCollectEnv(t)
	pk, live := e.acct.PublishableKey, e.acct.LiveKey
	for _, c := range []struct {
		name, remote, tz, country string
		mismatch                  bool
	}{
		{"AIS Thailand", "[2001:44c8:4000::1234]:40000", "Asia/Bangkok", "TH", false},
		{"BSNL India", "[2001:4490:60::9]:40000", "Asia/Kolkata", "IN", false},
		{"Globe Philippines", "[2001:fd8::1]:40000", "Asia/Manila", "PH", false},
		{"Telstra in Bangkok", "[2001:8000::1]:40000", "Asia/Bangkok", "AU", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			tok := e.token(t, pk, c.remote, nil, `{"v":1,"key":"PK"}`)
			st, m, raw := e.evaluate(t, live, map[string]any{"token": tok, "tz": c.tz})
			tz, _ := m["timezone"].(map[string]any)
			if st != 200 || m["country"] != c.country || tz == nil || tz["checked"] != true || tz["matches_ip"] != !c.mismatch ||
				collectHasReason(m, "timezone_mismatch") != c.mismatch {
				t.Fatalf("%d %s", st, raw)
			}
			if want := map[bool]string{false: "allow", true: "review"}[c.mismatch]; m["decision"] != want {
				t.Fatalf("decision %v, want %s: %s", m["decision"], want, raw)
			}
		})
	}
}

func collectNetOf(m map[string]any) map[string]any { n, _ := m["network"].(map[string]any); return n }

func collectHasReason(m map[string]any, code string) bool {
	rs, _ := m["reasons"].([]any)
	for _, r := range rs {
		if r == code {
			return true
		}
	}
	return false
}

// TestEvaluateWithDeviceEvent: fingerprintEventId resolves the event; replay
// on the second evaluate; unknown ids; another account's event.
func TestEvaluateWithDeviceEvent(t *testing.T) {
	e := newCollectEnv(t)
	pk, live := e.acct.PublishableKey, e.acct.LiveKey
	tok := e.token(t, pk, "73.0.0.1:1", nil, `{"v":1,"key":"PK"}`)
	ev := e.deviceEvent(t, pk, "73.0.0.1:1", "chrome_headless_linux")

	st, m, raw := e.evaluate(t, live, map[string]any{"token": tok, "fingerprintEventId": ev})
	d, _ := m["device"].(map[string]any)
	if st != 200 || d == nil || d["automation"] != true || m["decision"] != "block" || m["device_status"] != "ok" ||
		!collectHasReason(m, "automation_detected") || d["visitor_id"] == "" || d["ip_blocklisted"] != false {
		t.Fatalf("%d %s", st, raw)
	}
	golden(t, "evaluate_live_device", raw)
	// The same event again (form alias): a replay.
	_, m, raw = e.evaluate(t, live, map[string]any{"netcheck": tok, "service_fp": ev})
	if m["evidence"].(map[string]any)["device_replayed"] != true {
		t.Fatalf("no replay: %s", raw)
	}

	// A normal desktop browser: allowed, device present and clean.
	ev2 := e.deviceEvent(t, pk, "73.0.0.1:1", "chrome_desktop_windows")
	if _, m, raw := e.evaluate(t, live, map[string]any{"token": tok, "fingerprintEventId": ev2}); m["decision"] != "allow" || m["device"] == nil {
		t.Fatalf("desktop: %s", raw)
	}
	// A VM alone is review; an emulator blocks.
	for fx, want := range map[string]string{"vm_vmware_windows": "review", "android_emulator": "block", "antidetect_spoofed_profile": "block", "brave_macos": "allow"} {
		id := e.deviceEvent(t, pk, "73.0.0.1:1", fx)
		if _, m, raw := e.evaluate(t, live, map[string]any{"token": tok, "fingerprintEventId": id}); m["decision"] != want {
			t.Fatalf("%s: decision %v, want %s: %s", fx, m["decision"], want, raw)
		}
	}

	// Without a resolvable event: network only, no device object, not degraded.
	other, _ := e.accts.Create(accounts.NewAccount{Email: "o2@example.com", Plan: "starter"})
	otherEv := e.deviceEvent(t, other.PublishableKey, "73.0.0.1:1", "chrome_headless_linux")
	for _, id := range []string{"ev_00000000000000000000000000000000", "nope", otherEv} {
		st, m, raw := e.evaluate(t, live, map[string]any{"token": tok, "fingerprintEventId": id})
		if st != 200 || m["device_status"] != "unavailable" || m["device"] != nil || m["degraded"] != false || m["decision"] != "allow" {
			t.Fatalf("id %q: %d %s", id, st, raw)
		}
	}
	// Degraded network with a device event: the device still decides.
	if _, m, raw := e.evaluate(t, live, map[string]any{"fingerprintEventId": ev}); m["degraded"] != true || m["decision"] != "block" || m["device_status"] != "ok" {
		t.Fatalf("degraded with device: %s", raw)
	}
}

// TestCollectDeviceStoresCompactSignals: an event keeps the signals the
// verdicts read, cut to their bounds — not the raw body, which was up to
// 32 KB with the publishable key and whatever else a page put in it.
func TestCollectDeviceStoresCompactSignals(t *testing.T) {
	e := newCollectEnv(t)
	b, err := os.ReadFile("../intel/device/testdata/chrome_headless_linux.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		Signals map[string]any `json:"signals"`
	}
	json.Unmarshal(b, &fx)
	fx.Signals["key"] = e.acct.PublishableKey
	fx.Signals["junk"] = strings.Repeat("x", 14<<10)
	lies := make([]string, 150)
	for i := range lies {
		lies[i] = strings.Repeat("L", 100)
	}
	fx.Signals["lies"] = lies
	body, _ := json.Marshal(fx.Signals)
	if len(body) < 28<<10 || len(body) > 32<<10 {
		t.Fatalf("test report of %d bytes", len(body))
	}
	ctx := e.call("POST", "/v1/collect/device", "73.0.0.1:5000", map[string]string{"Content-Type": "text/plain"}, string(body))
	var out struct {
		EventID string `json:"event_id"`
	}
	json.Unmarshal(ctx.Response.Body(), &out)
	id, ok := events.ParseEventID(out.EventID)
	if ctx.Response.StatusCode() != 200 || !ok {
		t.Fatalf("collect: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	res, err := e.srv.deps.Devices.Peek(events.Resolve{ID: id, Account: e.acct.View.ID, Now: fixedNow})
	if err != nil || !res.Found {
		t.Fatalf("resolve: %v %+v", err, res)
	}
	ev := res.Event
	if len(ev.Signals) > 4<<10 || ev.RawSignals || strings.Contains(string(ev.Signals), "junk") || strings.Contains(string(ev.Signals), "pk_live_") {
		t.Fatalf("stored %d bytes of signals: %.300s", len(ev.Signals), ev.Signals)
	}
	var kept device.Signals
	if err := json.Unmarshal(ev.Signals, &kept); err != nil || len(kept.Lies) != device.MaxListLen || !strings.HasPrefix(kept.UA, "Mozilla/5.0") {
		t.Fatalf("stored signals do not read back: %v %+v", err, kept)
	}
	// Assessing what was stored gives the verdict the event holds.
	again := device.Assess(&kept, device.Options{Key: e.srv.deps.VisitorKey})
	if again.VisitorID != ev.VisitorID || again.Automation != (ev.Flags&storage.EventAutomation != 0) || uint8(again.Checked)&^uint8(device.CheckIPBlocklisted) != ev.Checked&^uint8(device.CheckIPBlocklisted) {
		t.Fatalf("re-assessment differs: %+v vs flags %b", again, ev.Flags)
	}
}

// TestCollectDeviceDailyBudget: past the account's daily budget the collector
// gets 429 in the SPEC error shape with Retry-After until 00:00 UTC, CORS
// headers included so the page can read it.
func TestCollectDeviceDailyBudget(t *testing.T) {
	e := newCollectEnv(t)
	budget := quota.CollectBudgetFor(quota.LimitsFor(e.acct.View.Plan, nil, nil, e.acct.View.CreatedAt, fixedNow))
	body := `{"key":"` + e.acct.PublishableKey + `","v":1,"ua":"Mozilla/5.0"}`
	hdr := map[string]string{"Content-Type": "text/plain", "Origin": "https://shop.example"}
	for i := int64(0); i < budget.Events; i++ {
		// Spread over addresses: the per-address collect limit is not under test.
		remote := netip.AddrPortFrom(netip.AddrFrom4([4]byte{73, byte(i >> 16), byte(i >> 8), byte(i)}), 5000).String()
		if ctx := e.call("POST", "/v1/collect/device", remote, hdr, body); ctx.Response.StatusCode() != 200 {
			t.Fatalf("event %d of %d: %d %s", i+1, budget.Events, ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
	ctx := e.call("POST", "/v1/collect/device", "74.0.0.1:5000", hdr, body)
	next := fixedNow.UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	if ctx.Response.StatusCode() != 429 || string(ctx.Response.Header.Peek("Retry-After")) != strconv.Itoa(int(next.Sub(fixedNow).Seconds())) ||
		string(ctx.Response.Header.Peek("Access-Control-Allow-Origin")) != "https://shop.example" {
		t.Fatalf("over budget: %d Retry-After=%q %s", ctx.Response.StatusCode(), ctx.Response.Header.Peek("Retry-After"), ctx.Response.Body())
	}
	golden(t, "error_collect_budget", normalise(ctx.Response.Body()))
}

// TestCollectPerAddressLimitCORS: the collect endpoints' per-address limit
// answers 429 with the same CORS headers as every other collect answer, so
// a page on an allowed origin can read it (and its Retry-After) instead of
// seeing an opaque network error.
func TestCollectPerAddressLimitCORS(t *testing.T) {
	e := newCollectEnv(t)
	hdr := map[string]string{"Origin": "https://shop.example", "X-Publishable-Key": e.acct.PublishableKey}
	for _, path := range []string{"/v1/collect/network", "/v1/collect/device"} {
		var ctx *fasthttp.RequestCtx
		for i := 0; i < 400; i++ {
			if ctx = e.call("POST", path, "73.0.0.1:5000", hdr, `{"v":1}`); ctx.Response.StatusCode() == 429 {
				break
			}
		}
		h := &ctx.Response.Header
		if ctx.Response.StatusCode() != 429 || string(h.Peek("Retry-After")) == "" ||
			string(h.Peek("Access-Control-Allow-Origin")) != "https://shop.example" || string(h.Peek("Vary")) != "Origin" {
			t.Fatalf("%s over the per-address limit: %d %s", path, ctx.Response.StatusCode(), h.String())
		}
	}
}

// TestDeviceReportWithoutUA: a device report that leaves navigator.userAgent
// out is assessed against its request's User-Agent, so a headless browser
// (or a script) does not pass as unchecked by leaving it out.
func TestDeviceReportWithoutUA(t *testing.T) {
	e := newCollectEnv(t)
	pk := e.acct.PublishableKey
	b, err := os.ReadFile("../intel/device/testdata/chrome_headless_linux.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		Signals map[string]any `json:"signals"`
	}
	if err := json.Unmarshal(b, &fx); err != nil {
		t.Fatal(err)
	}
	ua, _ := fx.Signals["ua"].(string)
	if !strings.Contains(ua, "HeadlessChrome") {
		t.Fatalf("fixture ua %q", ua)
	}
	delete(fx.Signals, "ua")
	fx.Signals["key"] = pk
	body, _ := json.Marshal(fx.Signals)
	ctx := e.call("POST", "/v1/collect/device", "73.0.0.1:1", map[string]string{"Content-Type": "text/plain", "Origin": "https://shop.example", "User-Agent": ua}, string(body))
	if ctx.Response.StatusCode() != 200 {
		t.Fatalf("collect device: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	var out struct {
		EventID string `json:"event_id"`
	}
	json.Unmarshal(ctx.Response.Body(), &out)
	tok := e.token(t, pk, "73.0.0.1:1", nil, `{"v":1,"key":"PK"}`)
	st, m, raw := e.evaluate(t, e.acct.LiveKey, map[string]any{"token": tok, "fingerprintEventId": out.EventID})
	dev, _ := m["device"].(map[string]any)
	if st != 200 || dev == nil || dev["automation"] != true {
		t.Fatalf("headless report without its ua: %d %s", st, raw)
	}
}

// TestEvaluateSharedTimeZones: a zone tzdata uses in several countries
// (zone1970.tab's first column; tz_country.csv's countries_1970 for the
// backward names) matches an address in any of them, and timezone.country
// is then the address's country (SPEC 2.2: matches_ip is "zone's country
// equals country"); an address elsewhere still mismatches and names the
// zone's own country.
func TestEvaluateSharedTimeZones(t *testing.T) {
	e := newCollectEnv(t)
	pk, live := e.acct.PublishableKey, e.acct.LiveKey
	for _, c := range []struct {
		remote, tz, country, tzCountry string
		mismatch                       bool
	}{
		{"2.21.16.9:1", "Europe/Zurich", "DE", "DE", false},         // zone1970: CH,DE,LI (Büsingen)
		{"31.10.16.9:1", "Europe/Zurich", "LI", "LI", false},        // backward: Vaduz → Zurich
		{"31.10.16.9:1", "Europe/Vaduz", "LI", "LI", false},         // zone.tab
		{"2.148.0.9:1", "Europe/Berlin", "NO", "NO", false},         // zone1970: DE,DK,NO,SE,SJ
		{"31.203.0.9:1", "Asia/Riyadh", "KW", "KW", false},          // zone1970: SA,AQ,KW,YE
		{"1.52.0.9:1", "Asia/Bangkok", "VN", "VN", false},           // zone1970: TH,CX,KH,LA,VN
		{"5.28.32.9:1", "Asia/Bangkok", "KH", "KH", false},          // zone1970: TH,CX,KH,LA,VN
		{"41.77.80.9:1", "Africa/Lagos", "CM", "CM", false},         // zone1970: NG,AO,BJ,CD,CF,CG,CM,GA,GQ,NE
		{"5.21.0.9:1", "Asia/Dubai", "OM", "OM", false},             // zone1970: AE,OM,RE,SC,TF
		{"23.185.48.9:1", "America/Toronto", "BS", "BS", false},     // zone1970: CA,BS
		{"2.57.0.9:1", "Europe/Simferopol", "RU", "RU", false},      // zone1970: RU,UA
		{"9.168.0.9:1", "America/Coral_Harbour", "CA", "CA", false}, // backward → Panama (Atikokan); countries_1970 CA
		{"103.166.208.9:1", "Pacific/Ponape", "FM", "FM", false},    // backward → Guadalcanal (Pohnpei); table said SB
		{"103.166.208.9:1", "Pacific/Truk", "FM", "FM", false},      // backward → Port_Moresby (Chuuk); table said PG
		{"88.202.80.9:1", "Africa/Asmera", "ER", "ER", false},       // backward → Nairobi (Asmara); table said KE
		{"41.73.96.9:1", "Africa/Timbuktu", "ML", "ML", false},      // backward → Abidjan (Mali); table said CI
		{"5.23.64.9:1", "Iceland", "IS", "IS", false},               // backward → Abidjan (#= Reykjavik); table said CI
		{"38.83.64.9:1", "America/Virgin", "VI", "VI", false},       // backward → Puerto_Rico (St Thomas); table said PR
		{"2.3.0.9:1", "Europe/Zurich", "FR", "CH", true},
		{"2.59.96.9:1", "Europe/Berlin", "CH", "DE", true},
		{"2.3.0.9:1", "Asia/Bangkok", "FR", "TH", true},
		{"2.21.16.9:1", "Africa/Asmera", "DE", "KE", true},
	} {
		t.Run(c.tz+"_"+c.country, func(t *testing.T) {
			tok := e.token(t, pk, c.remote, nil, `{"v":1,"key":"PK"}`)
			st, m, raw := e.evaluate(t, live, map[string]any{"token": tok, "tz": c.tz})
			tz, _ := m["timezone"].(map[string]any)
			if st != 200 || m["country"] != c.country || tz == nil || tz["reported"] != c.tz || tz["country"] != c.tzCountry ||
				tz["checked"] != true || tz["matches_ip"] != !c.mismatch || collectHasReason(m, "timezone_mismatch") != c.mismatch {
				t.Fatalf("%d %s", st, raw)
			}
			if want := map[bool]string{false: "allow", true: "review"}[c.mismatch]; m["decision"] != want {
				t.Fatalf("decision %v, want %s: %s", m["decision"], want, raw)
			}
		})
	}
}
