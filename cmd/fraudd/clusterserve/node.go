// Package clusterserve starts a fraudd node in cluster mode (docs/cluster.md):
// the etcd client (and, when asked, an etcd member in the process), the
// membership lease, the owner view and the shard balancer, and the account
// configuration kept in etcd. `fraudd serve` calls it only behind
// --cluster-etcd or --cluster-embedded-etcd; single-node mode never starts
// any of it.
package clusterserve

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/fraudd/fraudd/actors/checks"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/cluster"
	"github.com/fraudd/fraudd/cluster/embedetcd"
	"github.com/fraudd/fraudd/cluster/rpc"
)

// Config is what serve's --cluster-* flags say.
type Config struct {
	Name string
	// Endpoints of etcd; empty with Embedded: the embedded member's own.
	Endpoints []string
	// CA, Cert and Key are PEM files; a CA or a certificate turns on TLS.
	CA, Cert, Key string
	NodeID        string
	// Listen and Advertise are the node-to-node gRPC addresses.
	Listen, Advertise string
	LeaseTTL          time.Duration
	// Embedded, when set, runs an etcd member in this process first.
	Embedded *embedetcd.Config
	// DialTimeout bounds the first contact with etcd; 10 s when zero.
	DialTimeout time.Duration
	Logger      *slog.Logger
}

// Parts is what a running node hands to serve's wiring: the seam where the
// cluster replaces local typed clients by routing ones. A nil field keeps
// serve's local client.
type Parts struct {
	// Quota, when set, is the quota client the checks pipeline calls
	// instead of the local *quota.Client: the routing client of
	// cluster/rpc, which charges on the account shard's owner. StartRPC
	// sets it.
	Quota checks.Quota
}

// Node is a running cluster node.
type Node struct {
	cfg    Config
	log    *slog.Logger
	etcd   *embedetcd.Server
	cli    *clientv3.Client
	root   string
	member *cluster.Member
	owners *cluster.OwnerView
	bal    *cluster.Balancer
	cancel context.CancelFunc
	// stopBal ends the balancer's passes (done closes after), before the
	// rest of the node's background work (cancel).
	stopBal context.CancelFunc
	done    chan struct{}

	// Parts is the seam described on the type; StartRPC fills it.
	Parts Parts
	rpc   *rpc.Quota
	// quota is the node's own quota actors (StartRPC sets it): a shard's
	// accounts are dropped from them when the shard leaves the node.
	quota atomic.Pointer[quota.Client]

	config *ConfigSync
}

// Start connects to etcd (starting the embedded member first when asked),
// joins the cluster and starts the owner view and the balancer. Any failure
// is returned and everything started is stopped: a node that cannot reach
// its cluster does not run as a lone node.
func Start(ctx context.Context, cfg Config) (_ *Node, err error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	root, err := cluster.Root(cfg.Name)
	if err != nil {
		return nil, err
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	n := &Node{cfg: cfg, log: log.With("cluster", cfg.Name, "node", cfg.NodeID), root: root, done: make(chan struct{})}
	defer func() {
		if err != nil {
			n.closeConn()
		}
	}()
	endpoints := cfg.Endpoints
	if cfg.Embedded != nil {
		if n.etcd, err = embedetcd.Start(ctx, *cfg.Embedded); err != nil {
			return nil, err
		}
		n.log.Info("embedded etcd member started", "name", cfg.Embedded.Name, "dir", cfg.Embedded.Dir, "clients", strings.Join(n.etcd.Endpoints(), ","))
		if len(endpoints) == 0 {
			endpoints = n.etcd.Endpoints()
		}
	}
	tlsCfg, err := tlsConfig(cfg)
	if err != nil {
		return nil, err
	}
	n.cli, err = clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: cfg.DialTimeout, TLS: tlsCfg, Logger: zap.NewNop(),
		// Keepalives notice a dead connection within a lease TTL.
		DialKeepAliveTime: time.Second, DialKeepAliveTimeout: cfg.DialTimeout,
		// gRPC's default reconnect backoff grows to minutes: after an etcd
		// restart the node would stay cut off (and lose its lease) long
		// after etcd is back. A second at most keeps it within one TTL.
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: time.Second,
		})}})
	if err != nil {
		return nil, fmt.Errorf("cluster: etcd client for %s: %w", strings.Join(endpoints, ","), err)
	}
	reach, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	if _, err = n.cli.Get(reach, root+"members/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
		return nil, fmt.Errorf("cluster: etcd at %s is unreachable after %v (%v): a cluster node does not start without it", strings.Join(endpoints, ","), cfg.DialTimeout, err)
	}
	if n.member, err = cluster.Join(reach, cluster.MemberConfig{Client: n.cli, Root: root, ID: cfg.NodeID, Addr: cfg.Advertise, TTL: cfg.LeaseTTL, Logger: log}); err != nil {
		if errors.Is(err, cluster.ErrDuplicateID) {
			return nil, fmt.Errorf("cluster: node id %q is registered by another live process: give each node its own --cluster-node-id", cfg.NodeID)
		}
		return nil, fmt.Errorf("cluster: join %s as %s: %w", cfg.Name, cfg.NodeID, err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	n.cancel = stop
	if n.owners, err = cluster.NewOwnerView(n.cli, root); err == nil {
		err = n.owners.Start(runCtx)
	}
	if err != nil {
		stop()
		n.member.Close()
		return nil, fmt.Errorf("cluster: owner view: %w", err)
	}
	n.bal, err = cluster.NewBalancer(cluster.BalancerConfig{Member: n.member, View: n.owners, Kinds: []cluster.Kind{cluster.KindAccount, cluster.KindAddr},
		Releasing: n.releasing,
		Acquired: func(_ context.Context, c cluster.Claim) {
			if c.Kind == cluster.KindAccount {
				// A non-owner holds accounts of the shard too: its own
				// totals (CountTotal) load them. Their month counts are
				// stale for an owner; the first charge must load the sum.
				n.dropAccounts(c.Shard, n.cfg.LeaseTTL)
			}
		},
		Lost: func(c cluster.Claim) {
			n.log.Warn("cluster shard lost with the membership lease", "kind", c.Kind, "shard", c.Shard)
			if c.Kind == cluster.KindAccount {
				// What this node holds of the shard's accounts is stale
				// now: another owner counts them. Forget it, so that should
				// the shard come back, the count starts from the sum.
				n.dropAccounts(c.Shard, n.cfg.LeaseTTL)
			}
		}})
	if err != nil {
		stop()
		n.member.Close()
		return nil, err
	}
	balCtx, stopBal := context.WithCancel(runCtx)
	n.stopBal = stopBal
	go func() {
		defer close(n.done)
		n.bal.Run(balCtx)
	}()
	n.log.Info("joined cluster", "members", strings.Join(n.member.MemberIDs(), ","), "lease_ttl", cfg.LeaseTTL, "advertise", cfg.Advertise)
	return n, nil
}

func tlsConfig(cfg Config) (*tls.Config, error) {
	if cfg.CA == "" && cfg.Cert == "" {
		return nil, nil
	}
	t := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CA != "" {
		pem, err := os.ReadFile(cfg.CA)
		if err != nil {
			return nil, fmt.Errorf("cluster: etcd CA: %w", err)
		}
		t.RootCAs = x509.NewCertPool()
		if !t.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("cluster: etcd CA %s holds no PEM certificate", cfg.CA)
		}
	}
	if cfg.Cert != "" {
		c, err := tls.LoadX509KeyPair(cfg.Cert, cfg.Key)
		if err != nil {
			return nil, fmt.Errorf("cluster: etcd client certificate: %w", err)
		}
		t.Certificates = []tls.Certificate{c}
	}
	return t, nil
}

