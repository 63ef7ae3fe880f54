package clusterserve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fraudd/fraudd/actors/accounts"
	"github.com/fraudd/fraudd/cluster"
	"github.com/fraudd/fraudd/storage"
)

// The configuration keys under config/ (docs/cluster.md): each value is the
// record Pebble holds, byte for byte (storage.MarshalAccount, MarshalRules,
// MarshalPins), and the email claim holds the account id as Pebble's email
// index does.
const (
	kindAccount = "account/"
	kindRules   = "rules/"
	kindPins    = "pins/"
	kindEmail   = "email/"
)

// rawCodec keeps etcd's bytes as they are: they are decoded per key kind
// when installed (storage's decoders, fuzzed there, reject what they cannot
// vouch for).
var rawCodec = cluster.Codec[[]byte]{
	Marshal:   func(b []byte) ([]byte, error) { return b, nil },
	Unmarshal: func(b []byte) ([]byte, error) { return b, nil },
}

// parseKey splits a configuration key into its kind and account id.
func parseKey(k string) (kind, id string, ok bool) {
	for _, kd := range []string{kindAccount, kindRules, kindPins} {
		if rest, found := strings.CutPrefix(k, kd); found && rest != "" && !strings.Contains(rest, "/") {
			return kd, rest, true
		}
	}
	return "", "", false
}

// writeTimeout bounds one admin write: the etcd transaction and the wait
// until this node installed it.
const writeTimeout = 10 * time.Second

// ConfigSync keeps the accounts actor (and through it Pebble) a copy of the
// configuration in etcd, and is the accounts.Shared the admin API writes
// through.
type ConfigSync struct {
	cli    *clientv3.Client
	prefix string
	store  *cluster.Store[[]byte]
	accts  *accounts.Service
	log    *slog.Logger

	// writes serialises this node's admin writes, so two admin calls on
	// one node never refuse each other; across nodes the revision checks
	// decide.
	writes sync.Mutex

	pmu     sync.Mutex
	full    bool
	pending map[string]bool
	// pendingRev is the store's revision when it last reported a change:
	// every change up to it is in pending (or full). The store's own
	// revision can be ahead of its reports (it reports after releasing its
	// lock), so it is not what an install may mark applied.
	pendingRev int64
	wake       chan struct{}

	// unreadable holds the accounts whose records this build could not
	// decode when last installed (applyPending's goroutine only); their
	// count is published for Down and for the accounts service, which
	// cannot tell their keys from unknown ones.
	unreadable  map[string]bool
	unreadableN atomic.Int64

	amu       sync.Mutex
	applied   int64
	appliedCh chan struct{} // closed and replaced whenever applied moves

	cancel context.CancelFunc
	done   chan struct{}

	// beforeWrite, when set (tests), runs between Modify's read and its
	// transaction.
	beforeWrite func()
}

var _ accounts.Shared = (*ConfigSync)(nil)

// NewConfigSync prepares the configuration store; the accounts service
// given to Start installs what it delivers. Pass the ConfigSync to
// accounts.Config.Shared before starting the service.
func (n *Node) NewConfigSync() (*ConfigSync, error) {
	c := &ConfigSync{cli: n.cli, prefix: cluster.ConfigPrefix(n.root), log: n.log, pending: map[string]bool{}, unreadable: map[string]bool{},
		wake: make(chan struct{}, 1), appliedCh: make(chan struct{}), done: make(chan struct{})}
	st, err := cluster.NewStore(cluster.StoreConfig[[]byte]{Client: n.cli, Prefix: c.prefix, Codec: rawCodec, Logger: n.log, OnChange: c.changed})
	if err != nil {
		return nil, err
	}
	c.store = st
	n.config = c
	return c, nil
}

