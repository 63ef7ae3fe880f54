// Package embedetcd runs an etcd member inside the process
// (go.etcd.io/etcd/server/v3/embed): the tests of package cluster use one, and
// so will the --cluster-embedded-etcd option, which lets a small cluster run
// without an external etcd as M3DB and k3s do. It is a package of its own so
// that nothing links the etcd server unless it asks for it.
package embedetcd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Config describes one member. The zero value (with Dir set) is a single
// member on loopback with ports the kernel picks.
type Config struct {
	// Dir holds the member's data. Required: an etcd member without its data
	// directory is a different member.
	Dir string
	// Name is the member's name in InitialCluster; "default" when empty.
	Name string
	// ClientURL and PeerURL are where the member listens, e.g.
	// http://127.0.0.1:2379. Empty: loopback on a port the kernel picks.
	ClientURL, PeerURL string
	// InitialCluster lists every member of a new cluster as
	// name=peerURL,name=peerURL. Empty: this member alone.
	InitialCluster string
	// Join, instead of InitialCluster, names client URLs of a running etcd
	// cluster this member joins (join.go): added as a learner, started,
	// then promoted. On a data directory that already holds the member's
	// data it only starts.
	Join []string
	// Tick is the raft heartbeat interval and Election the election
	// timeout; zero keeps etcd's 100 ms and 1 s. Leases shorter than
	// 1.5 × Election are raised to it by etcd, so tests that expire
	// leases quickly lower both.
	Tick, Election time.Duration
	// NoFsync turns off etcd's fsync: tests only, never for data anyone keeps.
	NoFsync bool
	// StartTimeout bounds the wait for the member to be ready; 30 s when zero.
	StartTimeout time.Duration
	// Logger gets etcd's own log. Nil discards it: etcd logs at error level
	// on every normal shutdown.
	Logger *zap.Logger
}

// Server is a running member.
type Server struct {
	e         *embed.Etcd
	endpoints []string
	// close is the member's etcd Close (a test's stand-in for one that
	// hangs).
	close func()
}

// Start starts the member and waits until it serves clients.
func Start(ctx context.Context, c Config) (*Server, error) {
	if c.Dir == "" {
		return nil, errors.New("embedded etcd: a data directory is required")
	}
	cfg := embed.NewConfig()
	cfg.Dir = c.Dir
	cfg.Name = "default"
	if c.Name != "" {
		cfg.Name = c.Name
	}
	lg := c.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)
	cfg.UnsafeNoFsync = c.NoFsync
	if c.Tick > 0 {
		cfg.TickMs = uint(c.Tick / time.Millisecond)
	}
	if c.Election > 0 {
		cfg.ElectionMs = uint(c.Election / time.Millisecond)
	}
	client, err := urlOrLoopback(c.ClientURL)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: client URL: %w", err)
	}
	peer, err := urlOrLoopback(c.PeerURL)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: peer URL: %w", err)
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	if c.InitialCluster != "" {
		cfg.InitialCluster = c.InitialCluster
	}
	var learner uint64
	if len(c.Join) > 0 {
		if c.InitialCluster != "" {
			return nil, errors.New("embedded etcd: join an existing cluster or list a new one's members, not both")
		}
		cfg.ClusterState = embed.ClusterStateFlagExisting
		if !hasData(c.Dir) {
			jctx, cancel := context.WithTimeout(ctx, joinTimeout)
			initial, id, err := addLearner(jctx, c.Join, cfg.Name, peer.String())
			cancel()
			if err != nil {
				return nil, fmt.Errorf("embedded etcd: join the cluster at %s: %w", strings.Join(c.Join, ","), err)
			}
			cfg.InitialCluster, learner = initial, id
		}
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: start in %s: %w", c.Dir, err)
	}
	if len(c.Join) > 0 && learner == 0 && e.Server.IsLearner() {
		// A join stopped before its promotion (a kill, a failed promote):
		// the member restarts on its data as a learner, which refuses
		// clients. Promote it now, as the join would have.
		learner = uint64(e.Server.MemberID())
	}
	wait := c.StartTimeout
	if wait <= 0 {
		wait = 30 * time.Second
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	// A learner is promoted while it starts: etcd readies a member once it
	// has published itself through raft, which a learner's proposal does
	// not reliably get through (it timed out for 7 s and more in tests)
	// until it votes.
	promoted := make(chan error, 1)
	if learner != 0 {
		pctx, cancel := context.WithTimeout(ctx, joinTimeout)
		defer cancel()
		go func() { promoted <- promote(pctx, c.Join, learner) }()
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		closeUnready(e)
		return nil, fmt.Errorf("embedded etcd: %w", err)
	case <-t.C:
		closeUnready(e)
		return nil, fmt.Errorf("embedded etcd: not ready after %v", wait)
	case <-ctx.Done():
		closeUnready(e)
		return nil, ctx.Err()
	}
	s := &Server{e: e, close: e.Close}
	for _, l := range e.Clients {
		s.endpoints = append(s.endpoints, l.Addr().String())
	}
	if learner != 0 {
		err := <-promoted
		// The cluster has promoted the member; it serves clients (a
		// learner refuses them) once it has applied that itself.
		for deadline := time.Now().Add(joinTimeout); err == nil && e.Server.IsLearner(); {
			if time.Now().After(deadline) {
				err = errors.New("promoted, but the member still acts as a learner")
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err != nil {
			e.Close()
			return nil, fmt.Errorf("embedded etcd: joined as a learner but not promoted: %w", err)
		}
	}
	return s, nil
}

// closeUnready closes a member that never became ready. etcd's Close alone
// hangs then: it waits for the client servers, which start only once the
// member is ready or its server is stopping (etcd issue 9533), so the
// server is stopped first.
func closeUnready(e *embed.Etcd) {
	e.Server.Stop()
	e.Close()
}

// urlOrLoopback parses u, or reserves a loopback port when u is empty.
// Reserving means listening and closing, so another process could take the
// port in between; for a single member that is a test-only risk, and a
// cluster of embedded members is given fixed URLs.
func urlOrLoopback(u string) (url.URL, error) {
	if u != "" {
		p, err := url.Parse(u)
		if err != nil {
			return url.URL{}, err
		}
		return *p, nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return url.URL{}, err
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		return url.URL{}, err
	}
	return url.URL{Scheme: "http", Host: addr}, nil
}

// Endpoints are the host:port addresses clients dial.
func (s *Server) Endpoints() []string { return append([]string(nil), s.endpoints...) }

// Close stops the member and waits for it to finish.
func (s *Server) Close() { s.close() }

// CloseBy stops the member, waiting for it to finish until by at most (a
// zero by: for as long as it takes). etcd's Close can block well past a
// supervisor's grace: a member that lost its quorum waits out etcd's own
// timeouts (a leadership transfer, requests in flight). Past by, the close
// goes on in the background and the error says it was cut short: the
// process's exit then stops the member as a crash would, which etcd
// recovers from its WAL.
func (s *Server) CloseBy(by time.Time) error {
	if by.IsZero() {
		s.close()
		return nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.close()
	}()
	t := time.NewTimer(max(0, time.Until(by)))
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		return errors.New("embedded etcd: close cut short by its deadline (the member did not stop in time: lost quorum?); it stops with the process")
	}
}
