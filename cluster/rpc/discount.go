package rpc

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/storage"
)

// A refund is stored in the refunding node's own share as a negative
// delta. A member that loaded the account from that share after the call
// was charged and before the refund holds the call in its sum (it reads
// each share once per load), so without more it would count the call until
// it next loads the account: the one case where a share errs strict. So
// the book also remembers, for a while, who read which account's share and
// for which of their loads (SharesRequest.from and .load), and a refund
// tells every member that read the share after the call began to take the
// call out of that load (Discount). A read that came after the call began
// but before its charge was stored did not hold it: the discount then errs
// permissive by that call, the direction a share may err.

// shareRead is one Shares answer this node gave: the member that asked,
// its load, the month, and the book's sequence when it was answered.
type shareRead struct {
	from  string
	load  uint64
	month storage.Month
	seq   uint64
}

// maxReadsPerAccount bounds the reads remembered of one account per
// generation (a member loads an account once per owner change or
// eviction; more than this in 15 s is a member asking in a loop).
const maxReadsPerAccount = 64

// noteRead records a Shares read of account's share by member from for
// its load, before the share is read, so that a refund stored after the
// read began cannot miss it. mu not held.
func (b *callBook) noteRead(account, from string, load uint64, m storage.Month) {
	if load == 0 || from == "" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tick()
	b.seq++
	if b.reads == nil {
		b.reads = map[string][]shareRead{}
	}
	if rs := b.reads[account]; len(rs) < maxReadsPerAccount {
		b.reads[account] = append(rs, shareRead{from: from, load: load, month: m, seq: b.seq})
	}
}

// readsSince are the distinct (member, load) reads of account's share in
// month m made after the call e began. mu not held.
func (b *callBook) readsSince(e *callEntry, m storage.Month) []shareRead {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []shareRead
	for _, gen := range []map[string][]shareRead{b.prevReads, b.reads} {
	next:
		for _, r := range gen[e.account] {
			if r.seq <= e.seq || r.month != m {
				continue
			}
			for _, o := range out {
				if o.from == r.from && o.load == r.load {
					continue next
				}
			}
			out = append(out, r)
		}
	}
	return out
}

// discount asks every member that read this node's share of e's account
// with e's charge in it to take the charge out of that load, in the
// background. Called once e's refund is stored.
func (s *Server) discount(e *callEntry) {
	if s.cfg.Discounts == nil || !e.charged {
		return
	}
	ref := e.charge.refund(e.account)
	taken := ref.Taken()
	reads := s.calls.readsSince(e, taken.Month)
	for _, r := range reads {
		if r.from == s.cfg.Owners.Self() {
			continue // its own loads read the store: the refund is in it
		}
		s.cfg.Discounts.Discount(r.from, &DiscountRequest{Version: version, From: s.cfg.Owners.Self(), Account: e.account, Month: uint32(taken.Month), Load: r.load,
			Used: taken.Counts.Used, Lookups: taken.Counts.Lookups, Evaluations: taken.Totals.Evaluations, LimitHits: taken.Totals.LimitHits,
			Hourly: e.charge.hourly && e.charge.allowed, Bucket: uint32(e.charge.bucket), ChargedUnixNano: e.charge.now})
	}
}

// Discount sends d to member in the background, within the call timeout.
// A member that does not answer, or predates the RPC, keeps the call in
// its load: strict by that call until it loads the account again.
func (q *Quota) Discount(member string, d *DiscountRequest) {
	// Under the lock, as settle starts its loops: Close must not be
	// waiting already.
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed.Load() {
		return
	}
	q.discounts.Add(1)
	q.wg.Go(func() {
		p, err := q.peer(member)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), q.cfg.Timeout)
			_, err = p.cli.Discount(ctx, d)
			cancel()
		}
		if err != nil {
			q.log.Warn("cluster: a refunded call stays counted in a member's load of the account until it loads it again", "node", member, "account", d.Account, "err", err)
		}
	})
}

// Discounts counts the discounts this node sent (tests, metrics).
func (q *Quota) Discounts() int64 { return q.discounts.Load() }

// Discount implements NodeServer: another member refunded a call it had
// charged, after this node read its share for a load (Shares named it);
// the call comes out of that load, in memory, while it is held.
func (s *Server) Discount(_ context.Context, r *DiscountRequest) (*DiscountReply, error) {
	d, err := discountOf(r)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	ok, err := s.cfg.Quota.Discount(d)
	if err != nil {
		return nil, status.Error(codes.Unavailable, fmt.Sprintf("discount of %q: %v", r.Account, err))
	}
	return &DiscountReply{Version: version, Applied: ok}, nil
}

// discountOf checks and converts a request: an account, a month, a load,
// and one call's take at most.
func discountOf(r *DiscountRequest) (quota.Discount, error) {
	m := storage.Month(r.GetMonth())
	one := func(n int64) bool { return n == 0 || n == 1 }
	if r.GetVersion() == 0 || r.GetAccount() == "" || len(r.GetAccount()) > maxObsAccountID || m%100 < 1 || m%100 > 12 || r.GetLoad() == 0 ||
		!one(r.GetUsed()) || !one(r.GetLookups()) || !one(r.GetEvaluations()) || !one(r.GetLimitHits()) ||
		r.GetBucket() > uint32(quota.Test) || (r.GetHourly() && r.GetChargedUnixNano() <= 0) {
		return quota.Discount{}, fmt.Errorf("%w: discount of %q month %d from %q", errBadRequest, r.GetAccount(), m, r.GetFrom())
	}
	return quota.Discount{Account: r.Account, Tag: r.Load, Taken: storage.UsageDelta{Account: r.Account, Month: m,
		Counts: storage.MonthCounts{Used: r.Used, Lookups: r.Lookups},
		Totals: storage.Totals{Evaluations: r.Evaluations, LimitHits: r.LimitHits}},
		Hourly: r.Hourly, Bucket: quota.Bucket(r.Bucket), At: time.Unix(0, r.ChargedUnixNano).UTC()}, nil
}
