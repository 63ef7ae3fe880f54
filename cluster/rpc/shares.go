package rpc

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/storage"
)

// Share is one member's persisted share of an account, with the hourly
// windows it handed over when the account's shard last left it.
type Share struct {
	Node   string
	Counts storage.MonthCounts
	Totals storage.Totals
	Hour   [2]quota.HourWindow
}

// Shares asks every other live member, in parallel and within the client's
// Timeout, for its persisted share of account in month m: the G-counter
// rebuild's one request per member. Members that did not answer are listed
// in missing: their shares count when they return, so a sum without them
// errs permissive (docs/cluster.md). This node's own share is its store's,
// which the caller reads itself. load names the quota actors' load the
// shares go into (quota.Loaded.Tag; 0: none): a member that gives back a
// call of its share afterwards discounts it there (Server.Discount).
func (q *Quota) Shares(ctx context.Context, account string, m storage.Month, load uint64) (shares []Share, missing []string) {
	ctx, cancel := context.WithTimeout(ctx, q.cfg.Timeout)
	defer cancel()
	eachOther(q, func(id string) ([]Share, error) { return q.share(ctx, id, account, m, load) },
		func(id string, sh []Share, err error) {
			if err != nil {
				q.log.Warn("cluster: a member's share is missing", "member", id, "account", account, "err", err)
				missing = append(missing, id)
				return
			}
			shares = append(shares, sh...)
		})
	// A node that may hold a share but is no live member now (restarting,
	// cut off, down) is missing too: noted, its share counts once it is
	// back and answers (SharedStore.Returned). Logged at debug: one that
	// stays away would log every load.
	for _, id := range absent(q) {
		q.log.Debug("cluster: a share is missing: its node is not a live member", "member", id, "account", account)
		missing = append(missing, id)
	}
	return shares, missing
}

// absent lists the nodes that may hold a share (Ownership.Known) and are
// not live members, this one aside.
func absent(q *Quota) []string {
	live := q.cfg.Owners.Members()
	var out []string
	for _, id := range q.cfg.Owners.Known() {
		if id != q.cfg.Owners.Self() && !slices.Contains(live, id) {
			out = append(out, id)
		}
	}
	return out
}

func (q *Quota) share(ctx context.Context, id, account string, m storage.Month, load uint64) ([]Share, error) {
	p, err := q.peer(id)
	if err != nil {
		return nil, err
	}
	q.shareCalls.Add(1)
	r, err := p.cli.Shares(ctx, &SharesRequest{Version: version, Account: account, Month: uint32(m), From: q.cfg.Owners.Self(), Load: load})
	if err != nil {
		return nil, err
	}
	if r.Node != id || storage.Month(r.Month) != m || r.Used < 0 || r.Lookups < 0 || r.Warned > 0xff || r.Evaluations < 0 || r.LimitHits < 0 ||
		r.HourWarnedEighty < 0 || r.HourWarnedCap < 0 {
		return nil, fmt.Errorf("member %s answered a share for %q month %d: %w", id, r.Node, r.Month, errBadRequest)
	}
	hour, ok := windowsOf(r.Hour)
	if !ok {
		return nil, fmt.Errorf("member %s answered malformed hourly windows: %w", id, errBadRequest)
	}
	out := make([]Share, 0, 1+len(r.Adopted))
	out = append(out, Share{
		Node:   id,
		Counts: storage.MonthCounts{Used: r.Used, Lookups: r.Lookups, Warned: uint8(r.Warned)},
		Totals: storage.Totals{Evaluations: r.Evaluations, LimitHits: r.LimitHits,
			HourWarned: [2]int64{r.HourWarnedEighty, r.HourWarnedCap}},
		Hour: hour,
	})
	for _, a := range r.Adopted {
		sh, err := originShareOf(a)
		if err != nil || sh.Account != account || (sh.Month != m && sh.Month != 0) {
			return nil, fmt.Errorf("member %s answered an adopted share of %q month %d: %w", id, a.GetAccount(), a.GetMonth(), errBadRequest)
		}
		out = append(out, Share{Node: sh.Origin, Counts: sh.Counts, Totals: sh.Totals})
	}
	return out, nil
}

// Merge sums shares as a G-counter: per member the largest share seen (a
// repeated or late answer changes nothing), then the sum over members;
// warning bits are OR-ed, and of the hourly warning times (each the time
// a member sent the warning as the account's owner) the latest wins.
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
		b.Totals.HourWarned = latest(b.Totals.HourWarned, s.Totals.HourWarned)
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
		t.HourWarned = latest(t.HourWarned, b.Totals.HourWarned)
	}
	return c, t
}

// latest is the later of each of two pairs of hourly warning times.
func latest(a, b [2]int64) [2]int64 {
	return [2]int64{max(a[0], b[0]), max(a[1], b[1])}
}

// ShareCalls counts Shares requests to other members: one per member for
// each account the quota actors load (RemoteCalls counts the charges' and
// usage reads' hops).
func (q *Quota) ShareCalls() int64 { return q.shareCalls.Load() }