// Start reads the configuration, reconciles it with what the accounts
// service loaded from Pebble, installs it, and keeps it installed until the
// node stops. A data directory holding accounts the cluster does not know
// stops the start (it belongs to another cluster or predates this one),
// except when the cluster's configuration is empty: then this node seeds it.
func (c *ConfigSync) Start(ctx context.Context, accts *accounts.Service) error {
	c.accts = accts
	runCtx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	if err := c.store.Start(runCtx); err != nil {
		cancel()
		close(c.done)
		return fmt.Errorf("cluster: read the account configuration: %w", err)
	}
	err := c.readable()
	var seeded int64
	if err == nil {
		seeded, err = c.reconcile(ctx)
	}
	if err == nil && seeded > 0 {
		// The full install below must see the seed, or it would take the
		// seeded accounts for deleted ones.
		err = c.store.Wait(ctx, seeded)
	}
	if err == nil {
		c.pmu.Lock()
		c.full = true
		c.pmu.Unlock()
		if err = c.applyPending(); err != nil {
			err = fmt.Errorf("cluster: install the account configuration: %w", err)
		}
	}
	if err != nil {
		cancel()
		close(c.done)
		<-c.store.Done()
		return err
	}
	go c.run(runCtx)
	return nil
}

// readable refuses a configuration this node cannot read whole: an
// account whose records do not decode (written by a newer build during a
// rolling upgrade, or damaged) would otherwise be left out, and a node
// started without it would answer its keys 401 as if it never existed.
func (c *ConfigSync) readable() error {
	var bad []string
	var first error
	for _, k := range c.store.Keys() {
		kind, id, ok := parseKey(k)
		if !ok || kind != kindAccount {
			continue
		}
		if _, _, err := c.records(id); err != nil {
			bad = append(bad, id)
			if first == nil {
				first = fmt.Errorf("%s%s: %w", kindAccount, id, err)
			}
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("cluster: this build cannot read %d accounts' configuration in etcd (first config/%v): written by a newer fraudd or damaged; start this node with the build that wrote it, or repair the record", len(bad), first)
}

// stop ends the watch and the installs (a ConfigSync never started has
// nothing to stop).
func (c *ConfigSync) stop() {
	if c.cancel == nil {
		return
	}
	c.cancel()
	<-c.done
	<-c.store.Done()
}

// reconcile compares the accounts Pebble holds with the cluster's; it
// returns the revision of the seed it wrote (0: none).
func (c *ConfigSync) reconcile(ctx context.Context) (int64, error) {
	inCluster := 0
	for _, k := range c.store.Keys() {
		if kind, _, ok := parseKey(k); ok && kind == kindAccount {
			inCluster++
		}
	}
	var local []*accounts.View
	c.accts.Range(func(v *accounts.View) bool {
		if _, ok := c.store.Get(kindAccount + v.ID); !ok {
			local = append(local, v)
		}
		return true
	})
	if len(local) == 0 {
		return 0, nil
	}
	sort.Slice(local, func(i, j int) bool { return local[i].ID < local[j].ID })
	if inCluster > 0 {
		return 0, fmt.Errorf("cluster: this data directory holds %d accounts the cluster does not know (first %s): it belongs to another cluster or was used alone before; start this node with an empty --data-dir (it receives the configuration from the cluster), or seed a new cluster from it", len(local), local[0].ID)
	}
	var rev int64
	for _, v := range local {
		a := v.Account
		r, err := c.create(ctx, &accounts.Records{Account: &a, Rules: v.Rules, Pins: v.Pins})
		if err != nil {
			return 0, fmt.Errorf("cluster: seed the empty cluster configuration with account %s: %w", v.ID, err)
		}
		rev = r
	}
	c.log.Info("seeded the cluster's empty account configuration from this data directory", "accounts", len(local))
	return rev, nil
}

// changed is the store's OnChange: it only records what to apply, so the
// watch never waits on the accounts actor or Pebble.
func (c *ConfigSync) changed(full bool, keys []string) {
	c.pmu.Lock()
	if full {
		c.full = true
	}
	for _, k := range keys {
		c.pending[k] = true
	}
	c.pendingRev = max(c.pendingRev, c.store.Revision())
	c.pmu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *ConfigSync) run(ctx context.Context) {
	defer close(c.done)
	backoff := 50 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		}
		if err := c.applyPending(); err != nil {
			// Nothing is lost: the whole copy is installed again next time.
			c.log.Error("cluster: account configuration not installed; retrying", "err", err)
			c.changed(true, nil)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
	}
}

// applyPending installs what changed since the last call, then marks the
// revision of the last change reported as applied: every write up to it is
// installed.
func (c *ConfigSync) applyPending() error {
	c.pmu.Lock()
	full, keys, rev := c.full, c.pending, c.pendingRev
	c.full, c.pending = false, map[string]bool{}
	c.pmu.Unlock()
	ids := map[string]bool{}
	if full {
		// A full pass sees every account: one unreadable before and gone
		// since (deleted during a broken watch) must not stay counted.
		clear(c.unreadable)
		for _, k := range c.store.Keys() {
			if _, id, ok := parseKey(k); ok {
				ids[id] = true
			}
		}
		c.accts.Range(func(v *accounts.View) bool { ids[v.ID] = true; return true })
	} else {
		for k := range keys {
			if _, id, ok := parseKey(k); ok {
				ids[id] = true
			}
		}
	}
	var recs []accounts.Records
	var gone []string
	for id := range ids {
		r, ok, err := c.records(id)
		switch {
		case err != nil:
			// Left as it is here: a record this build cannot read is no
			// reason to drop the account, nor to install half of it.
			c.log.Error("cluster: an account's configuration cannot be decoded; this node keeps its previous copy", "account", id, "err", err)
			c.unreadable[id] = true
		case ok:
			recs = append(recs, r)
			delete(c.unreadable, id)
		default:
			gone = append(gone, id)
			delete(c.unreadable, id)
		}
	}
	if n := int64(len(c.unreadable)); n != c.unreadableN.Load() {
		c.unreadableN.Store(n)
		c.accts.SetUnreadable(int(n))
	}
	if len(recs) > 0 || len(gone) > 0 {
		if err := c.accts.Install(recs, gone); err != nil {
			c.pmu.Lock()
			c.full = true
			c.pmu.Unlock()
			return err
		}
	}
	c.amu.Lock()
	if rev > c.applied {
		c.applied = rev
		close(c.appliedCh)
		c.appliedCh = make(chan struct{})
	}
	c.amu.Unlock()
	return nil
}

// Unreadable counts the accounts whose configuration this node could not
// decode (Node.OwnDown reports them).
func (c *ConfigSync) Unreadable() int { return int(c.unreadableN.Load()) }

// records decodes one account's records from the local copy; ok is false
// when the account is not in it.
func (c *ConfigSync) records(id string) (accounts.Records, bool, error) {
	e, ok := c.store.Get(kindAccount + id)
	if !ok {
		return accounts.Records{}, false, nil
	}
	r, _, err := decodeRecords(id, e.Value, c.store)
	return r, err == nil, err
}

// decodeRecords decodes an account record and its rules and pins, noting
// the revisions each was read at (0: absent).
func decodeRecords(id string, acct []byte, st *cluster.Store[[]byte]) (accounts.Records, [3]int64, error) {
	var revs [3]int64
	a, err := storage.UnmarshalAccount(acct)
	if err != nil {
		return accounts.Records{}, revs, fmt.Errorf("account record: %w", err)
	}
	if a.ID != id {
		return accounts.Records{}, revs, fmt.Errorf("account record under %s names %s", id, a.ID)
	}
	r := accounts.Records{Account: a}
	if e, ok := st.Get(kindRules + id); ok {
		if r.Rules, err = storage.UnmarshalRules(e.Value); err != nil {
			return accounts.Records{}, revs, fmt.Errorf("rules: %w", err)
		}
		revs[1] = e.Rev
	}
	if e, ok := st.Get(kindPins + id); ok {
		if r.Pins, err = storage.UnmarshalPins(e.Value); err != nil {
			return accounts.Records{}, revs, fmt.Errorf("pins: %w", err)
		}
		revs[2] = e.Rev
	}
	return r, revs, nil
}

// waitApplied returns once every write up to rev is installed here.
func (c *ConfigSync) waitApplied(ctx context.Context, rev int64) error {
	for {
		c.amu.Lock()
		cur, ch := c.applied, c.appliedCh
		c.amu.Unlock()
		if cur >= rev {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("written to the cluster but not yet installed on this node (revision %d, at %d): %w", rev, cur, accounts.ErrUnavailable)
		}
	}
}

// Create is accounts.Shared.Create: the account record and its email claim
// in one transaction that refuses a taken email.
func (c *ConfigSync) Create(a *storage.Account) error {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	rev, err := c.create(ctx, &accounts.Records{Account: a})
	if err != nil {
		return err
	}
	return c.waitApplied(ctx, rev)
}

// create writes a new account's records and returns the revision.
func (c *ConfigSync) create(ctx context.Context, r *accounts.Records) (int64, error) {
	c.writes.Lock()
	defer c.writes.Unlock()
	a := r.Account
	acctKey, emailKey := c.prefix+kindAccount+a.ID, c.prefix+kindEmail+strings.ToLower(a.Email)
	ops := []clientv3.Op{
		clientv3.OpPut(acctKey, string(storage.MarshalAccount(nil, a))),
		clientv3.OpPut(emailKey, a.ID),
	}
	if len(r.Rules) > 0 {
		ops = append(ops, clientv3.OpPut(c.prefix+kindRules+a.ID, string(storage.MarshalRules(nil, r.Rules))))
	}
	if len(r.Pins) > 0 {
		ops = append(ops, clientv3.OpPut(c.prefix+kindPins+a.ID, string(storage.MarshalPins(nil, r.Pins))))
	}
	resp, err := c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(acctKey), "=", 0), clientv3.Compare(clientv3.CreateRevision(emailKey), "=", 0)).
		Then(ops...).Commit()
	if err != nil {
		return 0, fmt.Errorf("create account %s in the cluster: %v: %w", a.ID, err, accounts.ErrUnavailable)
	}
	if !resp.Succeeded {
		return 0, accounts.ErrExists
	}
	return resp.Header.Revision, nil
}

