package rpc

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/fraudd/fraudd/storage"
)

// Share is one member's persisted share of an account.
type Share struct {
	Node   string
	Counts storage.MonthCounts
	Totals storage.Totals
}

// Shares asks every other live member, in parallel and within the client's
// Timeout, for its persisted share of account in month m: the G-counter
// rebuild's one request per member. Members that did not answer are listed
// in missing: their shares count when they return, so a sum without them
// errs permissive (docs/cluster.md). This node's own share is its store's,
// which the caller reads itself.
func (q *Quota) Shares(ctx context.Context, account string, m storage.Month) (shares []Share, missing []string) {
	ctx, cancel := context.WithTimeout(ctx, q.cfg.Timeout)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, id := range q.cfg.Owners.Members() {
		if id == q.cfg.Owners.Self() {
			continue
		}
		wg.Go(func() {
			sh, err := q.share(ctx, id, account, m)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				q.log.Warn("cluster: a member's share is missing", "member", id, "account", account, "err", err)
				missing = append(missing, id)
				return
			}
			shares = append(shares, sh)
		})
	}
	wg.Wait()
	return shares, missing
}

func (q *Quota) share(ctx context.Context, id, account string, m storage.Month) (Share, error) {
	p, err := q.peer(id)
	if err != nil {
		return Share{}, err
	}
	q.shareCalls.Add(1)
	r, err := p.cli.Shares(ctx, &SharesRequest{Version: version, Account: account, Month: uint32(m)})
	if err != nil {
		return Share{}, err
	}
	if r.Node != id || storage.Month(r.Month) != m || r.Used < 0 || r.Lookups < 0 || r.Warned > 0xff || r.Evaluations < 0 || r.LimitHits < 0 {
		return Share{}, fmt.Errorf("member %s answered a share for %q month %d: %w", id, r.Node, r.Month, errBadRequest)
	}
	return Share{
		Node:   id,
		Counts: storage.MonthCounts{Used: r.Used, Lookups: r.Lookups, Warned: uint8(r.Warned)},
		Totals: storage.Totals{Evaluations: r.Evaluations, LimitHits: r.LimitHits},
	}, nil
}

// Merge sums shares as a G-counter: per member the largest share seen (a
// repeated or late answer changes nothing), then the sum over members;
// warning bits are OR-ed.
func Merge(shares ...Share) (storage.MonthCounts, storage.Totals) {
	best := map[string]Share{}
	for _, s := range shares {
		b := best[s.Node]
		b.Node = s.Node
		b.Counts.Used = max(b.Counts.Used, s.Counts.Used)
		b.Counts.Lookups = max(b.Counts.Lookups, s.Counts.Lookups)
		b.Counts.Warned |= s.Counts.Warned
		b.Totals.Evaluations = max(b.Totals.Evaluations, s.Totals.Evaluations)
		b.Totals.LimitHits = max(b.Totals.LimitHits, s.Totals.LimitHits)
		best[s.Node] = b
	}
	var c storage.MonthCounts
	var t storage.Totals
	for _, b := range best {
		c.Used += b.Counts.Used
		c.Lookups += b.Counts.Lookups
		c.Warned |= b.Counts.Warned
		t.Evaluations += b.Totals.Evaluations
		t.LimitHits += b.Totals.LimitHits
	}
	return c, t
}

// ShareCalls counts Shares requests to other members: one per member for
// each account the quota actors load (RemoteCalls counts the charges' and
// usage reads' hops).
func (q *Quota) ShareCalls() int64 { return q.shareCalls.Load() }

// LocalStore is the node's own store of counts (*storage.DB).
type LocalStore interface {
	ShareStore
	ApplyUsage(deltas []storage.UsageDelta) error
}

// SharedStore is the quota actors' store on a cluster node (quota.Store).
// Writes go to this node's own store: each node persists only what it
// charged, its share. A read, which the actors make when an account is
// first touched (after this node took its shard, or after an eviction),
// is the G-counter: this node's share plus every other live member's,
// asked through the client attached with Attach. A member that does not
// answer within the client's Timeout is left out, so the count errs
// permissive until it returns (docs/cluster.md). The read blocks the
// account's quota shard for that fan-out.
type SharedStore struct {
	local LocalStore
	self  string
	peers atomic.Pointer[Quota]
}

// NewSharedStore wraps the node's own store; self is the node's id.
func NewSharedStore(local LocalStore, self string) *SharedStore {
	return &SharedStore{local: local, self: self}
}

// Attach sets the client that asks the other members. Until it is set,
// reads are this node's share alone (the quota client needs the store
// before the routing client, which needs the quota client, exists).
func (s *SharedStore) Attach(q *Quota) { s.peers.Store(q) }

// ApplyUsage implements quota.Store: this node's share only.
func (s *SharedStore) ApplyUsage(deltas []storage.UsageDelta) error {
	return s.local.ApplyUsage(deltas)
}

// LoadUsage implements quota.Store: the sum of the members' shares.
func (s *SharedStore) LoadUsage(account string, m storage.Month) (storage.MonthCounts, storage.Totals, error) {
	c, t, err := s.local.LoadUsage(account, m)
	if err != nil {
		return c, t, err
	}
	q := s.peers.Load()
	if q == nil {
		return c, t, nil
	}
	shares, _ := q.Shares(context.Background(), account, m)
	c, t = Merge(append(shares, Share{Node: s.self, Counts: c, Totals: t})...)
	return c, t, nil
}
