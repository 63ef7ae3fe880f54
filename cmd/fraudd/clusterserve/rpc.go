package clusterserve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"

	"github.com/fraudd/fraudd/actors/checks"
	"github.com/fraudd/fraudd/actors/events"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/cluster"
	"github.com/fraudd/fraudd/cluster/rpc"
)

// QuotaStore is the store the node's quota actors get in cluster mode: this
// node's share written to db, the whole count (every member's share) read
// when an account is loaded. StartRPC attaches the client that asks the
// other members.
func (n *Node) QuotaStore(db rpc.LocalStore) *rpc.SharedStore {
	return rpc.NewSharedStore(db, n.member.ID(), n.windows)
}

// healthEvery is how often a node asks the other members for their health.
const healthEvery = time.Second

// NodeStore is the node's own store as the cluster uses it (*storage.DB):
// its shares, answered to others and handed over on leaving.
type NodeStore interface {
	rpc.ShareStore
	ShareExporter
}

// LocalParts are the node's own actors and store that the cluster wiring
// serves to the other members and routes around.
type LocalParts struct {
	Quota   *quota.Client
	Devices *events.Client
	// History is the node's customer device history (*devicehist.Client):
	// the evaluations of accounts this node owns observe it, whichever
	// node they ran on, and their admin device list reads it.
	History interface {
		checks.History
		rpc.LocalDevices
		rpc.LocalHistory
		rpc.MirrorHistory
	}
	Store  NodeStore
	Shared *rpc.SharedStore
	// Traffic is the node's own threat-feed counter, answered to the others.
	Traffic rpc.FeedReader
	// Limits are the node's per-address limiters in shared mode: their
	// counts go to the address shards' owners every rpc.DefaultAddrEvery.
	Limits rpc.AddrLimits
	// Now is the node's clock: the owner's decides the windows it charges.
	Now     func() time.Time
	Timeout time.Duration
}

