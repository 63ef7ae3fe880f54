package embedetcd

import (
	"context"
	"os"
	"sync"
)

// Fataler is the part of testing.TB that Shared needs (this package is
// linked into fraudd, so it does not import testing).
type Fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Shared is one etcd member for a whole test binary: the first test that
// asks starts it (in a temporary directory, with Config), and TestMain stops
// it once every test ran. Tests then keep apart by working under cluster
// roots of their own.
type Shared struct {
	Config Config // Dir is ignored: a temporary one is made

	once      sync.Once
	endpoints []string
	err       error
	stop      func()
}

// Endpoints starts the member on first use and returns its client URLs; a
// member that cannot start fails the test.
func (s *Shared) Endpoints(tb Fataler) []string {
	tb.Helper()
	s.once.Do(func() {
		dir, err := os.MkdirTemp("", "fraudd-etcd-")
		if err != nil {
			s.err = err
			return
		}
		c := s.Config
		c.Dir = dir
		srv, err := Start(context.Background(), c)
		if err != nil {
			os.RemoveAll(dir)
			s.err = err
			return
		}
		s.endpoints = srv.Endpoints()
		s.stop = func() { srv.Close(); os.RemoveAll(dir) }
	})
	if s.err != nil {
		tb.Fatalf("embedded etcd: %v", s.err)
	}
	return s.endpoints
}

// Stop ends the member if it was started.
func (s *Shared) Stop() {
	if s.stop != nil {
		s.stop()
		s.stop = nil
	}
}
