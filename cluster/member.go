package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ProtocolVersion is the version of the node-to-node messages this build
// speaks; members advertise it so a rolling deploy can tell who speaks what.
const ProtocolVersion = 1

// DefaultTTL is the membership lease TTL when none is configured.
const DefaultTTL = 3 * time.Second

// ErrDuplicateID is a registration refused because another live process
// holds the node id.
var ErrDuplicateID = errors.New("cluster: node id is registered by another live process")

// MemberInfo is what a node advertises under members/<id>.
type MemberInfo struct {
	ID      string    `json:"id"`
	Addr    string    `json:"addr"`
	Proto   int       `json:"proto"`
	Epoch   int64     `json:"epoch"`
	Started time.Time `json:"started"`
	// Leaving marks a member on its way out (a graceful leave): it still
	// answers, and holds its claims until it hands them over, but the
	// assignment no longer names it, so the others take each shard as soon
	// as it is released instead of after the lease goes.
	Leaving bool `json:"leaving,omitempty"`
}

// DecodeMemberInfo parses a members/ record.
func DecodeMemberInfo(b []byte) (MemberInfo, error) {
	var mi MemberInfo
	if err := json.Unmarshal(b, &mi); err != nil {
		return MemberInfo{}, fmt.Errorf("member record: %w", err)
	}
	if mi.ID == "" || mi.Proto <= 0 || mi.Epoch <= 0 {
		return MemberInfo{}, errors.New("member record: id, proto and epoch are required")
	}
	return mi, nil
}

var memberCodec = Codec[MemberInfo]{
	Marshal:   func(mi MemberInfo) ([]byte, error) { return json.Marshal(mi) },
	Unmarshal: DecodeMemberInfo,
}

// nodeCodec is a nodes/ record's: the node id.
var nodeCodec = Codec[string]{
	Marshal:   func(id string) ([]byte, error) { return []byte(id), nil },
	Unmarshal: func(b []byte) (string, error) { return string(b), nil },
}

// MemberConfig configures a Member.
type MemberConfig struct {
	Client *clientv3.Client
	// Root is the cluster's prefix (Root(name)).
	Root string
	// ID names the node; unique among live members.
	ID string
	// Addr is the advertised gRPC host:port.
	Addr string
	// TTL of the membership lease, whole seconds, at least 1 s; DefaultTTL
	// when zero.
	TTL time.Duration
	// Now reads the clock; time.Now when nil. Its monotonic reading is what
	// the validity deadline is kept on.
	Now func() time.Time
	// LeaseFile (empty: none) is where the node keeps the id of the lease
	// its registration is under, in its data dir, which one process at a
	// time holds. A start that finds members/<id> under the lease the file
	// names takes that registration over at once (the process that held it
	// is gone: it had the data dir), instead of being refused as a second
	// live process until the lease expires. A stop that could not revoke
	// its lease leaves one behind: a kill, or every node of an embedded
	// etcd stopped at once, which loses the quorum before the last leaves.
	LeaseFile string
	Logger    *slog.Logger
}

// Member is a node's membership: a lease it renews itself, its registration,
// the live member set, and the shards it claimed under that lease.
type Member struct {
	cfg  MemberConfig
	ttl  int64
	log  *slog.Logger
	view *Store[MemberInfo]
	// known are the nodes/ records: every node that may hold a share,
	// live or not (KnownIDs).
	known  *Store[string]
	cancel context.CancelFunc
	done   chan struct{}

	mu         sync.Mutex
	lease      clientv3.LeaseID
	epoch      int64
	info       MemberInfo
	validUntil time.Time
	losses     int
	changed    chan struct{}

	// paused stops renewals (tests: what a SIGSTOP or a long GC pause does).
	paused atomic.Bool
}