// StartRPC serves the node-to-node service (fraudd.cluster.v1.Node) on
// --cluster-listen from the node's own parts, and sets Parts.Quota and
// Parts.Events to the routing clients the pipeline calls. stop ends both:
// call it before the quota actors stop. It keeps to by (zero: no
// deadline), past which the graceful stop of the service is cut short.
func (n *Node) StartRPC(lp LocalParts) (stop func(by time.Time), err error) {
	local, db, now := lp.Quota, lp.Store, lp.Now
	owners := rpc.Cluster{Member: n.member, Balancer: n.bal, View: n.owners}
	// A slice is used for at most a third of the membership lease: it ends
	// well before the owner that lent it could lose the shard.
	q, err := rpc.NewQuota(rpc.QuotaConfig{Local: local, Owners: owners, Timeout: lp.Timeout, Logger: n.log,
		LeaseAfter: n.cfg.LeaseAfter, LeaseFor: min(rpc.DefaultLeaseFor, n.cfg.LeaseTTL/3), Now: now})
	if err != nil {
		return nil, err
	}
	evs := q.Events(lp.Devices)
	// An evaluation of an account this node owns, sent by another node or
	// taken over mid-route: the charge here, the event wherever it was
	// stored, the history here.
	owner := &checks.OwnerParts{Quota: local, Events: evs, History: lp.History}
	q.SetOwner(owner)
	// Leased evaluations read a mirror of their owners' device history
	// (mirror.go), and holders mirror this node's.
	q.SetMirror(lp.History)
	addrs := rpc.NewAddrTotals(0)
	history := rpc.NewHistoryMover(rpc.HistoryConfig{Local: lp.History, Owners: owners, Peers: q, Leased: q.Leased, Now: now, Log: n.log,
		Assigned: func(shard int) string { return cluster.Owner(cluster.KindAccount, shard, n.member.ActiveIDs()) }})
	srv, err := rpc.NewServer(rpc.ServerConfig{History: history, Quota: local, Owners: owners, Shares: db, Adopted: lp.Shared.Returned, Windows: n.windows, Traffic: lp.Traffic, Down: n.answerDown, Now: now, Leases: q, Discounts: q, Events: lp.Devices, EventUses: evs,
		Addrs: addrs, AddrOwners: owners, Owner: owner, Devices: lp.History, Mirror: lp.History, Store: lp.Devices, Recent: lp.Devices, Logger: n.log})
	if err != nil {
		q.Close()
		return nil, err
	}
	l, err := net.Listen("tcp", n.cfg.Listen)
	if err != nil {
		q.Close()
		return nil, fmt.Errorf("cluster: node-to-node gRPC on %s: %w", n.cfg.Listen, err)
	}
	// Before serving: a load the first calls cause asks the other members
	// (and reads this node's share only after its queued increments
	// landed: quota.New attached its Flush to the store).
	lp.Shared.Attach(q)
	g := grpc.NewServer(rpc.ServerOptions(n.log)...)
	srv.Register(g)
	served := make(chan error, 1)
	go func() { served <- g.Serve(l) }()
	if err := n.checkAdvertised(q); err != nil {
		g.Stop()
		<-served
		q.Close()
		return nil, err
	}
	// Set before the quota actors are published: the balancer's hooks
	// read them once n.quota is set.
	n.shares, n.now = db, now
	n.quota.Store(local)
	n.Parts.Quota = q
	n.Parts.Events = evs
	n.Parts.Devices = q.DeviceList(lp.History)
	n.Parts.Feed = &rpc.ClusterFeed{Local: lp.Traffic, Peers: q, Log: n.log}
	health := &rpc.MemberHealth{Peers: q, Shares: lp.Shared}
	n.health.Store(health)
	healthCtx, stopHealth := context.WithCancel(context.Background())
	healthDone := make(chan struct{})
	go func() {
		defer close(healthDone)
		health.Run(healthCtx, healthEvery)
	}()
	reporter := &rpc.AddrReporter{Limits: lp.Limits, Totals: addrs, Owners: owners, Peers: q, Now: now, Log: n.log}
	reportDone := make(chan struct{})
	go func() {
		defer close(reportDone)
		reporter.Run(healthCtx, rpc.DefaultAddrEvery)
	}()
	n.history.Store(history)
	historyDone := make(chan struct{})
	go func() {
		defer close(historyDone)
		history.Run(healthCtx, rpc.DefaultHistoryEvery)
	}()
	n.rpc, n.server = q, srv
	n.log.Info("node-to-node gRPC serving", "listen", l.Addr().String(), "advertise", n.cfg.Advertise, "timeout", lp.Timeout)
	return func(by time.Time) {
		stopHealth()
		<-healthDone
		<-reportDone
		<-historyDone
		n.history.Store(nil)
		q.Close()
		wait := rpc.DefaultStopWait
		if !by.IsZero() {
			wait = max(0, min(wait, time.Until(by)))
		}
		// The other members' pipes say bye first.
		if !rpc.StopServer(g, srv, wait) {
			n.log.Warn("cluster: node-to-node service stop cut short: the calls still under way were broken off", "after", wait)
		}
		if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			n.log.Warn("node-to-node gRPC", "err", err)
		}
	}, nil
}

// ServeLists answers the other members' list calls from this node's own
// operator lists, and sets Parts.Evaluations, Parts.Deliveries and
// Parts.Mail to the lists merged over every member. It is called after
// StartRPC, once the lists' actors run (they start after the node-to-node
// service); a nil part is left out.
func (n *Node) ServeLists(l rpc.LocalLists) error {
	if n.rpc == nil || n.server == nil {
		return errors.New("cluster: the operator lists are served after StartRPC")
	}
	n.server.ServeLists(l)
	if l.Evaluations != nil {
		n.Parts.Evaluations = n.rpc.EvaluationList(l.Evaluations)
	}
	if l.Deliveries != nil {
		n.Parts.Deliveries = n.rpc.DeliveryList(l.Deliveries)
	}
	if l.Mail != nil {
		n.Parts.Mail = n.rpc.MailList(l.Mail)
	}
	return nil
}

// RemoteCalls counts the routing client's round trips to other members (0
// before StartRPC).
func (n *Node) RemoteCalls() int64 {
	if n.rpc == nil {
		return 0
	}
	return n.rpc.RemoteCalls()
}

// PipeCalls counts the calls this node sent to other members on their
// pipes, PipeFrames the frames that carried them (0 before StartRPC).
func (n *Node) PipeCalls() int64 {
	if n.rpc == nil {
		return 0
	}
	return n.rpc.PipeCalls()
}

// PipeFrames: see PipeCalls.
func (n *Node) PipeFrames() int64 {
	if n.rpc == nil {
		return 0
	}
	return n.rpc.PipeFrames()
}

