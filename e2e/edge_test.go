package e2e

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// rawExchange writes req as is on a fresh connection and returns the parsed
// answer (nil when the server closed without one).
func rawExchange(t *testing.T, s *Server, req string) *http.Response {
	t.Helper()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(s.URL, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatalf("write: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(strings.NewReader(string(b)))
	return resp
}

// TestMalformedRequestsLogNoSecrets: fasthttp logged a malformed request's
// whole header block at WARN, Authorization included. Malformed requests
// carrying every kind of credential must leave none of it in the log, and a
// flood of them must not flood the log.
func TestMalformedRequestsLogNoSecrets(t *testing.T) {
	s := Start(t, bin)
	const creds = "Authorization: Bearer sk_live_CANARYlive0123456789abcdefghij\r\n" +
		"X-Test-Key: sk_test_CANARYtest0123456789abcdefghij\r\n" +
		"X-Pub: pk_live_CANARYpub0123456789abcdefghij\r\n" +
		"X-Admin: adm_CANARYadmin0123456789abcdefghij\r\n"
	malformed := []string{
		// A header line without a colon.
		"POST /v1/evaluate HTTP/1.1\r\nHost: x\r\n" + creds + "no colon here\r\n\r\n",
		// A Content-Length that is not a number.
		"POST /v1/evaluate HTTP/1.1\r\nHost: x\r\n" + creds + "Content-Length: abc\r\n\r\n",
		// A broken chunked body.
		"POST /v1/evaluate HTTP/1.1\r\nHost: x\r\n" + creds + "Transfer-Encoding: chunked\r\n\r\nzz\r\nbody\r\n0\r\n\r\n",
		// A request line with no protocol.
		"GET /v1/usage\r\n" + creds + "\r\n",
		// A credential on a line without a colon: the parser quotes the line.
		"GET /v1/usage HTTP/1.1\r\nHost: x\r\nAuthorization Bearer sk_live_CANARYnocolon0123456789abcdef\r\n\r\n",
		// A space before the colon.
		"GET /v1/usage HTTP/1.1\r\nHost: x\r\n" + creds + "Bad Header : 1\r\n\r\n",
	}
	for i := 0; i < 60; i++ {
		for _, m := range malformed {
			if resp := rawExchange(t, s, m); resp != nil && resp.StatusCode < 400 {
				t.Fatalf("malformed request answered %d:\n%q", resp.StatusCode, m)
			}
		}
	}
	// Let the server finish writing its log lines.
	if r := s.Do(t, Req{Path: "/api/status"}); r.Status != 200 {
		t.Fatalf("status: %d", r.Status)
	}
	time.Sleep(200 * time.Millisecond)
	logs := s.Logs()
	for _, secret := range []string{"CANARY", "sk_live_", "sk_test_", "pk_live_", "adm_", "Bearer "} {
		if strings.Contains(logs, secret) {
			i := strings.Index(logs, secret)
			t.Fatalf("the log holds %q:\n%s", secret, logs[max(0, i-300):min(len(logs), i+200)])
		}
	}
	// 360 malformed requests: the connection-error line is rate limited.
	if n := strings.Count(logs, `msg="connection error"`); n == 0 || n > 60 {
		t.Fatalf("%d log lines for 360 malformed requests:\n%s", n, logs)
	}
}

// TestRequestFraming: a request carrying both Content-Length and
// Transfer-Encoding is refused (400, connection closed) whatever their order
// and whatever the coding (identity too);
// headers past 8 KiB get 431 and a target past 4 KiB 414, in the JSON error
// shape. A plain chunked request still works.
func TestRequestFraming(t *testing.T) {
	s := Start(t, bin)
	body := `{"ip":"8.8.8.8"}`
	chunked := "10\r\n" + body + "\r\n0\r\n\r\n"
	for _, hdr := range []string{
		"Content-Length: 16\r\nTransfer-Encoding: chunked\r\n",
		"Transfer-Encoding: chunked\r\nContent-Length: 16\r\n",
		"transfer-encoding: chunked\r\ncontent-length: 99\r\n",
	} {
		resp := rawExchange(t, s, "POST /api/lookup HTTP/1.1\r\nHost: x\r\nUser-Agent: "+UserAgent+"\r\n"+hdr+"\r\n"+chunked)
		if resp == nil || resp.StatusCode != 400 || !resp.Close || !jsonError(t, resp) {
			t.Fatalf("%q: %+v", hdr, resp)
		}
	}
	// An empty chunked body: fasthttp then sets Content-Length 0 and drops
	// Transfer-Encoding from its parsed header, so only the raw header block
	// still shows both.
	for _, hdr := range []string{
		"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
		"Transfer-Encoding: chunked\r\nContent-Length: 0\r\n",
	} {
		resp := rawExchange(t, s, "POST /api/lookup HTTP/1.1\r\nHost: x\r\nUser-Agent: "+UserAgent+"\r\n"+hdr+"\r\n0\r\n\r\n")
		if resp == nil || resp.StatusCode != 400 || !resp.Close || !jsonError(t, resp) {
			t.Fatalf("%q with an empty chunked body: %+v", hdr, resp)
		}
	}
	// "identity", which fasthttp drops from its parsed header, beside a
	// length: a proxy in front may still have read the body another way.
	for _, hdr := range []string{
		"Transfer-Encoding: identity\r\nContent-Length: 16\r\n",
		"Content-Length: 16\r\nTRANSFER-ENCODING: Identity\r\n",
	} {
		resp := rawExchange(t, s, "POST /api/lookup HTTP/1.1\r\nHost: x\r\nUser-Agent: "+UserAgent+"\r\n"+hdr+"\r\n"+body)
		if resp == nil || resp.StatusCode != 400 || !resp.Close || !jsonError(t, resp) {
			t.Fatalf("%q: %+v", hdr, resp)
		}
	}
	resp := rawExchange(t, s, "POST /api/lookup HTTP/1.1\r\nHost: x\r\nUser-Agent: "+UserAgent+"\r\nTransfer-Encoding: chunked\r\n\r\n"+chunked)
	if resp == nil || resp.StatusCode != 200 {
		t.Fatalf("plain chunked request: %+v", resp)
	}
	resp = rawExchange(t, s, "GET /api/status?x="+strings.Repeat("a", 5000)+" HTTP/1.1\r\nHost: x\r\nUser-Agent: "+UserAgent+"\r\n\r\n")
	if resp == nil || resp.StatusCode != 414 || !jsonError(t, resp) {
		t.Fatalf("long target: %+v", resp)
	}
	resp = rawExchange(t, s, "GET /api/status HTTP/1.1\r\nHost: x\r\nUser-Agent: "+UserAgent+"\r\nX-Big: "+strings.Repeat("b", 10<<10)+"\r\n\r\n")
	if resp == nil || resp.StatusCode != 431 || !jsonError(t, resp) {
		t.Fatalf("large headers: %+v", resp)
	}
	if r := s.Do(t, Req{Path: "/api/status?x=" + strings.Repeat("a", 3000)}); r.Status != 200 {
		t.Fatalf("a 3 KB target: %d", r.Status)
	}
}

// jsonError reports whether resp carries the SPEC error shape.
func jsonError(t *testing.T, resp *http.Response) bool {
	t.Helper()
	var m map[string]any
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &m); err != nil {
		t.Logf("body %q: %v", b, err)
		return false
	}
	msg, ok := m["error"].(string)
	return ok && msg != "" && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json")
}

// TestAdminTokenLockout: wrong operator tokens are throttled like bad API
// keys: 20 from one caller lock it out for 15 minutes (429, Retry-After:
// 900), the right token included; other callers are not affected.
func TestAdminTokenLockout(t *testing.T) {
	s := Start(t, bin)
	from := func(addr, token string) *Response {
		return s.Do(t, Req{Path: "/admin/v1/mail", Bearer: token, Header: map[string]string{"X-Forwarded-For": addr}})
	}
	for i := 0; i < 20; i++ {
		if r := from("198.51.100.90", "adm_guess_"+itoa(i)); r.Status != 401 {
			t.Fatalf("wrong token %d: %d %s", i, r.Status, r.Body)
		}
	}
	r := from("198.51.100.90", AdminToken)
	if r.Status != 429 || r.Header.Get("Retry-After") != "900" || r.JSON(t)["error"] == nil {
		t.Fatalf("locked-out caller: %d %v %s", r.Status, r.Header, r.Body)
	}
	if r := from("198.51.100.91", AdminToken); r.Status != 200 {
		t.Fatalf("another caller: %d %s", r.Status, r.Body)
	}
	s.Advance(t, "16m")
	if r := from("198.51.100.90", AdminToken); r.Status != 200 {
		t.Fatalf("after the lockout: %d %s", r.Status, r.Body)
	}
}

// TestAdminInputs: emails with a NUL or invalid UTF-8 and over-long webhook
// URLs are refused; exception pins come back exactly as they were put.
func TestAdminInputs(t *testing.T) {
	s := Start(t, bin)
	for _, body := range []string{
		`{"email":"ops\u0000@example.com"}`,
		"{\"email\":\"ops\xff@example.com\"}",
		`{"email":"ops\u0007@example.com"}`,
	} {
		if r := s.Admin(t, "POST", "/admin/v1/accounts", []byte(body)); r.Status != 400 || r.JSON(t)["error"] == nil {
			t.Fatalf("%q: %d %s", body, r.Status, r.Body)
		}
	}
	a := s.CreateAccount(t, map[string]any{"email": "inputs@example.com"})
	long := "https://hooks.example.com/" + strings.Repeat("a", 2048)
	if r := s.Admin(t, "PUT", "/admin/v1/accounts/"+a.ID+"/webhook", map[string]any{"url": long}); r.Status != 400 {
		t.Fatalf("long webhook URL: %d %s", r.Status, r.Body)
	}
	pins := []map[string]any{
		{"ip": "8.8.4.4", "action": "block"},
		{"ip": "2606:4700::1111", "action": "review"},
		{"ip": "1.1.1.0/24", "action": "allow", "label": "resolver"},
	}
	r := s.Admin(t, "PUT", "/admin/v1/accounts/"+a.ID+"/exceptions", pins)
	if r.Status != 200 {
		t.Fatalf("put pins: %d %s", r.Status, r.Body)
	}
	for _, r := range []*Response{r, s.Admin(t, "GET", "/admin/v1/accounts/"+a.ID+"/exceptions", nil)} {
		var got []map[string]any
		json.Unmarshal(r.Body, &got)
		if len(got) != 3 || got[0]["ip"] != "8.8.4.4" || got[1]["ip"] != "2606:4700::1111" || got[2]["ip"] != "1.1.1.0/24" {
			t.Fatalf("pins read back: %s", r.Body)
		}
	}
	if m := s.Do(t, Req{Path: "/v1/lookup/8.8.4.4", Bearer: a.LiveKey}).JSON(t); m["verdict"] != "block" || m["verdict_source"] != "exception" {
		t.Fatalf("pinned lookup: %v", m)
	}
}
