package rpc

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fraudd/fraudd/actors/iplimit"
	"github.com/fraudd/fraudd/cluster"
)

// Per-address limits across nodes (docs/cluster.md, "Per-address limits
// across nodes"). They stay off the request path: each node's limiters
// count what it admits (iplimit in shared mode), an AddrReporter hands the
// counts to the owners of their address shards every interval, and each
// owner's AddrTotals sums every node's part and answers the others' part
// and the lockouts it set. A node therefore admits past a limit by at most
// what the others admitted of that address since its last answer.

// AddrOwnership is what the reporter and the server know of address-shard
// ownership (Cluster is the real one).
type AddrOwnership interface {
	Self() string
	Members() []string
	// AddrOwner is the address shard's owner in this node's view.
	AddrOwner(shard int) (node string, ok bool)
	// HeldAddr is nil while this node's claim of the address shard is valid.
	HeldAddr(shard int) error
}

// AddrOwner implements AddrOwnership.
func (c Cluster) AddrOwner(shard int) (string, bool) {
	n, _, ok := c.View.Owner(cluster.KindAddr, shard)
	return n, ok
}

// HeldAddr implements AddrOwnership.
func (c Cluster) HeldAddr(shard int) error {
	_, err := c.held(cluster.KindAddr, shard)
	return err
}

// AddrShard is the address shard of a limiter key's route
// (iplimit.Key.Route: the IPv4 address, or the IPv6 /64).
func AddrShard(route uint64) int {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], route)
	return cluster.ShardOf(cluster.KindAddr, string(b[:]))
}

const (
	// maxAddrCounts bounds one report; a reporter with more sends several.
	maxAddrCounts = 16 << 10
	// maxAddrLocks bounds the lockouts one answer carries (the latest
	// ending first): lockouts are rare, and one answer must stay small.
	maxAddrLocks = 4096
	// maxAddrN bounds one count: no node admits more of one address in one
	// interval.
	maxAddrN = 1 << 40
)

// AddrTotals is an owner's sums of its address shards' counts, per node.
// Safe for concurrent use (reports from several nodes arrive at once).
type AddrTotals struct {
	mu     sync.Mutex
	max    int
	counts map[iplimit.Key]*addrCount
	locks  map[lockKey]int64
	// stale holds, per node, the keys it has a part in whose total others
	// changed since its last answer: its next answer carries them, so a
	// node that stopped counting an address still learns the others' part.
	stale map[string]map[iplimit.Key]struct{}
}

// addrCount is one window's counts, each node's part (a few nodes: a
// slice, summed when asked).
type addrCount struct {
	start int64
	by    []nodeCount
}

type nodeCount struct {
	node string
	n    int64
}

type lockKey struct {
	hi, lo uint64
	p64    bool
}

// NewAddrTotals keeps at most max counters (0: 1,000,000); past it, an
// address not yet counted stays each node's own until older windows end.
func NewAddrTotals(max int) *AddrTotals {
	if max <= 0 {
		max = 1_000_000
	}
	return &AddrTotals{max: max, counts: make(map[iplimit.Key]*addrCount), locks: make(map[lockKey]int64), stale: make(map[string]map[iplimit.Key]struct{})}
}

// Add sums node's counts (each valid: see countsOf) as of now and answers
// each, and every other key node has a part in whose total the others
// changed since its last answer.
func (a *AddrTotals) Add(node string, now int64, in []iplimit.Count) []iplimit.Sum {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []iplimit.Sum
	answered := map[iplimit.Key]bool{}
	swept := false // a full table is swept once per report, not once per new key
	for _, c := range in {
		length, limit, lockFor, err := c.Key.Limit()
		if err != nil || c.Key.Local() {
			// A member's own limiter (the operator lockout) summed here
			// would lock the address out of the customer API: the lock
			// this table keeps does not say whose it is.
			continue
		}
		if now-c.Start >= int64(length) {
			// The node's window ended before its count arrived (what it
			// admitted in the last round before the end): summed into a
			// window here, it would count against the next one on every
			// other node, and a limit errs permissive, never strict.
			continue
		}
		e := a.counts[c.Key]
		if e != nil && !iplimit.Live(e.start, length, now) {
			delete(a.counts, c.Key)
			e = nil
		}
		if e == nil {
			if len(a.counts) >= a.max && !swept {
				a.sweepLocked(now)
				swept = true
			}
			if len(a.counts) >= a.max {
				continue
			}
			start := c.Start
			if !iplimit.Live(start, length, now) {
				start = now
			}
			e = &addrCount{start: start}
			a.counts[c.Key] = e
		}
		e.add(node, c.N)
		if lockFor > 0 && e.others("") >= limit {
			// Invalid credentials from every node reached the figure: the
			// address (or /64) is locked, and the count starts again after.
			lk := lockKey{c.Key.Hi, c.Key.Lo, c.Key.P64}
			a.locks[lk] = max(a.locks[lk], now+int64(lockFor))
			delete(a.counts, c.Key)
			continue
		}
		for _, b := range e.by {
			if b.node != node {
				st := a.stale[b.node]
				if st == nil {
					st = make(map[iplimit.Key]struct{})
					a.stale[b.node] = st
				}
				st[c.Key] = struct{}{}
			}
		}
		if !answered[c.Key] {
			answered[c.Key] = true
			out = append(out, iplimit.Sum{Key: c.Key, Start: e.start, Others: e.others(node)})
		}
	}
	for k := range a.stale[node] {
		if e := a.counts[k]; e != nil && !answered[k] {
			out = append(out, iplimit.Sum{Key: k, Start: e.start, Others: e.others(node)})
		}
	}
	delete(a.stale, node)
	return out
}

