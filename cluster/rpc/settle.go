package rpc

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fraudd/fraudd/actors/quota"
)

// A charge sent to another member is ambiguous when the call breaks after
// it was sent (the caller's deadline passed, the connection broke): the
// owner may have charged it, and the caller, answering 503, says no quota
// was used (SPEC §7). A paused owner (SIGSTOP, a long GC pause) is the
// usual case: it charged a call, stopped before its answer left, and
// resumed after the caller gave up.
//
// So every charging call carries an id, and the owner keeps a book of the
// calls it received for a while. A caller whose call was ambiguous asks
// the same node to Settle it before it answers (and goes on asking in the
// background while the node does not answer): the node gives back what it
// charged (quota.Refund), or, when it has not charged the call yet,
// refuses it whenever it gets to it. Either way the call does not count.
// The same happens to an answer the caller discards: one under a claim
// older than the caller's view, before it charges at the newer owner.
//
// What is left: the call's device event use and history observation
// (Evaluate) stay. A node killed after charging a call, whose increment
// reached its store, answers "unknown" once it is back (a new process
// remembers no calls): that call counts although answered 503.

// Settle outcomes (SettleReply.outcome).
const (
	settleRefunded = 1
	settleVoid     = 2
	settleUnknown  = 3
)

// callKeep is how long, in the book's running time, a node remembers a
// call: past the longest a caller goes on settling (settleMax), so that a
// call it received and forgot is never taken for one it never got.
const callKeep = 15 * time.Second

// maxStep is the most a gap between two uses of the book adds to its
// running time: a process that was paused (SIGSTOP) must not forget, on
// waking, the calls its callers are about to settle.
const maxStep = time.Second

// vouchMargin is how much earlier than the book's start a call must have
// been sent for the book to vouch that it never received it (the nodes'
// clocks differ a little).
const vouchMargin = time.Second

type callState uint8

const (
	callRunning   callState = iota // received, not charged yet or charging
	callDone                       // answered: charged, or not (charged says)
	callRefunding                  // a Settle is giving it back
	callRefunded
	callVoid // settled before it was charged: refused when it comes
)

// callEntry is what the book holds of one call: enough to refund it.
type callEntry struct {
	account string
	state   callState
	charged bool // the quota ran it (allowed or refused)
	settle  bool // a Settle came while it ran: the runner refunds
	armed   bool // the runner is past its last check and charges
	ch      quota.Charge
	res     quota.ChargeResult
}

// callBook is a node's memory of the charging calls other members sent
// it, by call id, in two generations that rotate every callKeep of
// running time.
type callBook struct {
	mu        sync.Mutex
	cur, prev map[uint64]*callEntry
	started   time.Time // wall clock: calls sent before it are unknown
	running   time.Duration
	last      time.Time
	rotated   time.Duration
}

func newCallBook() *callBook {
	now := time.Now()
	return &callBook{cur: map[uint64]*callEntry{}, prev: map[uint64]*callEntry{}, started: now, last: now}
}

// tick advances the running time and rotates the generations. mu held.
func (b *callBook) tick() {
	now := time.Now()
	b.running += min(max(now.Sub(b.last), 0), maxStep)
	b.last = now
	if b.running-b.rotated >= callKeep {
		b.prev, b.cur = b.cur, map[uint64]*callEntry{}
		b.rotated = b.running
	}
}

func (b *callBook) find(id uint64) *callEntry {
	if e := b.cur[id]; e != nil {
		return e
	}
	return b.prev[id]
}

// begin records a call as it arrives; false when it was settled before
// (the caller gave up on it: it must not be charged). Id 0 is a caller
// that does not settle.
func (b *callBook) begin(id uint64, account string) bool {
	if id == 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tick()
	if e := b.find(id); e != nil {
		return false // settled (void), or a repeated id: never charge twice
	}
	b.cur[id] = &callEntry{account: account}
	return true
}

// arm is the runner's last check before it charges: false when a Settle
// came meanwhile, and the call is then void.
func (b *callBook) arm(id uint64) bool {
	if id == 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.find(id)
	if e == nil {
		return true // rotated out while it ran: nobody settles it now
	}
	if e.settle {
		e.state = callVoid
		return false
	}
	e.armed = true
	return true
}

