package e2e

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"
)

// hookHit is one request a webhook receiver got.
type hookHit struct {
	Path, Timestamp, Signature, EventID, UserAgent string
	Body                                           []byte
}

// hookReceiver is a loopback webhook endpoint: /ok answers 200, /fail 500,
// /fail-once 500 to its first request and 200 afterwards.
type hookReceiver struct {
	*httptest.Server
	mu   sync.Mutex
	hits []hookHit
}

func newHookReceiver(t *testing.T) *hookReceiver {
	t.Helper()
	h := &hookReceiver{}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		h.hits = append(h.hits, hookHit{Path: r.URL.Path, Timestamp: r.Header.Get("X-Service-Timestamp"),
			Signature: r.Header.Get("X-Service-Signature"), EventID: r.Header.Get("X-Service-Event-Id"),
			UserAgent: r.Header.Get("User-Agent"), Body: b})
		first := r.URL.Path == "/fail-once" && len(h.hits) == 1
		h.mu.Unlock()
		if r.URL.Path == "/fail" || first {
			http.Error(w, "down for maintenance", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *hookReceiver) all() []hookHit {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]hookHit(nil), h.hits...)
}

// waitHits waits (real time, bounded) until the receiver has n requests.
func (h *hookReceiver) waitHits(t *testing.T, n int) []hookHit {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if got := h.all(); len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("webhook receiver has %d requests, want %d", len(h.all()), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// verifySignature checks a hit the way SPEC §6 tells receivers to.
func verifySignature(h hookHit, secret string) bool {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(h.Timestamp + "."))
	m.Write(h.Body)
	want := "sha256=" + hex.EncodeToString(m.Sum(nil))
	return hmac.Equal([]byte(want), []byte(h.Signature))
}

type hookPayload struct {
	Event      string         `json:"event"`
	EventID    string         `json:"event_id"`
	Timestamp  string         `json:"timestamp"`
	IP         string         `json:"ip"`
	ThreatType string         `json:"threat_type"`
	Details    map[string]any `json:"details"`
}

func decodeHook(t *testing.T, h hookHit) hookPayload {
	t.Helper()
	var p hookPayload
	if err := json.Unmarshal(h.Body, &p); err != nil {
		t.Fatalf("webhook body: %v\n%s", err, h.Body)
	}
	return p
}

type deliveryRow struct {
	EventID       string  `json:"event_id"`
	Event         string  `json:"event"`
	Attempt       int     `json:"attempt"`
	Status        string  `json:"status"`
	StatusCode    *int    `json:"status_code"`
	Error         *string `json:"error"`
	URL           string  `json:"url"`
	Timestamp     string  `json:"timestamp"`
	AttemptedAt   string  `json:"attempted_at"`
	NextAttemptAt *string `json:"next_attempt_at"`
}

func deliveries(t *testing.T, s *Server, id string) []deliveryRow {
	t.Helper()
	r := s.Admin(t, "GET", "/admin/v1/accounts/"+id+"/webhook/deliveries", nil)
	if r.Status != 200 {
		t.Fatalf("deliveries: %d %s", r.Status, r.Body)
	}
	var rows []deliveryRow
	if err := json.Unmarshal(r.Body, &rows); err != nil {
		t.Fatalf("deliveries: %v %s", err, r.Body)
	}
	return rows
}

// waitDelivery waits until the newest logged attempt of event is attempt n:
// its end is then stamped, so moving the clock afterwards is safe.
func waitDelivery(t *testing.T, s *Server, id, event string, n int) []deliveryRow {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		rows := deliveries(t, s, id)
		for _, d := range rows {
			if d.EventID == event && d.Attempt == n {
				return rows
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no logged attempt %d of %s: %+v", n, event, rows)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var hex32 = regexp.MustCompile(`^[0-9a-f]{32}$`)

func TestWebhookDeliveryEndToEnd(t *testing.T) {
	s := Start(t, bin, "--allow-private-webhooks")
	rcv := newHookReceiver(t)
	a := s.CreateAccount(t, map[string]any{"email": "hooks@example.com", "plan": "growth"})
	base := "/admin/v1/accounts/" + a.ID

	if r := s.Admin(t, "POST", base+"/webhook/test", nil); r.Status != 409 {
		t.Fatalf("test event without a URL: %d %s", r.Status, r.Body)
	}
	if r := s.Admin(t, "PUT", base+"/rules", []map[string]any{{"signal": "disposable_email", "action": "block"}}); r.Status != 200 {
		t.Fatalf("rules: %d %s", r.Status, r.Body)
	}
	if r := s.Admin(t, "PUT", base+"/webhook", map[string]any{"url": rcv.URL + "/ok"}); r.Status != 200 {
		t.Fatalf("set webhook: %d %s", r.Status, r.Body)
	}

	evaluate := func(key, body string) map[string]any {
		t.Helper()
		r := s.Do(t, Req{Method: "POST", Path: "/v1/evaluate", Bearer: key, Body: body})
		if r.Status != 200 {
			t.Fatalf("evaluate %s: %d %s", body, r.Status, r.Body)
		}
		return r.JSON(t)
	}
	// Test tokens (any key), the personal test key and the sandbox never fire.
	for _, tok := range []string{"test_tor", "test_vpn", "test_proxy"} {
		evaluate(a.LiveKey, `{"token":"`+tok+`","email":"x@mailinator.com"}`)
		evaluate(a.TestKey, `{"token":"`+tok+`"}`)
		evaluate("sk_test_sandbox", `{"token":"`+tok+`"}`)
	}
	if m := evaluate(a.TestKey, `{"email":"x@mailinator.com"}`); m["decision"] != "block" {
		t.Fatalf("test key, rule block: %v", m)
	}
	// A clean live evaluation does not fire either.
	evaluate(a.LiveKey, `{"email":"someone@gmail.com"}`)

	// A live, degraded evaluation that the disposable_email rule blocks fires.
	if m := evaluate(a.LiveKey, `{"email":"x@mailinator.com"}`); m["decision"] != "block" || m["degraded"] != true {
		t.Fatalf("live rule block: %v", m)
	}
	h := rcv.waitHits(t, 1)[0]
	time.Sleep(500 * time.Millisecond) // anything the test traffic wrongly queued would have arrived
	if n := len(rcv.all()); n != 1 {
		t.Fatalf("%d webhook requests, want 1 (test tokens, test key or sandbox fired)", n)
	}
	p := decodeHook(t, h)
	if p.Event != "threat.detected" || !hex32.MatchString(p.EventID) || h.EventID != p.EventID || p.IP != "unknown" ||
		p.ThreatType != "Custom rule (disposable_email)" {
		t.Fatalf("payload: %s", h.Body)
	}
	if _, err := time.Parse(time.RFC3339, p.Timestamp); err != nil {
		t.Fatalf("timestamp %q: %v", p.Timestamp, err)
	}
	d := p.Details
	if d["decision"] != "block" || d["ip"] != "unknown" || d["cc"] != nil || d["exception_matched"] != nil || d["vpn"] != false || d["tor"] != false {
		t.Fatalf("details: %s", h.Body)
	}
	if rm, _ := d["rule_matched"].([]any); len(rm) != 1 || rm[0] != "disposable_email" {
		t.Fatalf("rule_matched: %s", h.Body)
	}
	for _, k := range []string{"ip", "cc", "vpn", "proxied", "tor", "dch", "bot", "tampering", "antidetect", "virtual_machine", "privacy_relay", "decision", "rule_matched", "exception_matched"} {
		if _, ok := d[k]; !ok {
			t.Errorf("details.%s missing: %s", k, h.Body)
		}
	}
	ts, err := strconv.ParseInt(h.Timestamp, 10, 64)
	if err != nil || time.Since(time.Unix(ts, 0)).Abs() > time.Minute {
		t.Fatalf("X-Service-Timestamp %q", h.Timestamp)
	}
	if !verifySignature(h, a.WebhookSecret) {
		t.Fatalf("signature %s does not verify with the account's secret", h.Signature)
	}
	if h.Path != "/ok" || h.UserAgent == "" {
		t.Fatalf("request: %+v", h)
	}
	rows := waitDelivery(t, s, a.ID, p.EventID, 1)
	if r := rows[0]; r.Status != "delivered" || r.StatusCode == nil || *r.StatusCode != 200 || r.Error != nil || r.NextAttemptAt != nil || r.Event != "threat.detected" {
		t.Fatalf("delivery row: %+v", r)
	}

	// The console's test event: 202, same shape, sample values, signed.
	r := s.Admin(t, "POST", base+"/webhook/test", nil)
	if r.Status != 202 {
		t.Fatalf("test event: %d %s", r.Status, r.Body)
	}
	testID, _ := r.JSON(t)["event_id"].(string)
	h = rcv.waitHits(t, 2)[1]
	if p := decodeHook(t, h); p.Event != "test" || p.EventID != testID || h.EventID != testID || p.ThreatType == "" || p.Details["decision"] == nil {
		t.Fatalf("test event: %s", h.Body)
	}
	if !verifySignature(h, a.WebhookSecret) {
		t.Fatal("test event signature")
	}

	// A rotated secret signs the very next delivery.
	r = s.Admin(t, "POST", base+"/webhook/secret/rotate", nil)
	secret2, _ := r.JSON(t)["webhook_secret"].(string)
	if r.Status != 200 || secret2 == "" {
		t.Fatalf("rotate: %d %s", r.Status, r.Body)
	}
	s.Admin(t, "POST", base+"/webhook/test", nil)
	h = rcv.waitHits(t, 3)[2]
	if !verifySignature(h, secret2) || verifySignature(h, a.WebhookSecret) {
		t.Fatal("delivery after rotation not signed with the new secret")
	}

	// A failing receiver: retried ≈1 min and ≈8 min after the failed
	// attempt, by the service clock, then no more after 3 attempts.
	if r := s.Admin(t, "PUT", base+"/webhook", map[string]any{"url": rcv.URL + "/fail"}); r.Status != 200 {
		t.Fatalf("set failing webhook: %d %s", r.Status, r.Body)
	}
	evaluate(a.LiveKey, `{"email":"y@mailinator.com"}`)
	first := rcv.waitHits(t, 4)[3]
	failID := first.EventID
	rows = waitDelivery(t, s, a.ID, failID, 1)
	if r := rows[0]; r.Status != "retrying" || r.StatusCode == nil || *r.StatusCode != 500 || r.NextAttemptAt == nil || r.Error == nil {
		t.Fatalf("failed attempt row: %+v", r)
	}
	// The retry is signed with whatever secret is current when it goes out.
	r = s.Admin(t, "POST", base+"/webhook/secret/rotate", nil)
	secret3, _ := r.JSON(t)["webhook_secret"].(string)

	time.Sleep(1500 * time.Millisecond) // a tick or more: nothing is due yet
	if n := len(rcv.all()); n != 4 {
		t.Fatalf("retried before the minute passed: %d requests", n)
	}
	s.Advance(t, "61s")
	second := rcv.waitHits(t, 5)[4]
	waitDelivery(t, s, a.ID, failID, 2)
	s.Advance(t, "8m")
	third := rcv.waitHits(t, 6)[5]
	rows = waitDelivery(t, s, a.ID, failID, 3)
	for i, x := range []hookHit{first, second, third} {
		if x.EventID != failID || x.Path != "/fail" || decodeHook(t, x).EventID != failID {
			t.Fatalf("attempt %d: event id %s, want %s", i+1, x.EventID, failID)
		}
	}
	if !verifySignature(first, secret2) || !verifySignature(second, secret3) || !verifySignature(third, secret3) {
		t.Fatal("retries not signed afresh with the current secret")
	}
	if first.Timestamp == second.Timestamp || second.Timestamp == third.Timestamp {
		t.Fatal("retries reuse the first attempt's timestamp")
	}
	if r := rows[0]; r.EventID != failID || r.Attempt != 3 || r.Status != "failed" || r.NextAttemptAt != nil {
		t.Fatalf("last attempt row: %+v", r)
	}
	s.Advance(t, "1h")
	time.Sleep(2500 * time.Millisecond) // two ticks or more
	if n := len(rcv.all()); n != 6 {
		t.Fatalf("%d requests: a 4th attempt was made", n)
	}

	// The list: newest first, the failed event's three attempts on top.
	rows = deliveries(t, s, a.ID)
	if len(rows) != 6 {
		t.Fatalf("%d deliveries listed, want 6: %+v", len(rows), rows)
	}
	for i, want := range []int{3, 2, 1} {
		if rows[i].EventID != failID || rows[i].Attempt != want || rows[i].StatusCode == nil || *rows[i].StatusCode != 500 {
			t.Fatalf("row %d: %+v", i, rows[i])
		}
	}
	if rows[3].Event != "test" || rows[5].EventID != p.EventID {
		t.Fatalf("older rows: %+v", rows[3:])
	}
	for i := 1; i < len(rows); i++ {
		if rows[i].AttemptedAt > rows[i-1].AttemptedAt {
			t.Fatalf("not newest first: %+v", rows)
		}
	}
}

func TestWebhookURLValidation(t *testing.T) {
	s := Start(t, bin) // no --allow-private-webhooks
	a := s.CreateAccount(t, map[string]any{"email": "val@example.com"})
	path := "/admin/v1/accounts/" + a.ID + "/webhook"
	for url, want := range map[string]int{
		"https://hooks.example/fraud":        200,
		"https://hooks.slack.com/services/x": 200,
		"http://hooks.example/fraud":         400,
		"https://127.0.0.1/hook":             400,
		"https://10.0.0.8/hook":              400,
		"https://[::1]:8443/hook":            400,
		"https://localhost/hook":             400,
		"ftp://hooks.example/x":              400,
	} {
		if r := s.Admin(t, "PUT", path, map[string]any{"url": url}); r.Status != want {
			t.Errorf("PUT %s: %d %s, want %d", url, r.Status, r.Body, want)
		}
	}
	if r := s.Admin(t, "PUT", path, map[string]any{"url": nil}); r.Status != 200 || string(r.Body) != `{"url":null}` {
		t.Errorf("clear: %d %s", r.Status, r.Body)
	}
	if r := s.Admin(t, "GET", "/admin/v1/accounts/acc_nope/webhook/deliveries", nil); r.Status != 404 {
		t.Errorf("deliveries of an unknown account: %d", r.Status)
	}
	if r := s.Admin(t, "POST", "/admin/v1/accounts/acc_nope/webhook/test", nil); r.Status != 404 {
		t.Errorf("test event for an unknown account: %d", r.Status)
	}

	p := Start(t, bin, "--allow-private-webhooks")
	b := p.CreateAccount(t, map[string]any{"email": "val2@example.com"})
	if r := p.Admin(t, "PUT", "/admin/v1/accounts/"+b.ID+"/webhook", map[string]any{"url": "http://127.0.0.1:9/hook"}); r.Status != 200 {
		t.Errorf("private receiver with the flag: %d %s", r.Status, r.Body)
	}
}

// TestWebhookRetrySurvivesKill: the receiver fails the first attempt; the
// server is killed (SIGKILL) before the retry is due and started again on the
// same data dir; once the service clock passes the retry time (1 minute after
// the failed attempt) the retry arrives, exactly once, as the same event.
func TestWebhookRetrySurvivesKill(t *testing.T) {
	s := Start(t, bin, "--allow-private-webhooks")
	rcv := newHookReceiver(t)
	a := s.CreateAccount(t, map[string]any{"email": "hooks-kill@example.com", "plan": "growth"})
	base := "/admin/v1/accounts/" + a.ID
	if r := s.Admin(t, "PUT", base+"/rules", []map[string]any{{"signal": "disposable_email", "action": "block"}}); r.Status != 200 {
		t.Fatalf("rules: %d %s", r.Status, r.Body)
	}
	if r := s.Admin(t, "PUT", base+"/webhook", map[string]any{"url": rcv.URL + "/fail-once"}); r.Status != 200 {
		t.Fatalf("set webhook: %d %s", r.Status, r.Body)
	}
	if r := s.Do(t, Req{Method: "POST", Path: "/v1/evaluate", Bearer: a.LiveKey, Body: `{"email":"x@mailinator.com"}`}); r.Status != 200 {
		t.Fatalf("evaluate: %d %s", r.Status, r.Body)
	}
	first := rcv.waitHits(t, 1)[0]
	rows := waitDelivery(t, s, a.ID, first.EventID, 1)
	if r := rows[0]; r.Status != "retrying" || r.NextAttemptAt == nil {
		t.Fatalf("first attempt: %+v", r)
	}
	// The pending record is written before the attempt is logged, and the
	// store syncs written-behind records within 50 ms.
	time.Sleep(200 * time.Millisecond)
	s.Kill()
	s.start()

	time.Sleep(1500 * time.Millisecond) // a tick or more: not due yet
	if n := len(rcv.all()); n != 1 {
		t.Fatalf("retried before its time after the restart: %d requests", n)
	}
	s.Advance(t, "61s")
	second := rcv.waitHits(t, 2)[1]
	if second.EventID != first.EventID || second.Path != "/fail-once" || decodeHook(t, second).EventID != first.EventID {
		t.Fatalf("retry: event %s, want %s", second.EventID, first.EventID)
	}
	if !verifySignature(second, a.WebhookSecret) || second.Timestamp == first.Timestamp {
		t.Fatal("retry not signed afresh")
	}
	if string(second.Body) != string(first.Body) {
		t.Fatalf("retry body changed:\n%s\n%s", first.Body, second.Body)
	}
	rows = waitDelivery(t, s, a.ID, first.EventID, 2)
	if r := rows[0]; r.Attempt != 2 || r.Status != "delivered" {
		t.Fatalf("retry row: %+v", r)
	}
	// Delivered: nothing more, not even after the second retry's time or
	// another restart.
	s.Advance(t, "10m")
	s.Restart()
	s.Advance(t, "10m")
	time.Sleep(2500 * time.Millisecond) // two ticks or more
	if n := len(rcv.all()); n != 2 {
		t.Fatalf("%d requests, want 2: the retry was sent more than once", n)
	}
}