// Modify is accounts.Shared.Modify: read the local copy, change it, write
// back what changed if none of the account's records moved since.
func (c *ConfigSync) Modify(id string, change func(r *accounts.Records) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	c.writes.Lock()
	defer c.writes.Unlock()
	// The local copy may trail etcd (another node's write still on its
	// way); the revision check below then refuses, and the caller retries.
	e, ok := c.store.Get(kindAccount + id)
	if !ok {
		return accounts.ErrNotFound
	}
	r, revs, err := decodeRecords(id, e.Value, c.store)
	if err != nil {
		return fmt.Errorf("account %s in the cluster: %v: %w", id, err, accounts.ErrUnavailable)
	}
	revs[0] = e.Rev
	before := [3][]byte{e.Value, storage.MarshalRules(nil, r.Rules), storage.MarshalPins(nil, r.Pins)}
	oldEmail := r.Account.Email
	if err := change(&r); err != nil {
		return err
	}
	after := [3][]byte{storage.MarshalAccount(nil, r.Account), storage.MarshalRules(nil, r.Rules), storage.MarshalPins(nil, r.Pins)}
	keys := [3]string{c.prefix + kindAccount + id, c.prefix + kindRules + id, c.prefix + kindPins + id}
	var cmps []clientv3.Cmp
	var ops []clientv3.Op
	for i := range keys {
		if revs[i] == 0 {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(keys[i]), "=", 0))
		} else {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(keys[i]), "=", revs[i]))
		}
		if string(before[i]) != string(after[i]) {
			ops = append(ops, clientv3.OpPut(keys[i], string(after[i])))
		}
	}
	if len(ops) == 0 {
		return nil
	}
	if !strings.EqualFold(oldEmail, r.Account.Email) {
		return errors.New("cluster: an account's email cannot change")
	}
	if c.beforeWrite != nil {
		c.beforeWrite()
	}
	resp, err := c.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return fmt.Errorf("write account %s to the cluster: %v: %w", id, err, accounts.ErrUnavailable)
	}
	if !resp.Succeeded {
		return fmt.Errorf("account %s: %w", id, accounts.ErrConflict)
	}
	return c.waitApplied(ctx, resp.Header.Revision)
}