// others sums every node's part but node's ("": every node's).
func (e *addrCount) others(node string) int64 {
	var n int64
	for _, b := range e.by {
		if b.node != node {
			n += b.n
		}
	}
	return n
}

// add counts n for node.
func (e *addrCount) add(node string, n int64) {
	for i := range e.by {
		if e.by[i].node == node {
			e.by[i].n += n
			return
		}
	}
	e.by = append(e.by, nodeCount{node, n})
}

// Locks lists the lockouts still running at now, the latest ending first,
// at most maxAddrLocks.
func (a *AddrTotals) Locks(now int64) []iplimit.Lock {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []iplimit.Lock
	for k, until := range a.locks {
		if until > now {
			out = append(out, iplimit.Lock{Hi: k.hi, Lo: k.lo, P64: k.p64, Until: until})
		}
	}
	if len(out) > maxAddrLocks {
		sort.Slice(out, func(i, j int) bool { return out[i].Until > out[j].Until })
		out = out[:maxAddrLocks]
	}
	return out
}

// Sweep drops the windows and lockouts that ended by now.
func (a *AddrTotals) Sweep(now int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sweepLocked(now)
}

func (a *AddrTotals) sweepLocked(now int64) {
	for k, e := range a.counts {
		if length, _, _, err := k.Limit(); err != nil || !iplimit.Live(e.start, length, now) {
			delete(a.counts, k)
		}
	}
	for k, until := range a.locks {
		if until <= now {
			delete(a.locks, k)
		}
	}
	for node, st := range a.stale {
		for k := range st {
			if a.counts[k] == nil {
				delete(st, k)
			}
		}
		if len(st) == 0 {
			delete(a.stale, node)
		}
	}
}

// Len is the number of counters and lockouts held.
func (a *AddrTotals) Len() (counts, locks int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.counts), len(a.locks)
}

// ReportAddrs implements NodeServer: the sender's counts for the address
// shards this node owns are summed; counts of other shards are left
// unanswered (the sender's view is behind: they stay its own).
func (s *Server) ReportAddrs(_ context.Context, r *AddrReport) (*AddrReply, error) {
	if s.cfg.Addrs == nil || s.cfg.AddrOwners == nil {
		return nil, status.Error(codes.Unavailable, "cluster rpc: this node sums no per-address counts")
	}
	counts, err := countsOf(r)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	now := s.cfg.Now().UnixNano()
	counts = ownedCounts(s.cfg.AddrOwners, counts)
	sums := s.cfg.Addrs.Add(r.Node, now, counts)
	return addrReply(s.cfg.AddrOwners.Self(), sums, s.cfg.Addrs.Locks(now)), nil
}

// ownedCounts keeps the counts of the address shards this node holds.
func ownedCounts(o AddrOwnership, in []iplimit.Count) []iplimit.Count {
	out := in[:0]
	held := map[int]bool{}
	for _, c := range in {
		shard := AddrShard(c.Key.Route())
		ok, seen := held[shard]
		if !seen {
			ok = o.HeldAddr(shard) == nil
			held[shard] = ok
		}
		if ok {
			out = append(out, c)
		}
	}
	return out
}

