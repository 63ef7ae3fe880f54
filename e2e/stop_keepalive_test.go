package e2e

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStopClosesKeepAliveWithTheAnswer: a request in flight when SIGTERM
// arrives is answered, and its answer says Connection: close. Without it
// the server closed the keep-alive connection right after the answer, and
// a client that sent its next request on it at that moment got a reset or
// an EOF for a request the server never read.
func TestStopClosesKeepAliveWithTheAnswer(t *testing.T) {
	s := Start(t, bin)
	conn, rest := halfSentLookup(t, s)
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the stop has begun
	if _, err := io.WriteString(conn, rest); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("the request in flight at SIGTERM got no answer: %v\n%s", err, s.Logs())
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || !resp.Close {
		t.Fatalf("answer during the stop: %d, Connection %q; want 200 and close", resp.StatusCode, resp.Header.Get("Connection"))
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
}

// halfSentLookup opens a connection to s and sends a free lookup's head and
// the first bytes of its body: a request in flight, which a stop's drain
// waits for. rest completes it. The connection closes with the test.
func halfSentLookup(t *testing.T, s *Server) (conn net.Conn, rest string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	body := `{"ip":"8.8.8.8"}`
	head := "POST /api/lookup HTTP/1.1\r\nHost: x\r\nUser-Agent: e2e/1\r\nContent-Type: application/json\r\nContent-Length: " +
		itoa(len(body)) + "\r\n\r\n"
	if _, err := io.WriteString(conn, head+body[:6]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the server reads the head and waits for the rest
	return conn, body[6:]
}