// Join registers the node and starts renewing its lease and watching the
// member set, until Close or Leave.
func Join(ctx context.Context, cfg MemberConfig) (*Member, error) {
	if cfg.Client == nil || cfg.Root == "" || cfg.ID == "" {
		return nil, errors.New("cluster member: client, root and id are required")
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.TTL < time.Second || cfg.TTL%time.Second != 0 {
		return nil, fmt.Errorf("cluster member: lease TTL %v: want whole seconds, at least 1s (etcd leases count seconds)", cfg.TTL)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Member{cfg: cfg, ttl: int64(cfg.TTL / time.Second), log: log.With("node", cfg.ID), changed: make(chan struct{}), done: make(chan struct{})}
	view, err := NewStore(StoreConfig[MemberInfo]{
		Client: cfg.Client, Prefix: membersPrefix(cfg.Root), Codec: memberCodec, Logger: log,
		OnChange: func(bool, []string) { m.notify() },
	})
	if err != nil {
		return nil, err
	}
	m.view = view
	if m.known, err = NewStore(StoreConfig[string]{Client: cfg.Client, Prefix: nodesPrefix(cfg.Root), Codec: nodeCodec, Logger: log}); err != nil {
		return nil, err
	}
	if err := m.register(ctx); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	if err := view.Start(runCtx); err != nil {
		cancel()
		m.revoke()
		return nil, err
	}
	if err := m.known.Start(runCtx); err != nil {
		cancel()
		<-view.Done()
		m.revoke()
		return nil, err
	}
	go m.renew(runCtx)
	return m, nil
}

// register grants a new lease and writes members/<id> under it, refusing a
// key another lease holds.
func (m *Member) register(ctx context.Context) error {
	sent := m.cfg.Now()
	g, err := m.cfg.Client.Grant(ctx, m.ttl)
	if err != nil {
		return fmt.Errorf("cluster member %s: grant lease: %w", m.cfg.ID, err)
	}
	m.mu.Lock()
	epoch := m.epoch + 1
	m.mu.Unlock()
	mi := MemberInfo{ID: m.cfg.ID, Addr: m.cfg.Addr, Proto: ProtocolVersion, Epoch: epoch, Started: m.cfg.Now().UTC()}
	info, err := json.Marshal(mi)
	if err != nil {
		return err
	}
	key := membersPrefix(m.cfg.Root) + m.cfg.ID
	create := func() (bool, error) {
		resp, err := m.cfg.Client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, string(info), clientv3.WithLease(g.ID)),
				// The node may hold a share from here on: the record
				// outlives the lease (KnownIDs).
				clientv3.OpPut(nodesPrefix(m.cfg.Root)+m.cfg.ID, m.cfg.ID)).
			Commit()
		return err == nil && resp.Succeeded, err
	}
	ok, err := create()
	if err == nil && !ok {
		var took bool
		if took, err = m.takeOver(ctx, key); err == nil && took {
			ok, err = create()
		}
	}
	if err == nil && !ok {
		err = ErrDuplicateID
	}
	if err != nil {
		rctx, cancel := context.WithTimeout(context.Background(), time.Second)
		m.cfg.Client.Revoke(rctx, g.ID)
		cancel()
		return fmt.Errorf("cluster member %s: register: %w", m.cfg.ID, err)
	}
	m.mu.Lock()
	m.lease, m.epoch, m.info = g.ID, epoch, mi
	m.validUntil = sent.Add(time.Duration(g.TTL) * time.Second)
	m.mu.Unlock()
	m.keepLease(g.ID)
	m.notify()
	return nil
}

// takeOver revokes the lease of this node id's registration found at key
// when it is the lease the LeaseFile names: the registration of this
// node's previous process, which held the data dir this one holds now. The
// revoke takes the registration and the previous process's shard claims
// with it (they name this id, and nothing else would release them before
// the lease expired). It answers false, touching nothing, for a
// registration under any other lease: another live process has the id.
func (m *Member) takeOver(ctx context.Context, key string) (bool, error) {
	prev := m.previousLease()
	if prev == 0 {
		return false, nil
	}
	r, err := m.cfg.Client.Get(ctx, key)
	if err != nil {
		return false, fmt.Errorf("read the registration: %w", err)
	}
	if len(r.Kvs) != 1 || clientv3.LeaseID(r.Kvs[0].Lease) != prev {
		return false, nil
	}
	if _, err := m.cfg.Client.Revoke(ctx, prev); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return false, fmt.Errorf("revoke this node's previous lease %x: %w", int64(prev), err)
	}
	m.log.Info("cluster: took over this node's registration from its previous process", "lease", fmt.Sprintf("%x", int64(prev)))
	return true, nil
}