// LocalStore is the node's own store of counts (*storage.DB), which may
// let increments be answered ahead of their commit (quota.AheadStore).
type LocalStore interface {
	ShareStore
	ApplyUsage(deltas []storage.UsageDelta) error
	Durability() storage.Durability
	AnswerAhead() bool
	OnSync(fn func()) (remove func())
	SyncInterval() time.Duration
	AnsweredAhead()
}

// SharedStore is the quota actors' store on a cluster node (quota.Store).
// Writes go to this node's own store: each node persists only what it
// charged, its share. A read, which the actors make when an account is
// first touched (after this node took its shard, or after an eviction),
// is the G-counter: this node's share plus every other live member's,
// asked through the client attached with Attach. A member that does not
// answer within the client's Timeout is left out, so the count errs
// permissive until it returns (docs/cluster.md). The read blocks the
// account's quota shard for that fan-out (which therefore never runs on
// its senders' goroutines: quota.New turns actors.InlineRuns off for a
// quota.WindowLoader).
//
// In the Interval durability mode it is a quota.AheadStore, as the node's
// own store is: a charge is answered once counted, its increment stored
// by the next group sync. Every read of a share — this node's own, when
// the quota actors load an account (the shard waits for its committer
// first), and the one it answers the others (Server.Shares, Server.Days,
// through Flusher) — first waits for the increments queued so far to be
// committed, so a share read holds every charge this node acknowledged
// before the read. The export a graceful leave
// hands over waits too, but goes without what is still queued when that
// wait fails (clusterserve): those count again when the node rejoins with
// its data dir, as the shares merge by their largest value per node.
type SharedStore struct {
	local   LocalStore
	self    string
	windows *HandedWindows
	peers   atomic.Pointer[Quota]
	// loadBase+loads numbers the loads (quota.Loaded.Tag): a random base,
	// so that a tag a member kept from before this process restarted
	// names no load of this one.
	loadBase uint64
	loads    atomic.Uint64

	// partial are the accounts last loaded without the share of a live
	// member that did not answer, by member: Returned has them loaded
	// again once it answers.
	mu      sync.Mutex
	partial map[string]map[string]struct{}
}

// NewSharedStore wraps the node's own store; self is the node's id and
// windows (nil: none) what this node handed over of shards that left it.
func NewSharedStore(local LocalStore, self string, windows *HandedWindows) *SharedStore {
	return &SharedStore{local: local, self: self, windows: windows, loadBase: rand.Uint64()}
}

// nextLoad is a new load's tag: never 0, which names none.
func (s *SharedStore) nextLoad() uint64 {
	for {
		if t := s.loadBase + s.loads.Add(1); t != 0 {
			return t
		}
	}
}

// Attach sets the client that asks the other members. Until it is set,
// reads are this node's share alone (the quota client needs the store
// before the routing client, which needs the quota client, exists).
func (s *SharedStore) Attach(q *Quota) { s.peers.Store(q) }

// Durability implements quota.AheadStore: the node's store's.
func (s *SharedStore) Durability() storage.Durability { return s.local.Durability() }

// AnswerAhead implements quota.AheadStore.
func (s *SharedStore) AnswerAhead() bool { return s.local.AnswerAhead() }

// OnSync implements quota.AheadStore.
func (s *SharedStore) OnSync(fn func()) (remove func()) { return s.local.OnSync(fn) }

// SyncInterval implements quota.AheadStore.
func (s *SharedStore) SyncInterval() time.Duration { return s.local.SyncInterval() }

// AnsweredAhead implements quota.AheadStore.
func (s *SharedStore) AnsweredAhead() { s.local.AnsweredAhead() }

var _ quota.AheadStore = (*SharedStore)(nil)

// ApplyUsage implements quota.Store: this node's share only.
func (s *SharedStore) ApplyUsage(deltas []storage.UsageDelta) error {
	return s.local.ApplyUsage(deltas)
}

// LoadUsage implements quota.Store: the sum of the members' shares.
func (s *SharedStore) LoadUsage(account string, m storage.Month) (storage.MonthCounts, storage.Totals, error) {
	l, err := s.load(account, m, time.Time{}, 0)
	return l.Counts, l.Totals, err
}

// LoadAccount implements quota.WindowLoader: the sum of the members'
// shares, and the running hourly windows the shard's previous owner handed
// over (the largest, when more than one member answers one), as a load of
// its own tag.
func (s *SharedStore) LoadAccount(account string, m storage.Month, now time.Time) (quota.Loaded, error) {
	return s.load(account, m, now, s.nextLoad())
}