// countsOf checks a report: every count names a limiter window that
// exists, a start and a positive count.
func countsOf(r *AddrReport) ([]iplimit.Count, error) {
	if r.GetVersion() == 0 || r.GetNode() == "" {
		return nil, fmt.Errorf("%w: address report without a version or a node", errBadRequest)
	}
	if len(r.Counts) > maxAddrCounts {
		return nil, fmt.Errorf("%w: %d address counts in one report, at most %d", errBadRequest, len(r.Counts), maxAddrCounts)
	}
	out := make([]iplimit.Count, 0, len(r.Counts))
	for _, c := range r.Counts {
		k, err := addrKeyOf(c.GetKey())
		if err != nil {
			return nil, err
		}
		if c.N <= 0 || c.N > maxAddrN || c.StartUnixNano <= 0 {
			return nil, fmt.Errorf("%w: address count %d from %d", errBadRequest, c.N, c.StartUnixNano)
		}
		out = append(out, iplimit.Count{Key: k, Start: c.StartUnixNano, N: c.N})
	}
	return out, nil
}

func addrKeyOf(k *AddrKey) (iplimit.Key, error) {
	if k == nil || k.Kind > 255 || k.Win > 255 {
		return iplimit.Key{}, fmt.Errorf("%w: address key %v", errBadRequest, k)
	}
	out := iplimit.Key{Hi: k.Hi, Lo: k.Lo, Kind: iplimit.Kind(k.Kind), Win: uint8(k.Win), P64: k.P64}
	if _, _, _, err := out.Limit(); err != nil {
		return iplimit.Key{}, fmt.Errorf("%w: %w", errBadRequest, err)
	}
	return out, nil
}

func keyMsg(k iplimit.Key) *AddrKey {
	return &AddrKey{Hi: k.Hi, Lo: k.Lo, Kind: uint32(k.Kind), Win: uint32(k.Win), P64: k.P64}
}

func reportMsg(node string, counts []iplimit.Count) *AddrReport {
	r := &AddrReport{Version: version, Node: node, Counts: make([]*AddrCount, len(counts))}
	for i, c := range counts {
		r.Counts[i] = &AddrCount{Key: keyMsg(c.Key), StartUnixNano: c.Start, N: c.N}
	}
	return r
}

func addrReply(node string, sums []iplimit.Sum, locks []iplimit.Lock) *AddrReply {
	r := &AddrReply{Version: version, Node: node, Sums: make([]*AddrSum, len(sums)), Locks: make([]*AddrLock, len(locks))}
	for i, s := range sums {
		r.Sums[i] = &AddrSum{Key: keyMsg(s.Key), StartUnixNano: s.Start, Others: s.Others}
	}
	for i, l := range locks {
		r.Locks[i] = &AddrLock{Hi: l.Hi, Lo: l.Lo, P64: l.P64, UntilUnixNano: l.Until}
	}
	return r
}

// answerOf checks an owner's answer: sums of known windows with counts that
// are not negative, and lockouts that end no later than a lockout set now
// would. A malformed answer is dropped whole.
func answerOf(r *AddrReply, from string, now int64) ([]iplimit.Sum, []iplimit.Lock, error) {
	if r.GetNode() != from || len(r.Sums) > maxAddrCounts || len(r.Locks) > maxAddrLocks {
		return nil, nil, fmt.Errorf("member %s answered an address report as %q with %d sums and %d locks: %w", from, r.GetNode(), len(r.Sums), len(r.Locks), errBadRequest)
	}
	sums := make([]iplimit.Sum, 0, len(r.Sums))
	for _, s := range r.Sums {
		k, err := addrKeyOf(s.GetKey())
		if err != nil {
			return nil, nil, fmt.Errorf("member %s: %w", from, err)
		}
		if s.Others < 0 || s.Others > maxAddrN {
			return nil, nil, fmt.Errorf("member %s answered %d others: %w", from, s.Others, errBadRequest)
		}
		sums = append(sums, iplimit.Sum{Key: k, Start: s.StartUnixNano, Others: s.Others})
	}
	// A lock ends at most the longest lockout (plus a minute of clock skew)
	// from now: a peer cannot lock an address for good.
	longest := now + int64(time.Minute)
	for _, r := range iplimit.Rules {
		longest = max(longest, now+int64(r.LockFor)+int64(time.Minute))
	}
	locks := make([]iplimit.Lock, 0, len(r.Locks))
	for _, l := range r.Locks {
		lk := iplimit.Lock{Hi: l.Hi, Lo: l.Lo, P64: l.P64, Until: l.UntilUnixNano}
		if _, _, _, err := (iplimit.Key{Hi: lk.Hi, Lo: lk.Lo, Kind: iplimit.AuthFail, P64: lk.P64}).Limit(); err != nil || lk.Until > longest {
			return nil, nil, fmt.Errorf("member %s answered a lock %+v: %w", from, lk, errBadRequest)
		}
		locks = append(locks, lk)
	}
	return sums, locks, nil
}

// AddrLimits is this node's per-address limiters in shared mode
// (*iplimit.Client).
type AddrLimits interface {
	Export() ([]iplimit.Count, error)
	Absorb(sums []iplimit.Sum, locks []iplimit.Lock, now time.Time)
}

