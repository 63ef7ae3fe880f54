package e2e

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestAccessLogHasRequestsRefusedWhileRead: README's --access-log promises
// "one structured line per request"; a request fasthttp refuses while
// reading it (400 malformed header, 413 body too large, 431 headers too
// large) is answered, carries an X-Request-Id and is counted in
// fraudd_http_requests_total{route="unreadable"}, and had no access line.
// The bearer sent in the malformed request never reaches the log.
func TestAccessLogHasRequestsRefusedWhileRead(t *testing.T) {
	s := Start(t, bin, "--access-log")
	host := strings.TrimPrefix(s.URL, "http://")
	cases := []struct{ status, raw string }{
		{"400", "GET /v1/usage HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk_live_obsSECRET1\r\nBad Header Line\r\n\r\n"},
		{"413", "POST /v1/evaluate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 70000\r\n\r\n" + strings.Repeat("x", 70000)},
		{"431", "GET /v1/usage HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 9000) + "\r\n\r\n"},
		// A chunked body that does not parse: fasthttp discards the request
		// it had read, so its method and path are unknown to the line.
		{"400", "PUT /admin/v1/accounts/acc_x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"},
	}
	// What the line says the request was: the request's own method and
	// path when they were read (the 413's), empty when they were not —
	// never a GET / that nobody sent.
	wantLine := map[int]string{0: `method="" path="" `, 1: "method=POST path=/v1/evaluate ", 2: `method="" path="" `, 3: `method="" path="" `}
	for ci, c := range cases {
		conn, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(conn, c.raw)
		b, _ := io.ReadAll(conn)
		conn.Close()
		if !strings.HasPrefix(string(b), "HTTP/1.1 "+c.status) {
			t.Fatalf("want %s, got %q", c.status, b)
		}
		// The answer's request id must be in an access line.
		i := strings.Index(string(b), "X-Request-Id: ")
		id := strings.Fields(string(b)[i+len("X-Request-Id: "):])[0]
		deadline := time.Now().Add(2 * time.Second)
		for !strings.Contains(s.Logs(), "request_id="+id) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if !strings.Contains(s.Logs(), "msg=access log=access") || !strings.Contains(s.Logs(), "status="+c.status+" ") || !strings.Contains(s.Logs(), "request_id="+id) {
			t.Errorf("%s answer (request id %s) has no access-log line", c.status, id)
		}
		for _, l := range strings.Split(s.Logs(), "\n") {
			if strings.Contains(l, "request_id="+id) && wantLine[ci] != "" && !strings.Contains(l, wantLine[ci]) {
				t.Errorf("case %d: the access line does not say %q: %s", ci, wantLine[ci], l)
			}
		}
	}
	if strings.Contains(s.Logs(), "obsSECRET1") {
		t.Error("the malformed request's bearer reached the log")
	}
	if t.Failed() {
		t.Logf("logs:\n%s", s.Logs())
	}
}
