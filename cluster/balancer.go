package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// BalancerConfig configures RunBalancer.
type BalancerConfig struct {
	Member *Member
	// View is the node's started owner view.
	View  *OwnerView
	Kinds []Kind
	// Acquired runs after a shard is claimed and before it is reported
	// owned: rebuild its state (the G-counter shares) here.
	Acquired func(ctx context.Context, c Claim)
	// Releasing runs before a shard is handed over: stop admitting, flush,
	// send its device history. An error keeps the shard; the next pass
	// tries again.
	Releasing func(ctx context.Context, c Claim) error
	// Lost runs for each claim that went with a lost lease: the shard's
	// owner-only work must stop (its fenced writes fail already).
	Lost func(c Claim)
	// Every is the period of a pass when nothing changed; 1 s when zero.
	Every time.Duration
}

// Balancer keeps one member's claims in line with the rendezvous assignment.
type Balancer struct {
	cfg BalancerConfig

	mu     sync.Mutex
	claims map[Kind]map[int]Claim
	// lapsed are claims dropped while the lease was not certainly held
	// (the validity deadline passed) but was not replaced either. etcd may
	// still hold that lease: its deadline runs from when it received the
	// renewal, and a leader change extends every lease. If a renewal of the
	// same lease is acknowledged again, their owner keys are still this
	// member's, and the view shows them as its own, so no plan would claim
	// or release them: they are taken up again instead.
	lapsed map[Kind]map[int]Claim
	// admits counts, per kind and shard, the owner-side actions admitted
	// under a claim (Admit) and not yet done: release waits for them
	// between dropping the claim and Releasing, so that Releasing flushes
	// everything that was admitted, not only what reached its actors.
	admits map[Kind][]atomic.Int32
	// admitWait bounds a release's wait for them (admitWait; tests
	// shorten it).
	admitWait time.Duration
}

// NewBalancer checks cfg; Run drives it.
func NewBalancer(cfg BalancerConfig) (*Balancer, error) {
	if cfg.Member == nil || cfg.View == nil || len(cfg.Kinds) == 0 {
		return nil, errors.New("cluster balancer: member, view and kinds are required")
	}
	for _, k := range cfg.Kinds {
		if Shards(k) == 0 {
			return nil, errors.New("cluster balancer: unknown shard kind " + string(k))
		}
	}
	if cfg.Every <= 0 {
		cfg.Every = time.Second
	}
	b := &Balancer{cfg: cfg, claims: map[Kind]map[int]Claim{}, lapsed: map[Kind]map[int]Claim{}, admits: map[Kind][]atomic.Int32{}, admitWait: admitWait}
	for _, k := range cfg.Kinds {
		b.claims[k] = map[int]Claim{}
		b.lapsed[k] = map[int]Claim{}
		b.admits[k] = make([]atomic.Int32, Shards(k))
	}
	return b, nil
}

// Admit is Claim for an owner-side action that changes the shard's state
// (a charge): with the claim, done must be called once the action has
// reached the actors that Releasing flushes (queued there, or answered).
// Until then a release of the shard waits (within its context, at most
// admitWait) before Releasing: an action admitted just before the claim
// was dropped would otherwise reach its actors after they were flushed and
// forgotten.
func (b *Balancer) Admit(k Kind, shard int) (c Claim, done func(), ok bool) {
	as := b.admits[k]
	if shard < 0 || shard >= len(as) {
		return Claim{}, nil, false
	}
	a := &as[shard]
	a.Add(1) // before the claim is read: release reads the count after dropping it
	if c, ok = b.Claim(k, shard); !ok {
		a.Add(-1)
		return Claim{}, nil, false
	}
	return c, func() { a.Add(-1) }, true
}

// admitPoll is how often a release looks whether the actions admitted
// under the claim it dropped are done; admitWait bounds the wait (an
// action stuck past it is flushed without, as before Admit, rather than
// hold the shard, and a graceful leave, for good).
const (
	admitPoll = time.Millisecond
	admitWait = 5 * time.Second
)

// drainAdmits waits until no action admitted under shard c is under way,
// or admitWait passes, or ctx ends.
func (b *Balancer) drainAdmits(ctx context.Context, c Claim) {
	as := b.admits[c.Kind]
	if c.Shard < 0 || c.Shard >= len(as) || as[c.Shard].Load() == 0 {
		return
	}
	t := time.NewTicker(admitPoll)
	defer t.Stop()
	limit := time.NewTimer(b.admitWait)
	defer limit.Stop()
	for as[c.Shard].Load() > 0 {
		select {
		case <-ctx.Done():
			return
		case <-limit.C:
			return
		case <-t.C:
		}
	}
}

// Run passes on every change of the member set or of this member's lease,
// on every change of the owner view, and every cfg.Every, until ctx ends.
func (b *Balancer) Run(ctx context.Context) {
	t := time.NewTicker(b.cfg.Every)
	defer t.Stop()
	for {
		changed, viewed := b.cfg.Member.Changed(), b.cfg.View.Store().revChanged()
		b.Pass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-viewed:
		case <-t.C:
		}
	}
}

// Claim is the member's current claim of a shard, if it holds one.
func (b *Balancer) Claim(k Kind, shard int) (Claim, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, ok := b.claims[k][shard]
	return c, ok
}