// done records what the runner did: the charge and its answer when the
// quota ran it. True when a Settle came while it charged: the runner
// refunds it and answers that nothing was done.
func (b *callBook) done(id uint64, charged bool, ch *quota.Charge, res *quota.ChargeResult) (refund bool) {
	if id == 0 {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.find(id)
	if e == nil {
		return false
	}
	e.charged = charged
	if charged {
		e.ch, e.res = *ch, *res
		e.ch.Limits = quota.Limits{} // a refund needs no limits: keep the book small
	}
	if e.settle {
		e.state = callRefunded
		return charged
	}
	e.state = callDone
	return false
}

// errSettled answers a call its caller settled before it was charged.
func errSettled(id uint64) error {
	return status.Error(codes.Aborted, fmt.Sprintf("cluster call %x: settled by its caller before it was charged; nothing done", id))
}

// Settle implements NodeServer.
func (s *Server) Settle(_ context.Context, r *SettleRequest) (*SettleReply, error) {
	if r.GetCallId() == 0 || r.GetAccount() == "" || len(r.GetAccount()) > maxObsAccountID {
		return nil, status.Error(codes.InvalidArgument, "cluster rpc: settle needs a call id and an account")
	}
	b := s.calls
	b.mu.Lock()
	b.tick()
	e := b.find(r.CallId)
	if e == nil {
		if time.Unix(0, r.GetSentUnixNano()).Before(b.started.Add(vouchMargin)) {
			b.mu.Unlock()
			return &SettleReply{Version: version, Outcome: settleUnknown}, nil
		}
		b.cur[r.CallId] = &callEntry{account: r.Account, state: callVoid}
		b.mu.Unlock()
		return &SettleReply{Version: version, Outcome: settleVoid}, nil
	}
	if e.account != r.Account {
		b.mu.Unlock()
		return nil, status.Error(codes.InvalidArgument, fmt.Sprintf("cluster call %x is not of the account named", r.CallId))
	}
	switch e.state {
	case callRunning:
		e.settle = true
		out := uint32(settleVoid)
		if e.armed {
			out = settleRefunded // its runner gives it back when done
		}
		b.mu.Unlock()
		return &SettleReply{Version: version, Outcome: out}, nil
	case callRefunding:
		b.mu.Unlock()
		return nil, status.Error(codes.Unavailable, fmt.Sprintf("cluster call %x: its refund is under way", r.CallId))
	case callRefunded:
		b.mu.Unlock()
		return &SettleReply{Version: version, Outcome: settleRefunded}, nil
	case callVoid:
		b.mu.Unlock()
		return &SettleReply{Version: version, Outcome: settleVoid}, nil
	}
	// callDone
	if !e.charged {
		e.state = callVoid
		b.mu.Unlock()
		return &SettleReply{Version: version, Outcome: settleVoid}, nil
	}
	e.state = callRefunding
	ref := quota.Refund{Charge: e.ch, Result: e.res}
	b.mu.Unlock()
	err := s.cfg.Quota.Refund(ref)
	b.mu.Lock()
	if err != nil {
		e.state = callDone
	} else {
		e.state = callRefunded
	}
	b.mu.Unlock()
	if err != nil {
		return nil, status.Error(codes.Unavailable, fmt.Sprintf("cluster call %x: refund: %v", r.CallId, err))
	}
	return &SettleReply{Version: version, Outcome: settleRefunded}, nil
}

// refundLate gives back a charge whose caller settled the call while it
// was being charged, and answers that nothing was done.
func (s *Server) refundLate(id uint64, ch *quota.Charge, res *quota.ChargeResult) error {
	if err := s.cfg.Quota.Refund(quota.Refund{Charge: *ch, Result: *res}); err != nil {
		s.log.Warn("cluster: a call its caller settled while it was charged could not be refunded; it counts", "call", fmt.Sprintf("%x", id), "account", ch.Account, "err", err)
	}
	return errSettled(id)
}

// How long a caller settles an ambiguous call: settleWait before it
// answers (the 503 then says the truth), then in the background up to
// settleMax after the call was sent.
const (
	settleWait  = 2 * time.Second
	settleMax   = 10 * time.Second
	settlePause = 50 * time.Millisecond
)

// ambiguous reports whether a call that failed with err may have been
// acted on: it was sent, and the owner did not answer that it did nothing.
func ambiguous(err error) bool {
	if err == nil || notSent(err) {
		return false
	}
	switch status.Code(err) {
	case codes.FailedPrecondition, codes.InvalidArgument, codes.Aborted, codes.Unimplemented:
		return false
	}
	return true
}

// settle makes sure call id, sent to node at sent for account, does not
// count: it asks node to Settle it, for settleWait, then goes on in the
// background. Id 0: nothing to settle.
func (q *Quota) settle(p *peer, node, account string, id uint64, sent time.Time) {
	if id == 0 {
		return
	}
	q.settles.Add(1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		q.settleLoop(p, node, account, id, sent)
	}()
	t := time.NewTimer(settleWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-q.done:
	}
}

func (q *Quota) settleLoop(p *peer, node, account string, id uint64, sent time.Time) {
	req := &SettleRequest{Version: version, Account: account, CallId: id, SentUnixNano: sent.UnixNano()}
	end := sent.Add(settleMax)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), q.cfg.Timeout)
		rep, err := p.cli.Settle(ctx, req)
		cancel()
		switch {
		case err == nil && rep.GetOutcome() == settleUnknown:
			q.log.Warn("cluster: a call answered 503 may have counted: its node cannot say whether it charged it", "node", node, "account", account, "call", fmt.Sprintf("%x", id))
			return
		case err == nil:
			return
		case status.Code(err) == codes.Unimplemented || status.Code(err) == codes.InvalidArgument:
			q.log.Warn("cluster: a call answered 503 may have counted: its node cannot settle it", "node", node, "account", account, "call", fmt.Sprintf("%x", id), "err", err)
			return
		}
		if !time.Now().Add(settlePause).Before(end) {
			q.log.Warn("cluster: a call answered 503 may have counted: its node did not answer", "node", node, "account", account, "call", fmt.Sprintf("%x", id), "err", err)
			return
		}
		select {
		case <-q.done:
			return
		case <-time.After(settlePause):
		}
	}
}