// previousLease is the lease the LeaseFile names (0: none, or unreadable).
func (m *Member) previousLease() clientv3.LeaseID {
	if m.cfg.LeaseFile == "" {
		return 0
	}
	b, err := os.ReadFile(m.cfg.LeaseFile)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			m.log.Warn("cluster: the previous lease's file is unreadable; a registration left by the previous process is refused until it expires", "file", m.cfg.LeaseFile, "err", err)
		}
		return 0
	}
	id, err := strconv.ParseInt(strings.TrimSpace(string(b)), 16, 64)
	if err != nil || id == 0 {
		m.log.Warn("cluster: the previous lease's file holds no lease id", "file", m.cfg.LeaseFile)
		return 0
	}
	return clientv3.LeaseID(id)
}

// keepLease records the lease in the LeaseFile for the next process, by a
// rename so that a crash leaves the old id or the new, never half of one.
// A failure costs only the next start's takeover: it is logged.
func (m *Member) keepLease(id clientv3.LeaseID) {
	if m.cfg.LeaseFile == "" {
		return
	}
	tmp := m.cfg.LeaseFile + ".tmp"
	err := os.WriteFile(tmp, []byte(strconv.FormatInt(int64(id), 16)+"\n"), 0o600)
	if err == nil {
		err = os.Rename(tmp, m.cfg.LeaseFile)
	}
	if err != nil {
		m.log.Warn("cluster: this node's lease id not recorded; a restart after a stop that could not revoke it waits for it to expire", "file", m.cfg.LeaseFile, "err", err)
	}
}

// renew keeps the lease alive with one KeepAliveOnce every TTL/3 and moves
// the validity deadline to send time + TTL on each answer. A lease etcd no
// longer knows is lost: the member registers again with a new lease and
// epoch; the shards it held went with the old lease.
func (m *Member) renew(ctx context.Context) {
	defer close(m.done)
	every := m.cfg.TTL / 3
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if m.paused.Load() {
			continue
		}
		m.mu.Lock()
		lease := m.lease
		m.mu.Unlock()
		sent := m.cfg.Now()
		rctx, cancel := context.WithTimeout(ctx, every)
		resp, err := m.cfg.Client.KeepAliveOnce(rctx, lease)
		cancel()
		switch {
		case err == nil:
			m.mu.Lock()
			if until := sent.Add(time.Duration(resp.TTL) * time.Second); m.lease == lease && until.After(m.validUntil) {
				m.validUntil = until
			}
			m.mu.Unlock()
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			m.mu.Lock()
			m.losses++
			m.validUntil = time.Time{}
			m.mu.Unlock()
			m.notify()
			m.log.Warn("cluster membership lease lost; registering again", "lease", fmt.Sprintf("%x", int64(lease)))
			m.rejoin(ctx)
		case ctx.Err() != nil:
			return
		default:
			// etcd unreachable: keep trying; Held turns false at the deadline.
			m.log.Warn("cluster lease renewal failed", "err", err)
		}
	}
}

func (m *Member) rejoin(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for {
		rctx, cancel := context.WithTimeout(ctx, m.cfg.TTL)
		err := m.register(rctx)
		cancel()
		if err == nil {
			m.log.Info("cluster member registered again", "epoch", m.Epoch())
			return
		}
		if ctx.Err() != nil {
			return
		}
		m.log.Warn("cluster register failed", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, m.cfg.TTL)
	}
}

func (m *Member) notify() {
	m.mu.Lock()
	close(m.changed)
	m.changed = make(chan struct{})
	m.mu.Unlock()
}

// Changed is closed at the next change of the member set or of this
// member's lease (lost, registered again). Call it again for the one after.
func (m *Member) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

// ID is the node id.
func (m *Member) ID() string { return m.cfg.ID }

// Root is the cluster's prefix the member registered under.
func (m *Member) Root() string { return m.cfg.Root }

// Epoch counts registrations: it grows each time a lost lease is replaced.
func (m *Member) Epoch() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.epoch
}

// Losses counts leases lost since Join.
func (m *Member) Losses() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.losses
}

// Lease is the current lease.
func (m *Member) Lease() clientv3.LeaseID {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lease
}