// Down names what of the cluster this node cannot vouch for right now: its
// membership lease (lost, or not renewed within its TTL). serve adds it to
// the health monitor's list, so /api/status reports the API degraded.
func (n *Node) Down() []string {
	if n.member.Held(time.Now()) {
		return nil
	}
	return []string{"cluster membership"}
}

// Member is the node's membership (tests, and the gRPC service to come).
func (n *Node) Member() *cluster.Member { return n.member }

// Owners is the node's view of the shard owners.
func (n *Node) Owners() *cluster.OwnerView { return n.owners }

// Balancer keeps the node's shard claims on the assignment.
func (n *Node) Balancer() *cluster.Balancer { return n.bal }

// Client is the node's etcd client.
func (n *Node) Client() *clientv3.Client { return n.cli }

// Root is the cluster's key prefix.
func (n *Node) Root() string { return n.root }

// Leave hands every shard over, revokes the membership lease and closes the
// connection: the graceful end, after the HTTP server drained.
func (n *Node) Leave(ctx context.Context) error {
	var errs []error
	// The balancer stops first: while this node is still a member, its
	// passes would claim again the shards ReleaseAll just handed over
	// (the assignment still names it), and charge them until the lease
	// goes, a share the next owner could then no longer read.
	n.stopBal()
	<-n.done
	if err := n.bal.ReleaseAll(ctx); err != nil {
		errs = append(errs, fmt.Errorf("cluster: hand shards over: %w", err))
	}
	n.cancel()
	if n.config != nil {
		n.config.stop()
	}
	if err := n.member.Leave(ctx); err != nil {
		errs = append(errs, err)
	}
	n.closeConn()
	return errors.Join(errs...)
}

// Close stops without handing anything over (the lease runs out on its own),
// for a start that failed half-way.
func (n *Node) Close() {
	n.cancel()
	<-n.done
	if n.config != nil {
		n.config.stop()
	}
	n.member.Close()
	n.closeConn()
}

func (n *Node) closeConn() {
	if n.cli != nil {
		n.cli.Close()
	}
	if n.etcd != nil {
		n.etcd.Close()
		n.etcd = nil
	}
}

// releasing runs before an account shard is handed to its next owner, after
// the Balancer stopped reporting the claim (nothing new is admitted for it):
// the shard's accounts leave the quota actors once every charge admitted
// before is stored, so the next owner's G-counter read sees all of this
// node's share. An error keeps the shard; the next pass tries again.
func (n *Node) releasing(_ context.Context, c cluster.Claim) error {
	if c.Kind != cluster.KindAccount {
		return nil
	}
	return n.dropAccounts(c.Shard, n.cfg.LeaseTTL)
}

// dropAccounts forgets the accounts of an account shard in the quota actors.
func (n *Node) dropAccounts(shard int, wait time.Duration) error {
	q := n.quota.Load()
	if q == nil {
		return nil // before StartRPC nothing was charged
	}
	err := q.Drop(func(acc string) bool { return cluster.ShardOf(cluster.KindAccount, acc) == shard }, wait)
	if err != nil {
		n.log.Warn("cluster: an account shard's quota state not flushed", "shard", shard, "err", err)
	}
	return err
}
