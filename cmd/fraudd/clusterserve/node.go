// Package clusterserve starts a fraudd node in cluster mode (docs/cluster.md):
// the etcd client (and, when asked, an etcd member in the process), the
// membership lease, the owner view and the shard balancer, and the account
// configuration kept in etcd. `fraudd serve` calls it only behind
// --cluster-etcd or --cluster-embedded-etcd; single-node mode never starts
// any of it.
package clusterserve

import (
	"context"
	"crypto/subtle"
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
	"github.com/fraudd/fraudd/storage"
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
	// LeaseAfter is rpc.QuotaConfig.LeaseAfter: a hot account's charges a
	// second past which this node charges slices of its allowance.
	LeaseAfter int64
	// LeaseFile, in the node's data dir, keeps its membership lease's id,
	// so that a restart takes over the registration its previous process
	// left (cluster.MemberConfig.LeaseFile); empty: none.
	LeaseFile string
	// StampFile, in the node's data dir, names the cluster and node the
	// data dir belongs to (checkDirStamp); empty: not checked.
	StampFile string
	// Embedded, when set, runs an etcd member in this process first.
	Embedded *embedetcd.Config
	// DialTimeout bounds the first contact with etcd; 10 s when zero.
	DialTimeout time.Duration
	// KeyCheck is the master secret's check value (secrets.Master.KeyCheck):
	// the first node records it in etcd and every node must match it
	// (SecretCheck). Empty: not checked.
	KeyCheck []byte
	Logger   *slog.Logger
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
	// Feed, when set, is the threat feed's counts: this node's and every
	// other member's, summed (StartRPC sets it).
	Feed rpc.FeedReader
	// Events, when set, is the device-event client the checks pipeline
	// calls instead of the local *events.Client: it resolves an event at
	// the node that stored it (StartRPC sets it).
	Events checks.Events
	// Devices, when set, is the admin device list read at each account's
	// owner, where its history lives (StartRPC sets it).
	Devices rpc.LocalDevices
	// Evaluations, Deliveries and Mail, when set, are the admin lists of
	// an account's recent evaluations, its webhook deliveries and the
	// outbox: this node's own and every other member's, merged
	// (ServeLists sets them).
	Evaluations *rpc.EvaluationList
	Deliveries  *rpc.DeliveryList
	Mail        *rpc.MailList
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
	// server is the node-to-node service (StartRPC; nil before).
	server *rpc.Server
	// quota is the node's own quota actors (StartRPC sets it): a shard's
	// accounts are dropped from them when the shard leaves the node.
	quota atomic.Pointer[quota.Client]

	config *ConfigSync
	// shares is the node's own store, read for the hand-over on leaving,
	// and now its clock (StartRPC sets both).
	shares ShareExporter
	now    func() time.Time
	// windows are the hourly windows of the accounts whose shard left this
	// node, answered to the next owner with this node's shares.
	windows *rpc.HandedWindows
	// health is the other members' last health round (StartRPC starts it);
	// localDown what this node answers theirs (SetLocalDown).
	health    atomic.Pointer[rpc.MemberHealth]
	localDown atomic.Pointer[func() []string]
	// history moves device history to the shards' owners (StartRPC sets
	// it): a released shard's goes to its next owner first.
	history atomic.Pointer[rpc.HistoryMover]
}