// Owned counts the shards of kind k the member holds.
func (b *Balancer) Owned(k Kind) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.claims[k])
}

// ReleaseAll hands every shard over (Releasing first), for a graceful leave.
// It stops when ctx ends, the shards it did not reach counted in its
// error: they go with the lease (a revoke, or its expiry).
func (b *Balancer) ReleaseAll(ctx context.Context) error {
	var errs []error
	for _, k := range b.cfg.Kinds {
		b.mu.Lock()
		cs := make([]Claim, 0, len(b.claims[k]))
		for _, c := range b.claims[k] {
			cs = append(cs, c)
		}
		b.mu.Unlock()
		for i, c := range cs {
			if err := ctx.Err(); err != nil {
				errs = append(errs, fmt.Errorf("%d %s shards not released: %w", len(cs)-i, k, err))
				break
			}
			errs = append(errs, b.release(ctx, c))
		}
	}
	return errors.Join(errs...)
}

// Pass runs one round: drop claims of a lost lease, release what belongs to
// another member now, claim what belongs to this one and nobody holds.
func (b *Balancer) Pass(ctx context.Context) {
	m := b.cfg.Member
	lease := m.Lease()
	held := m.Held(m.cfg.Now())
	var lost []Claim
	b.mu.Lock()
	for k, cs := range b.claims {
		for s, c := range cs {
			if !held || c.Lease != lease {
				lost = append(lost, c)
				delete(cs, s)
				if c.Lease == lease {
					b.lapsed[k][s] = c
				}
			}
		}
	}
	retake := map[Kind][]int{}
	for k, cs := range b.lapsed {
		for s, c := range cs {
			switch {
			case c.Lease != lease:
				delete(cs, s) // that lease is gone, and its owner keys with it
			case held:
				retake[k] = append(retake[k], s)
			}
		}
	}
	b.mu.Unlock()
	if b.cfg.Lost != nil {
		for _, c := range lost {
			b.cfg.Lost(c)
		}
	}
	if !held {
		return
	}
	// A leaving member (this one included) is not assigned anything: the
	// others claim its shards as it releases them.
	members := m.ActiveIDs()
	for _, k := range b.cfg.Kinds {
		// Claim returns a claim the member holds under its current lease
		// (Acquired rebuilds what Lost dropped); the plan below then
		// releases those that belong to another member now.
		b.claimAll(ctx, k, retake[k])
		b.mu.Lock()
		for s := range b.claims[k] {
			delete(b.lapsed[k], s)
		}
		b.mu.Unlock()
		owners := b.cfg.View.Owners(k)
		// The view can lag this member's own claims; count them as its own.
		b.mu.Lock()
		for s := range b.claims[k] {
			owners[s] = m.ID()
		}
		b.mu.Unlock()
		p := PlanFor(k, m.ID(), members, owners)
		for _, s := range p.Release {
			if c, ok := b.Claim(k, s); ok {
				b.release(ctx, c)
			}
		}
		b.claimAll(ctx, k, p.Claim)
	}
}

func (b *Balancer) release(ctx context.Context, c Claim) error {
	// The claim goes first: from here on Claim does not report it, so the
	// node's own routing and its gRPC service treat the shard as another's
	// and admit nothing new for it while Releasing flushes what was
	// admitted. Only then may the next owner read this node's share.
	b.mu.Lock()
	delete(b.claims[c.Kind], c.Shard)
	b.mu.Unlock()
	// What was admitted under the claim reaches its actors first, so
	// that Releasing flushes it (Admit).
	b.drainAdmits(ctx, c)
	keep := func() {
		b.mu.Lock()
		if _, again := b.claims[c.Kind][c.Shard]; !again {
			b.claims[c.Kind][c.Shard] = c
		}
		b.mu.Unlock()
	}
	if b.cfg.Releasing != nil {
		if err := b.cfg.Releasing(ctx, c); err != nil {
			keep() // the next pass tries again; Pass drops it if the lease went
			return err
		}
	}
	err := b.cfg.Member.Release(ctx, c)
	switch {
	case err == nil:
	case errors.Is(err, ErrFenced):
		// Refused by the local check (the deadline passed while Releasing
		// ran) the owner key may still be under the lease: should the lease
		// be held again, the next passes take the shard up and release it.
		if c.Lease == b.cfg.Member.Lease() {
			b.mu.Lock()
			b.lapsed[c.Kind][c.Shard] = c
			b.mu.Unlock()
		}
	default:
		keep()
	}
	return err
}

// claimAll claims shards 16 at a time: etcd batches concurrent writes into
// one sync, so a node taking over many shards is not paced by fsyncs.
func (b *Balancer) claimAll(ctx context.Context, k Kind, shards []int) {
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for _, s := range shards {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c, err := b.cfg.Member.Claim(ctx, k, s)
			if err != nil {
				return // owned meanwhile, or the lease went: the next pass sees it
			}
			if b.cfg.Acquired != nil {
				b.cfg.Acquired(ctx, c)
			}
			b.mu.Lock()
			b.claims[k][s] = c
			b.mu.Unlock()
		})
	}
	wg.Wait()
}
