package rpc

import (
	"context"
	"fmt"
	"slices"
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
// tells every member whose read may have held the call to take it out of
// that load (Discount).
//
// A read may hold the call when it ended after the call began and began
// before the refund was stored. The book's sequence orders those four
// points; a read not yet ended counts as ending after everything. Where a
// read in those bounds did not hold the call (it read the store before the
// charge was written, or after the refund was), the discount errs
// permissive by that call, the direction a share may err; a read outside
// them cannot have held it.

// shareRead is one Shares read this node answered: the member that asked,
// its load, the month, and the book's sequence when the read began and
// when it ended (openRead while it runs).
type shareRead struct {
	from       string
	load       uint64
	month      storage.Month
	start, end uint64
}

const openRead = ^uint64(0)

// maxReadsPerAccount bounds the reads remembered of one account per
// generation (a member loads an account once per owner change or
// eviction; more than this in 15 s is a member asking in a loop): the
// oldest go first.
const maxReadsPerAccount = 64

// beginRead records a Shares read of account's share by member from for
// its load, before the share is read, so that a refund stored while the
// read runs cannot miss it. It returns the read, for endRead (nil: nothing
// recorded). mu not held.
func (b *callBook) beginRead(account, from string, load uint64, m storage.Month) *shareRead {
	if load == 0 || from == "" {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tick()
	b.seq++
	if b.reads == nil {
		b.reads = map[string][]*shareRead{}
	}
	r := &shareRead{from: from, load: load, month: m, start: b.seq, end: openRead}
	rs := slices.DeleteFunc(b.reads[account], func(o *shareRead) bool { return o.from == from && o.load == load })
	if len(rs) >= maxReadsPerAccount {
		rs = slices.Delete(rs, 0, len(rs)-maxReadsPerAccount+1)
	}
	b.reads[account] = append(rs, r)
	return r
}

// endRead records that r's share was read (ok) or that the read failed or
// was not answered, when it holds nothing. mu not held.
func (b *callBook) endRead(r *shareRead, ok bool) {
	if r == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seq++
	r.end = b.seq
	if !ok {
		r.from = "" // matches no member
	}
}

// readsHolding are the distinct (member, load) reads of account's share in
// month m that may hold the refunded call e. mu not held.
func (b *callBook) readsHolding(e *callEntry, m storage.Month) []shareRead {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []shareRead
	for _, gen := range []map[string][]*shareRead{b.prevReads, b.reads} {
	next:
		for _, r := range gen[e.account] {
			if r.from == "" || r.end <= e.seq || r.start >= e.refundSeq || r.month != m {
				continue
			}
			for _, o := range out {
				if o.from == r.from && o.load == r.load {
					continue next
				}
			}
			out = append(out, *r)
		}
	}
	return out
}

// discount asks every member that read this node's share of e's account
// with e's charge in it to take the charge out of that load, in the
// background. Called once e's refund is stored.
func (s *Server) discount(e *callEntry) {
	if s.cfg.Discounts == nil {
		return
	}
	ref := e.charge.refund(e.account)
	taken := ref.Taken()
	reads := s.calls.readsHolding(e, taken.Month)
	for _, r := range reads {
		if r.from == s.cfg.Owners.Self() {
			continue // its own loads read the store: the refund is in it
		}
		s.cfg.Discounts.Discount(r.from, &DiscountRequest{Version: version, From: s.cfg.Owners.Self(), Account: e.account, Month: uint32(taken.Month), Load: r.load,
			Used: taken.Counts.Used, Lookups: taken.Counts.Lookups, Evaluations: taken.Totals.Evaluations, LimitHits: taken.Totals.LimitHits,
			Hourly: e.charge.hourly && e.charge.allowed, Bucket: uint32(e.charge.bucket), ChargedUnixNano: e.charge.now})
	}
}

// Discount sends d to member in the background (background). A member that
// does not answer, or predates the RPC, keeps the call in its load: strict
// by that call until it loads the account again.
func (q *Quota) Discount(member string, d *DiscountRequest) {
	if q.background(func(ctx context.Context) {
		p, err := q.peer(member)
		if err == nil {
			_, err = p.cli.Discount(ctx, d)
		}
		if err != nil {
			q.log.Warn("cluster: a refunded call may stay counted in a member's load of the account until it loads it again", "node", member, "account", d.Account, "err", err)
		}
	}) {
		q.discounts.Add(1)
	}
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
// the member that gave the call back, and one call's take: a month count
// (evaluation or lookup) and a total, or a limit hit alone.
func discountOf(r *DiscountRequest) (quota.Discount, error) {
	m := storage.Month(r.GetMonth())
	one := func(n int64) bool { return n == 0 || n == 1 }
	take := one(r.GetUsed()) && one(r.GetLookups()) && one(r.GetEvaluations()) && one(r.GetLimitHits()) &&
		r.GetUsed()+r.GetLookups() <= 1 && (r.GetLimitHits() == 0 || r.GetUsed()+r.GetLookups()+r.GetEvaluations() == 0)
	if r.GetVersion() == 0 || r.GetAccount() == "" || len(r.GetAccount()) > maxObsAccountID || r.GetFrom() == "" || m%100 < 1 || m%100 > 12 || r.GetLoad() == 0 ||
		!take || r.GetBucket() > uint32(quota.Test) || (r.GetHourly() && r.GetChargedUnixNano() <= 0) {
		return quota.Discount{}, fmt.Errorf("%w: discount of %q month %d from %q", errBadRequest, r.GetAccount(), m, r.GetFrom())
	}
	return quota.Discount{Account: r.Account, From: r.From, Tag: r.Load, Taken: storage.UsageDelta{Account: r.Account, Month: m,
		Counts: storage.MonthCounts{Used: r.Used, Lookups: r.Lookups},
		Totals: storage.Totals{Evaluations: r.Evaluations, LimitHits: r.LimitHits}},
		Hourly: r.Hourly, Bucket: quota.Bucket(r.Bucket), At: time.Unix(0, r.ChargedUnixNano).UTC()}, nil
}
