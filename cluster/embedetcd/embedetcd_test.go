package embedetcd

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestStartWithoutQuorumFails: a member of a new 2-member cluster whose
// other member never comes is not ready; Start gives up after StartTimeout
// with one clear error (and on a cancelled context), instead of hanging in
// etcd's Close, which waits for client servers that only start once ready.
func TestStartWithoutQuorumFails(t *testing.T) {
	peer, err := urlOrLoopback("")
	if err != nil {
		t.Fatal(err)
	}
	other, err := urlOrLoopback("")
	if err != nil {
		t.Fatal(err)
	}
	c := Config{Dir: t.TempDir(), Name: "one", PeerURL: peer.String(), NoFsync: true,
		InitialCluster: "one=" + peer.String() + ",two=" + other.String(), StartTimeout: 500 * time.Millisecond}
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want string
	}{
		{"timeout", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }, "not ready after"},
		{"cancelled", func() (context.Context, context.CancelFunc) {
			c.StartTimeout = time.Minute
			return context.WithTimeout(context.Background(), 500*time.Millisecond)
		}, "deadline exceeded"},
	} {
		ctx, cancel := tc.ctx()
		done := make(chan error, 1)
		go func() {
			s, err := Start(ctx, c)
			if err == nil {
				s.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: Start without a quorum: %v, want an error with %q", tc.name, err, tc.want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: Start without a quorum still running after 20s", tc.name)
		}
		cancel()
	}
}

// TestCloseByKeepsItsDeadline: a member whose close hangs (etcd's Close
// after a lost quorum waits on etcd's own timeouts) is given up on at the
// deadline with an error saying so, and one that closes in time reports
// nothing.
func TestCloseByKeepsItsDeadline(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	hung := &Server{close: func() { <-release }}
	start := time.Now()
	err := hung.CloseBy(start.Add(100 * time.Millisecond))
	if err == nil || !strings.Contains(err.Error(), "cut short") {
		t.Errorf("a hung close: %v; want one saying it was cut short", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("a hung close with a 100ms deadline took %v", took)
	}

	s, err := Start(context.Background(), Config{Dir: t.TempDir(), Name: "solo", NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CloseBy(time.Now().Add(20 * time.Second)); err != nil {
		t.Errorf("a member that closes in time: %v", err)
	}
}