// Settles counts the charging calls this node settled with the member
// they went to (0 before StartRPC): see rpc.Quota.Settles.
func (n *Node) Settles() int64 {
	if n.rpc == nil {
		return 0
	}
	return n.rpc.Settles()
}

// Discounts counts the refunded calls this node asked other members to take
// out of their loads of an account (0 before StartRPC): see
// rpc.Quota.Discounts.
func (n *Node) Discounts() int64 {
	if n.rpc == nil {
		return 0
	}
	return n.rpc.Discounts()
}

// LeasedCharges counts the charges this node served from slices of an
// account's allowance (0 before StartRPC); LeaseCalls the Lease calls it
// made for them.
func (n *Node) LeasedCharges() int64 {
	if n.rpc == nil {
		return 0
	}
	return n.rpc.LeasedCharges()
}

// LeasedRests counts the leased evaluations whose device event and
// history this node had the account's owner resolve and observe (0 before
// StartRPC).
func (n *Node) LeasedRests() int64 {
	if n.rpc == nil {
		return 0
	}
	return n.rpc.LeasedRests()
}

// MirrorHits counts the leased evaluations answered from this node's
// mirror of their owner's device history (0 before StartRPC).
func (n *Node) MirrorHits() int64 {
	if n.rpc == nil {
		return 0
	}
	return n.rpc.MirrorHits()
}

// MirrorLateUses counts the first uses of pushed device events that lease
// holders answered after another node had used the event (0 before
// StartRPC).
func (n *Node) MirrorLateUses() int64 {
	if n.server == nil {
		return 0
	}
	return n.server.MirrorLateUses()
}

// MirrorDroppedPushes counts the pushes of records in memory, sent with a
// holder's first watch, that this node dropped because the holder's
// stream was too far behind (0 before StartRPC).
func (n *Node) MirrorDroppedPushes() int64 {
	if n.server == nil {
		return 0
	}
	return n.server.MirrorDroppedPushes()
}

// LeaseCalls: see LeasedCharges.
func (n *Node) LeaseCalls() int64 {
	if n.rpc == nil {
		return 0
	}
	return n.rpc.LeaseCalls()
}

// EventRoute is this node's route in the device-event ids it mints
// (events.Config.Node): another node resolves them here.
func (n *Node) EventRoute() uint16 { return rpc.NodeRoute(n.member.ID()) }

// advertiseCheckWait bounds the start's call to this node's own advertised
// address.
const advertiseCheckWait = 5 * time.Second

// checkAdvertised asks this node at its --cluster-advertise address who it
// is, before it serves. The others reach its shards only there: with a
// wrong address every member answered 503 for the accounts of the shards
// it claimed, while it reported itself healthy. An address of this machine
// that does not answer as this node is surely wrong, and stops the start;
// another (a NAT or load balancer's) may be reachable from the others only,
// so it is logged as an error and the start goes on.
func (n *Node) checkAdvertised(q *rpc.Quota) error {
	ctx, cancel := context.WithTimeout(context.Background(), advertiseCheckWait)
	defer cancel()
	err := q.CheckSelf(ctx)
	if err == nil {
		return nil
	}
	line := fmt.Sprintf("cluster: this node does not answer at its --cluster-advertise address %s (%v): the other members could not reach its shards", n.cfg.Advertise, err)
	if isThisMachine(ctx, n.cfg.Advertise) {
		return errors.New(line)
	}
	n.log.Error(line + "; starting anyway, as the address is not one of this machine's own and may be reachable from the other members only")
	return nil
}

// isThisMachine reports whether hostport's host is a loopback address or
// one of this machine's interface addresses (a name is resolved).
func isThisMachine(ctx context.Context, hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	var ips []net.IP
	if ip := net.ParseIP(host); ip != nil {
		ips = []net.IP{ip}
	} else if addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host); err == nil {
		for _, a := range addrs {
			ips = append(ips, a.IP)
		}
	}
	own, _ := net.InterfaceAddrs()
	for _, ip := range ips {
		if ip.IsLoopback() || ip.IsUnspecified() {
			return true
		}
		for _, a := range own {
			if in, ok := a.(*net.IPNet); ok && in.IP.Equal(ip) {
				return true
			}
		}
	}
	return false
}