func (s *SharedStore) load(account string, m storage.Month, now time.Time, tag uint64) (quota.Loaded, error) {
	l := quota.Loaded{Tag: tag}
	c, t, err := s.local.LoadUsage(account, m)
	if err != nil {
		return l, err
	}
	adopted, err := s.local.AdoptedShares(account, m)
	if err != nil {
		return l, err
	}
	var shares []Share
	var missing []string
	if q := s.peers.Load(); q != nil {
		shares, missing = q.Shares(context.Background(), account, m, tag)
	}
	// The members whose own shares went into the load: only their
	// discounts apply to it (a member that answered too late is not in
	// the sum).
	for i := range shares {
		if !slices.Contains(l.From, shares[i].Node) {
			l.From = append(l.From, shares[i].Node)
		}
	}
	s.notePartial(account, l.From, missing)
	own := Share{Node: s.self, Counts: c, Totals: t}
	if s.windows != nil && !now.IsZero() {
		own.Hour = s.windows.Get(account, now)
	}
	shares = append(shares, own)
	for _, a := range adopted {
		shares = append(shares, Share{Node: a.Origin, Counts: a.Counts, Totals: a.Totals})
	}
	if !now.IsZero() {
		sets := make([][2]quota.HourWindow, len(shares))
		for i := range shares {
			sets[i] = shares[i].Hour
		}
		l.Hour = mergeWindows(now, sets...)
	}
	l.Counts, l.Totals = Merge(shares...)
	return l, nil
}

// notePartial keeps account for Returned under each member missing from
// its load, and forgets it under those whose shares it summed.
func (s *SharedStore) notePartial(account string, from, missing []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range from {
		delete(s.partial[id], account)
	}
	for _, id := range missing {
		if s.partial == nil {
			s.partial = map[string]map[string]struct{}{}
		}
		if s.partial[id] == nil {
			s.partial[id] = map[string]struct{}{}
		}
		s.partial[id][account] = struct{}{}
	}
}

// forgetter is the quota actors' Forget (*quota.Client).
type forgetter interface {
	Forget(match func(account string) bool, wait time.Duration) ([]quota.Handed, error)
}

// Returned has the quota actors forget the accounts loaded without the
// share of a member in ids (it did not answer the load), so that their
// next touch loads them again with that share: a member that did not
// answer counts once it answers again (docs/cluster.md), not only when
// the account is next evicted. Their running hourly windows are kept,
// as a leaving shard's are, and resumed by that load. MemberHealth calls
// it with the members that answered its round, and Server.Adopt with the
// origins of the shares a leaver handed over.
func (s *SharedStore) Returned(ids []string) {
	q := s.peers.Load()
	if q == nil {
		return
	}
	f, ok := q.cfg.Local.(forgetter)
	if !ok {
		return
	}
	accounts := map[string]struct{}{}
	var back map[string]map[string]struct{}
	s.mu.Lock()
	for _, id := range ids {
		if len(s.partial[id]) == 0 {
			continue
		}
		for acc := range s.partial[id] {
			accounts[acc] = struct{}{}
		}
		if back == nil {
			back = map[string]map[string]struct{}{}
		}
		back[id] = s.partial[id]
		delete(s.partial, id)
	}
	s.mu.Unlock()
	if len(accounts) == 0 {
		return
	}
	handed, err := f.Forget(func(acc string) bool { _, ok := accounts[acc]; return ok }, q.cfg.Timeout)
	if err != nil {
		q.log.Warn("cluster: the accounts loaded without a returning member's share not reloaded (tried again next round)", "accounts", len(accounts), "err", err)
		s.mu.Lock()
		for id, accs := range back {
			for acc := range accs {
				if s.partial[id] == nil {
					s.partial[id] = map[string]struct{}{}
				}
				s.partial[id][acc] = struct{}{}
			}
		}
		s.mu.Unlock()
		return
	}
	if s.windows != nil && len(handed) > 0 {
		s.windows.Put(handed, q.cfg.Now())
	}
}

// HandOverBatch is how many shares one Adopt request carries.
const HandOverBatch = 2000

// HandOver sends shares (a leaving node's export: its own and those it
// adopted) to every other live member, each in parallel and in batches of
// HandOverBatch, within ctx. It answers how many members stored all of
// them; the error joins each member's failure. One member that stored them
// is enough for the counts to outlive this node: every owner asks every
// member.
func (q *Quota) HandOver(ctx context.Context, shares []storage.OriginShare) (int, error) {
	msgs := make([]*OriginShare, len(shares))
	for i := range shares {
		msgs[i] = originShareMsg(&shares[i])
	}
	var errs []error
	stored := 0
	eachOther(q, func(id string) (struct{}, error) { return struct{}{}, q.handOver(ctx, id, msgs) },
		func(id string, _ struct{}, err error) {
			if err != nil {
				errs = append(errs, fmt.Errorf("hand shares over to %s: %w", id, err))
				return
			}
			stored++
		})
	return stored, errors.Join(errs...)
}

func (q *Quota) handOver(ctx context.Context, id string, msgs []*OriginShare) error {
	p, err := q.peer(id)
	if err != nil {
		return err
	}
	for len(msgs) > 0 {
		n := min(len(msgs), HandOverBatch)
		if _, err := p.cli.Adopt(ctx, &AdoptRequest{Version: version, From: q.cfg.Owners.Self(), Shares: msgs[:n]}); err != nil {
			return err
		}
		msgs = msgs[n:]
	}
	return nil
}
