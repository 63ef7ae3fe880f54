package webhook

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// answered signals each response the delivery client got back, before its
// body is read.
type answered struct {
	http.RoundTripper
	got chan int
}

func (a answered) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := a.RoundTripper.RoundTrip(r)
	if err == nil {
		a.got <- resp.StatusCode
	}
	return resp, err
}

// TestAnsweredAttemptNotResentAfterStop: a receiver that answered 2xx has
// the event, even when the service stops before the attempt's result
// reaches its shard (here: while the answer's body is still being read);
// the next start must not send it again.
func TestAnsweredAttemptNotResentAfterStop(t *testing.T) {
	f := newFixture(t, Config{AllowPrivate: true})
	var hits atomic.Int32
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		n := hits.Add(1)
		w.WriteHeader(http.StatusOK)
		if n == 1 {
			// The answer is in; its body trickles until the test ends.
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	got := make(chan int, 4)
	f.svc.client.Transport = answered{f.svc.client.Transport, got}
	f.dir.set("acc_s", srv.URL, "whsec_s")
	f.svc.Notify(threat("acc_s"))
	if status := <-got; status != http.StatusOK {
		t.Fatalf("answer %d", status)
	}
	f.restart(t)
	settle()
	if n := hits.Load(); n != 1 {
		t.Fatalf("%d attempts: an event the receiver answered 2xx was sent again after a restart", n)
	}
	if p := f.pending(t); len(p) != 0 {
		t.Fatalf("delivered event still pending: %+v", p[0])
	}
}