// ShareExporter reads what a leaving node hands over (*storage.DB).
type ShareExporter interface {
	ExportShares(self string, months []storage.Month, fn func(storage.OriginShare) error) error
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
	n := &Node{cfg: cfg, log: log.With("cluster", cfg.Name, "node", cfg.NodeID), root: root, done: make(chan struct{}), windows: rpc.NewHandedWindows(), now: time.Now}
	defer func() {
		if err != nil {
			n.closeConn(time.Time{})
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
	if err = SecretCheck(reach, n.cli, root, cfg.Name, cfg.KeyCheck); err != nil {
		return nil, err
	}
	if err = checkDirStamp(reach, n.cli, root, cfg); err != nil {
		return nil, err
	}
	if n.member, err = cluster.Join(reach, cluster.MemberConfig{Client: n.cli, Root: root, ID: cfg.NodeID, Addr: cfg.Advertise, TTL: cfg.LeaseTTL, LeaseFile: cfg.LeaseFile, Logger: log}); err != nil {
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
				// No wait for the store: requests are already routed here
				// (the view shows the claim) and wait for it to be recorded.
				n.forgetAccounts(c.Shard, n.cfg.LeaseTTL)
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

// ErrSecretMismatch: this node's master secret is not the cluster's.
var ErrSecretMismatch = errors.New("master secret differs from the cluster's")

// SecretCheck records the master secret's check value under root the first
// time any node starts, and refuses a node whose value differs: the
// configuration in etcd is sealed with the secret and every key is hashed
// with it, so a node with another secret (one left to generate its own)
// would answer 401 to every key the others issued, and could read nothing
// they wrote, while its status said operational. The value is what Pebble
// stores of the secret (a derived check), never the secret.
func SecretCheck(ctx context.Context, cli *clientv3.Client, root, name string, check []byte) error {
	if len(check) == 0 {
		return nil
	}
	key := root + "secret-check"
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(check))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return fmt.Errorf("cluster: record the master secret's check: %w", err)
	}
	if resp.Succeeded {
		return nil
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 1 && subtle.ConstantTimeCompare(kvs[0].Value, check) == 1 {
		return nil
	}
	return fmt.Errorf("cluster: this node's master secret is not the one cluster %q was started with: give every node the same --secret/FRAUDD_SECRET: %w", name, ErrSecretMismatch)
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
// membership lease (lost, or not renewed within its TTL), and what the
// other members reported down or whether they did not answer, as of the
// last round (MemberHealth). serve adds it to the health monitor's list, so
// /api/status on any node reports the cluster degraded.
func (n *Node) Down() []string {
	down := n.OwnDown()
	if h := n.health.Load(); h != nil {
		down = append(down, h.Down()...)
	}
	return down
}

// OwnDown is Down without the other members: what this node answers them.
func (n *Node) OwnDown() []string {
	var down []string
	if !n.member.Held(time.Now()) {
		down = append(down, "cluster membership")
	}
	// An account configuration this build cannot decode: the node serves
	// the copies it had and cannot vouch for the rest (ConfigSync.readable
	// refuses a start on it).
	if c := n.config; c != nil && c.Unreadable() > 0 {
		down = append(down, fmt.Sprintf("cluster configuration (%d accounts this build cannot decode)", c.Unreadable()))
	}
	return down
}

// SetLocalDown sets what this node answers the others' health rounds: its
// own down list (stopped actor shards, OwnDown), never what they reported.
func (n *Node) SetLocalDown(f func() []string) { n.localDown.Store(&f) }

func (n *Node) answerDown() []string {
	if f := n.localDown.Load(); f != nil {
		return (*f)()
	}
	return n.OwnDown()
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

// Leave hands every shard over, then this node's counts, revokes the
// membership lease and closes the connection: the graceful end, after the
// HTTP server drained.
//
// The order matters. The balancer stops first: while this node is still
// a member its passes would claim again the shards ReleaseAll hands over.
// The node then marks itself leaving, so the assignment leaves it out and
// the others claim each shard as soon as it is released, while this node
// still answers their share requests (requests for a shard wait for the
// new claim instead of for the lease to go). Its counts go last: once
// every shard is released they are final, and the others keep them under
// this node's id, so the accounts' sums do not drop by what it charged.
//
// Every step keeps to ctx's deadline (serve's shutdown grace): what the
// deadline cuts short is logged, and costs what a crash of this node
// would for that part only (the shards not released go with the lease;
// shares not handed over count again when the node rejoins).
func (n *Node) Leave(ctx context.Context) error {
	var errs []error
	n.stopBal()
	select {
	case <-n.done:
	case <-ctx.Done():
		// A pass is waiting on something (its etcd calls end with its
		// context, a shard's release may wait for the quota store): the
		// steps below fail fast on the ended ctx, up to the lease's end.
		n.log.Warn("cluster: leave cut short: the balancer's last pass did not end within the shutdown grace")
	}
	if err := n.member.SetLeaving(ctx); err != nil {
		// Not fatal: the others claim the shards once the lease goes.
		n.log.Warn("cluster: could not mark this node leaving", "err", err)
	}
	if err := n.bal.ReleaseAll(ctx); err != nil {
		errs = append(errs, fmt.Errorf("cluster: hand shards over: %w", err))
	}
	if ctx.Err() != nil {
		n.log.Warn("cluster: leave cut short by the shutdown grace: the shards not released go with the lease, and this node's shares count again when it rejoins with its data dir",
			"account_shards_left", n.bal.Owned(cluster.KindAccount), "addr_shards_left", n.bal.Owned(cluster.KindAddr))
	}
	if err := n.handOverShares(ctx); err != nil {
		errs = append(errs, err)
	} else if err := n.member.Retire(ctx); err != nil {
		// Its shares are held by others now: a load that notes this node
		// as missing costs only a reload when it returns.
		n.log.Warn("cluster: this node's record as a holder of shares not removed", "err", err)
	}
	n.cancel()
	if n.config != nil {
		n.config.stop()
	}
	if err := n.member.Leave(ctx); err != nil {
		errs = append(errs, err)
	}
	by, _ := ctx.Deadline()
	n.closeConn(by)
	return errors.Join(errs...)
}

// handOverFlushWait bounds handOverShares' wait for the increments queued
// before it (and so does half of what is left of its context).
const handOverFlushWait = 5 * time.Second

// handOverShares sends this node's counts of this month and the last (the
// one a late charge may still belong to) and its lifetime totals, with
// every share it adopted, to the other members.
func (n *Node) handOverShares(ctx context.Context) error {
	q, db := n.rpc, n.shares
	if q == nil || db == nil {
		return nil // StartRPC never ran: nothing was charged
	}
	// The charges answered ahead of their commit (the Interval mode) are
	// in the export only once committed. Leave runs before the quota
	// actors stop, and the requests it drains may have charged a moment
	// ago.
	if local := n.quota.Load(); local != nil {
		wait := handOverFlushWait
		if d, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(d)/2) // half: the hand-over itself needs the rest
		}
		if err := local.Flush(wait); err != nil {
			// What is committed still goes: the increments still queued
			// stay in this node's store (once committed) and count again
			// when it rejoins with its data dir.
			n.log.Warn("cluster: this node's last increments were not stored before its shares were read for the hand-over; they count again when it rejoins", "err", err)
		}
	}
	now := n.now()
	months := []storage.Month{storage.MonthOf(now), storage.MonthOf(storage.MonthOf(now).Start().Add(-time.Hour))}
	var shares []storage.OriginShare
	if err := db.ExportShares(n.member.ID(), months, func(s storage.OriginShare) error {
		shares = append(shares, s)
		return nil
	}); err != nil {
		return fmt.Errorf("cluster: read this node's shares to hand over: %w", err)
	}
	if len(shares) == 0 {
		return nil
	}
	stored, err := q.HandOver(ctx, shares)
	if stored == 0 {
		if err == nil {
			err = errors.New("no other member to take them")
		}
		// Nothing is lost for good: the shares stay in this node's store
		// and count again when it rejoins with its data dir.
		return fmt.Errorf("cluster: hand %d shares over: %w (they count again when this node rejoins with its data dir)", len(shares), err)
	}
	if err != nil {
		n.log.Warn("cluster: some members did not take this node's shares", "stored_by", stored, "err", err)
	}
	n.log.Info("cluster: shares handed over", "shares", len(shares), "members", stored)
	return nil
}

// Close stops without handing anything over (the lease runs out on its own),
// for a start that failed half-way.
func (n *Node) Close() { n.CloseBy(time.Time{}) }

// CloseBy is Close keeping to by (zero: no deadline): the embedded etcd
// member's close, the one step that can outlast a supervisor's grace, is
// given up on then (logged).
func (n *Node) CloseBy(by time.Time) {
	n.cancel()
	<-n.done
	if n.config != nil {
		n.config.stop()
	}
	n.member.Close()
	n.closeConn(by)
}

// closeConn closes the etcd client, and the embedded member by by (zero: no
// deadline), logging a close cut short.
func (n *Node) closeConn(by time.Time) {
	if n.cli != nil {
		n.cli.Close()
	}
	if n.etcd != nil {
		if err := n.etcd.CloseBy(by); err != nil {
			n.log.Warn("cluster: embedded etcd member not stopped by the shutdown grace", "err", err)
		}
		n.etcd = nil
	}
}

// releasing runs before an account shard is handed to its next owner, after
// the Balancer stopped reporting the claim (nothing new is admitted for it):
// the shard's accounts leave the quota actors once every charge admitted
// before is stored, so the next owner's G-counter read sees all of this
// node's share. An error keeps the shard; the next pass tries again.
//
// The shard's device history then goes to the member the assignment names
// next, so that it holds the history before it claims the shard. A
// delivery that fails does not keep the shard: the records stay here and
// the mover's next round sends them to whoever owns the shard by then.
func (n *Node) releasing(ctx context.Context, c cluster.Claim) error {
	if c.Kind != cluster.KindAccount {
		return nil
	}
	wait := n.cfg.LeaseTTL
	if d, ok := ctx.Deadline(); ok {
		// A leave's release keeps to its deadline (Leave).
		wait = min(wait, time.Until(d))
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := n.dropAccounts(c.Shard, wait); err != nil {
		return err
	}
	if h := n.history.Load(); h != nil {
		var others []string
		for _, id := range n.member.ActiveIDs() {
			if id != n.member.ID() {
				others = append(others, id)
			}
		}
		if err := h.Hand(ctx, c.Shard, cluster.Owner(cluster.KindAccount, c.Shard, others)); err != nil {
			n.log.Warn("cluster: device history not handed over with its shard (moved later)", "shard", c.Shard, "err", err)
		}
	}
	return nil
}

// forgetAccounts forgets the accounts of an account shard in the quota
// actors without waiting for their increments to be stored.
func (n *Node) forgetAccounts(shard int, wait time.Duration) {
	q := n.quota.Load()
	if q == nil {
		return
	}
	if _, err := q.Forget(func(acc string) bool { return cluster.ShardOf(cluster.KindAccount, acc) == shard }, wait); err != nil {
		n.log.Warn("cluster: a claimed account shard's stale accounts not forgotten", "shard", shard, "err", err)
	}
}

// dropAccounts forgets the accounts of an account shard in the quota actors
// and keeps their running hourly windows for the shard's next owner.
func (n *Node) dropAccounts(shard int, wait time.Duration) error {
	q := n.quota.Load()
	if q == nil {
		return nil // before StartRPC nothing was charged
	}
	handed, err := q.Drop(func(acc string) bool { return cluster.ShardOf(cluster.KindAccount, acc) == shard }, wait)
	if err != nil {
		n.log.Warn("cluster: an account shard's quota state not flushed", "shard", shard, "err", err)
		return err
	}
	if len(handed) > 0 {
		n.windows.Put(handed, n.now())
	}
	return nil
}