// DefaultAddrEvery is how often a node reports its per-address counts.
const DefaultAddrEvery = 100 * time.Millisecond

// AddrReporter hands this node's per-address counts to the owners of their
// shards every interval (Run) and absorbs the answers.
type AddrReporter struct {
	Limits AddrLimits
	Totals *AddrTotals
	Owners AddrOwnership
	Peers  *Quota
	Now    func() time.Time
	Log    *slog.Logger
	// Idle is how long a member this node has nothing to report to goes
	// unasked (0: DefaultAddrIdle; < 0: asked every round). Its answer
	// carries the others' changes and its lockouts, so a node that serves
	// an address nothing more learns them within Idle; the asks, which
	// grow as the square of the members, stay few.
	Idle time.Duration

	asked map[string]time.Time // last ask per member, wall clock (Round's goroutine)
	asks  atomic.Int64
}

// DefaultAddrIdle: see AddrReporter.Idle.
const DefaultAddrIdle = time.Second

// Asks counts the ReportAddrs calls made.
func (r *AddrReporter) Asks() int64 { return r.asks.Load() }

// Run reports every interval until ctx ends, and sweeps the totals this
// node keeps as owner every ten.
func (r *AddrReporter) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for i := 1; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.Round(ctx)
		if i%10 == 0 {
			r.Totals.Sweep(r.Now().UnixNano())
		}
	}
}

// Round reports once: the counts since the last round go to their owners
// (this node's own totals with no hop), in parallel within the client's
// Timeout. A member with no counts to take is asked too, once per Idle: its
// answer carries the others' changes to windows this node counted in
// before, and the lockouts it set. Counts whose shard has no owner in the view, or
// whose owner does not answer, stay this node's alone: a limit errs
// permissive, never strict.
func (r *AddrReporter) Round(parent context.Context) {
	counts, err := r.Limits.Export()
	if err != nil && r.Log != nil {
		r.Log.Warn("cluster: per-address counts not all read", "err", err)
	}
	self := r.Owners.Self()
	by := map[string][]iplimit.Count{}
	for _, c := range counts {
		if owner, ok := r.Owners.AddrOwner(AddrShard(c.Key.Route())); ok {
			by[owner] = append(by[owner], c)
		}
	}
	now := r.Now()
	ns := now.UnixNano()
	r.Limits.Absorb(r.Totals.Add(self, ns, ownedCounts(r.Owners, by[self])), r.Totals.Locks(ns), now)
	// Members with nothing to report are asked once per Idle, decided here:
	// the asks run in parallel. Paced by the wall clock, not the node's
	// (a test clock does not move on its own).
	idle := r.Idle
	if idle == 0 {
		idle = DefaultAddrIdle
	}
	wall := time.Now()
	if r.asked == nil {
		r.asked = map[string]time.Time{}
	}
	skip := map[string]bool{}
	for _, id := range r.Owners.Members() {
		if len(by[id]) == 0 && idle > 0 && wall.Sub(r.asked[id]) < idle {
			skip[id] = true
		}
	}
	q := r.Peers
	ctx, cancel := context.WithTimeout(parent, q.cfg.Timeout)
	defer cancel()
	type answer struct {
		sums  []iplimit.Sum
		locks []iplimit.Lock
		asked bool
	}
	eachOther(q, func(id string) (answer, error) {
		if skip[id] {
			return answer{}, nil
		}
		mine := by[id]
		a := answer{asked: true}
		for first := true; first || len(mine) > 0; first = false {
			chunk := mine[:min(len(mine), maxAddrCounts)]
			mine = mine[len(chunk):]
			r.asks.Add(1)
			sums, locks, err := q.reportAddrs(ctx, id, self, chunk, ns)
			if err != nil {
				return a, err
			}
			a.sums, a.locks = append(a.sums, sums...), locks
		}
		return a, nil
	}, func(id string, a answer, err error) {
		switch {
		case err != nil:
			if r.Log != nil {
				r.Log.Debug("cluster: per-address counts not summed by their owner", "member", id, "counts", len(by[id]), "err", err)
			}
		case a.asked:
			r.asked[id] = wall
		}
		r.Limits.Absorb(a.sums, a.locks, now)
	})
}

func (q *Quota) reportAddrs(ctx context.Context, id, self string, counts []iplimit.Count, now int64) ([]iplimit.Sum, []iplimit.Lock, error) {
	p, err := q.peer(id)
	if err != nil {
		return nil, nil, err
	}
	rep, err := p.cli.ReportAddrs(ctx, reportMsg(self, counts))
	if err != nil {
		return nil, nil, err
	}
	return answerOf(rep, id, now)
}