// Held says whether the membership lease is certainly alive at now: now is
// before the send time of the last acknowledged renewal plus the TTL. Every
// owner-only action checks it first.
func (m *Member) Held(now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lease != 0 && now.Before(m.validUntil)
}

// Members lists the live members, sorted by id.
func (m *Member) Members() []MemberInfo {
	var out []MemberInfo
	for _, k := range m.view.Keys() {
		if e, ok := m.view.Get(k); ok {
			out = append(out, e.Value)
		}
	}
	return out
}

// Info is a live member's record: its advertised address, protocol and
// epoch. The node-to-node client looks a peer's address up here per call,
// so a member that came back on another address is reached there.
func (m *Member) Info(id string) (MemberInfo, bool) {
	e, ok := m.view.Get(id)
	return e.Value, ok
}

// ActiveIDs lists the live members that are not leaving, sorted: the
// members the shard assignment is computed over.
func (m *Member) ActiveIDs() []string {
	var ids []string
	for _, k := range m.view.Keys() {
		if e, ok := m.view.Get(k); ok && !e.Value.Leaving {
			ids = append(ids, k)
		}
	}
	sort.Strings(ids)
	return ids
}

// SetLeaving marks this member as leaving in its registration (same lease,
// same epoch): the first step of a graceful leave. It refuses a key that
// is no longer under this member's lease.
func (m *Member) SetLeaving(ctx context.Context) error {
	m.mu.Lock()
	lease, mi := m.lease, m.info
	m.mu.Unlock()
	if lease == 0 {
		return fmt.Errorf("cluster member %s: mark leaving: no lease", m.cfg.ID)
	}
	mi.Leaving = true
	info, err := json.Marshal(mi)
	if err != nil {
		return err
	}
	key := membersPrefix(m.cfg.Root) + m.cfg.ID
	resp, err := m.cfg.Client.Txn(ctx).
		If(clientv3.Compare(clientv3.LeaseValue(key), "=", lease)).
		Then(clientv3.OpPut(key, string(info), clientv3.WithLease(lease))).
		Commit()
	if err == nil && !resp.Succeeded {
		err = ErrFenced
	}
	if err != nil {
		return fmt.Errorf("cluster member %s: mark leaving: %w", m.cfg.ID, err)
	}
	return nil
}

// KnownIDs lists, sorted, the nodes that may hold a share of the counts,
// live members or not: every node that registered since the cluster began
// (with this build) and has not retired (Retire). A node absent from
// MemberIDs but listed here is restarting, cut off or down; what it
// persisted counts when it is back.
func (m *Member) KnownIDs() []string {
	ids := m.known.Keys()
	sort.Strings(ids)
	return ids
}

// Retire deletes this node's nodes/ record: a graceful leave calls it
// once the node's shares are held by other members, so nobody waits for
// them from this node any more. Its next registration records it again.
func (m *Member) Retire(ctx context.Context) error {
	if _, err := m.cfg.Client.Delete(ctx, nodesPrefix(m.cfg.Root)+m.cfg.ID); err != nil {
		return fmt.Errorf("cluster member %s: retire: %w", m.cfg.ID, err)
	}
	return nil
}

// MemberIDs lists the live members' ids, sorted.
func (m *Member) MemberIDs() []string {
	ids := m.view.Keys()
	sort.Strings(ids)
	return ids
}

// Close stops renewing and watching without revoking: the lease runs out
// on its own, as when the process dies.
func (m *Member) Close() {
	m.cancel()
	<-m.done
	<-m.view.Done()
	<-m.known.Done()
}

// Leave revokes the lease (the registration and every owner key go with it
// at once) and stops. Hand shards over before calling it.
func (m *Member) Leave(ctx context.Context) error {
	m.Close()
	m.mu.Lock()
	lease := m.lease
	m.lease, m.validUntil = 0, time.Time{}
	m.mu.Unlock()
	if _, err := m.cfg.Client.Revoke(ctx, lease); err != nil {
		return fmt.Errorf("cluster member %s: revoke lease: %w", m.cfg.ID, err)
	}
	return nil
}

func (m *Member) revoke() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	m.cfg.Client.Revoke(ctx, m.Lease())
}
