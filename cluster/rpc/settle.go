package rpc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/actors/events"
	"github.com/fraudd/fraudd/actors/quota"
)

// A charge sent to another member is ambiguous when the call breaks after
// it was sent (the caller's deadline passed, the connection broke): the
// owner may have charged it, and the caller, answering 503, says no quota
// was used (SPEC §7). A paused owner (SIGSTOP, a long GC pause) is the
// usual case: it charged a call, stopped before its answer left, and
// resumed after the caller gave up.
//
// So every charging call carries an id, and the node it goes to keeps a
// book of the calls it received for a while. A caller whose call was
// ambiguous answers 503 and asks that node, in the background, to Settle
// the call until it answers: the node gives back what it charged
// (quota.Client.Refund), or, when it has not charged the call yet, voids
// it, so that it is refused whenever it gets to it. Either way the call
// does not count. The same happens to an answer the caller discards (one
// under a claim older than the caller's view, which the stale owner
// charged) before the call goes to the newer owner.
//
// A node answers "unknown" when it cannot vouch: a call sent before the
// oldest calls it remembers (it restarted, or forgot them), or one whose
// charge or refund its quota actors did not answer in time (they may
// still carry it out). The caller logs such a call: it may count although
// answered 503. A refunded evaluation's device event use is given back
// where the event is stored, on this node or a third (Server.unuse); its
// history observation is not.

// Settle outcomes (SettleReply.outcome).
const (
	settleRefunded = 1
	settleVoid     = 2
	settleUnknown  = 3
)

// callKeep is how long, in the book's running time, a node remembers a
// call at least (at most twice that): longer than a caller goes on
// settling (settleMax).
const callKeep = 15 * time.Second

// maxStep is the most a gap between two uses of the book adds to its
// running time: a process that was paused (SIGSTOP) must not forget, on
// waking, the calls its callers are about to settle.
const maxStep = time.Second

// vouchMargin is how much later than the oldest call the book remembers a
// call must have been sent for the book to vouch that it never received
// it (the nodes' clocks differ a little; more than this and a node that
// restarted could take a call it charged before for one it never got).
const vouchMargin = time.Second

type callState uint8

const (
	callRunning   callState = iota // received; not charged yet, or charging
	callDone                       // answered: charged, or not (charged says)
	callRefunding                  // being given back
	callRefunded
	callVoid      // settled before it was charged: refused when it comes
	callUncertain // the quota did not say in time whether it charged or refunded it
)

// callEntry is what the book holds of one call: enough to refund it.
type callEntry struct {
	account string
	state   callState
	charged bool // the quota charged it (allowed, or refused with a limit hit)
	settle  bool // a Settle came while it ran: the runner gives it back
	armed   bool // the runner is past its last check and charges
	charge  chargeMemo
	// use is the device event use the call's evaluation recorded here,
	// given back with the charge (nil: none).
	use *eventUse
	// seq and refundSeq are the book's sequence when the call began and
	// when its refund was stored: share reads between may hold its charge
	// (discount.go).
	seq, refundSeq uint64
}

// chargeMemo is what a refund needs of a charge and its answer, and no
// more: the book holds one per charging call for half a minute or so.
type chargeMemo struct {
	now     int64 // the owner's stamp, Unix nanoseconds
	bucket  quota.Bucket
	kind    quota.Kind
	hourly  bool
	monthly bool
	total   bool
	allowed bool
	refusal quota.Refusal
	// hourEnds is when the hourly window the charge counted in ends, Unix
	// seconds (zero: no hourly cap set the answer's reset): a refund gives
	// back to that window only.
	hourEnds int64
}

func memoOf(c *quota.Charge, r *quota.ChargeResult) chargeMemo {
	return chargeMemo{now: c.Now.UnixNano(), bucket: c.Bucket, kind: c.Kind, hourly: c.Hourly, monthly: c.Monthly, total: c.Total, allowed: r.Allowed, refusal: r.Refusal,
		hourEnds: quota.HourEndsOf(c, r)}
}

// refund is the quota's Refund of the memo's charge of account.
func (m *chargeMemo) refund(account string) quota.Refund {
	return quota.Refund{
		Charge:   quota.Charge{Account: account, Bucket: m.bucket, Kind: m.kind, Hourly: m.hourly, Monthly: m.monthly, Total: m.total, Now: time.Unix(0, m.now).UTC()},
		Result:   quota.ChargeResult{Allowed: m.allowed, Refusal: m.refusal},
		HourEnds: m.hourEnds,
	}
}

// eventUse is one use of a device event a Resolve recorded at at.
type eventUse struct {
	id events.EventID
	at time.Time
}

// callBook is a node's memory of the charging calls other members sent
// it, by call id, in two generations that rotate every callKeep of
// running time.
type callBook struct {
	mu        sync.Mutex
	cur, prev map[uint64]*callEntry
	// horizon is the wall time from which every call received is in the
	// book: the start of the older generation (the book's own start at
	// first).
	horizon, curStart time.Time
	running, rotated  time.Duration
	last              time.Time
	// seq orders calls' beginnings and share reads; reads and prevReads
	// are the share reads of the two generations, by account
	// (discount.go).
	seq              uint64
	reads, prevReads map[string][]*shareRead
}

func newCallBook() *callBook {
	now := time.Now()
	return &callBook{cur: map[uint64]*callEntry{}, prev: map[uint64]*callEntry{}, horizon: now, curStart: now, last: now}
}

// tick advances the running time and rotates the generations. mu held.
func (b *callBook) tick() {
	now := time.Now()
	b.running += min(max(now.Sub(b.last), 0), maxStep)
	b.last = now
	if b.running-b.rotated >= callKeep {
		b.prev, b.cur = b.cur, map[uint64]*callEntry{}
		b.prevReads, b.reads = b.reads, nil
		b.horizon, b.curStart = b.curStart, now
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
// (the caller gave up on it: it must not be charged) or the id was seen
// before. Id 0 is a caller that does not settle.
func (b *callBook) begin(id uint64, account string) bool {
	if id == 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tick()
	if b.find(id) != nil {
		return false
	}
	b.seq++
	b.cur[id] = &callEntry{account: account, seq: b.seq}
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

// chargeOutcome says what the runner's quota did with a call.
type chargeOutcome uint8

const (
	notCharged chargeOutcome = iota // it failed and did nothing
	charged                         // allowed or refused: it counts
	uncertain                       // no answer in time: it may count
)

// outcomeOf reads the quota's error: a timeout means the shard may still
// carry the charge out (actors.Calls.Wait), any other error that nothing
// was done.
func outcomeOf(err error) chargeOutcome {
	switch {
	case err == nil:
		return charged
	case errors.Is(err, actors.ErrTimeout):
		return uncertain
	}
	return notCharged
}

// done records what the runner's quota did. True when a Settle came while
// it charged: the runner gives the charge back (refundLate) and answers
// that nothing was done.
func (b *callBook) done(id uint64, o chargeOutcome, ch *quota.Charge, res *quota.ChargeResult, use *eventUse) (refund bool) {
	if id == 0 {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.find(id)
	if e == nil {
		return false
	}
	switch o {
	case notCharged:
		e.state = callDone
		if e.settle {
			e.state = callVoid
		}
		return false
	case uncertain:
		e.state = callUncertain
		return false
	}
	e.charged = true
	e.charge, e.use = memoOf(ch, res), use
	if e.settle {
		e.state = callRefunding
		return true
	}
	e.state = callDone
	return false
}

// refunded records how a refund of a callRefunding entry went: given back,
// not (it may be tried again), or not known (the quota did not answer in
// time).
func (b *callBook) refunded(e *callEntry, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch outcomeOf(err) {
	case charged:
		e.state = callRefunded
		b.seq++
		e.refundSeq = b.seq
	case uncertain:
		// The quota's refund is most likely still queued and will be
		// made: the reads so far are discounted as for one made now (a
		// refund that never lands leaves them permissive by the call).
		e.state = callUncertain
		b.seq++
		e.refundSeq = b.seq
	default:
		e.state = callDone
	}
}

// unuse gives back the device event use of a refunded call, so that the
// evaluation tried again is not a replay: here, where the owner usually
// stored the event (collections store events at the account's owner), or,
// through EventUses, at the third node that stored it.
func (s *Server) unuse(e *callEntry) {
	if e.use == nil {
		return
	}
	switch {
	case s.cfg.EventUses != nil:
		s.cfg.EventUses.Unuse(e.use.id, e.account, e.use.at)
	case s.cfg.Events != nil:
		s.cfg.Events.Unuse(e.use.id, e.account, e.use.at)
	}
}

// errSettled answers a call its caller settled before it was charged.
func errSettled(id uint64) error {
	return status.Error(codes.Aborted, fmt.Sprintf("cluster call %x: settled by its caller before it was charged; nothing done", id))
}

// refundLate gives back a charge whose caller settled the call while it
// was being charged, and answers that nothing was done. Should the refund
// fail, the entry says so and the caller's next Settle tries again.
func (s *Server) refundLate(id uint64, ch *quota.Charge, res *quota.ChargeResult) error {
	err := s.cfg.Quota.Refund(quota.Refund{Charge: *ch, Result: *res})
	s.calls.mu.Lock()
	e := s.calls.find(id)
	s.calls.mu.Unlock()
	if e != nil {
		s.calls.refunded(e, err)
		switch outcomeOf(err) {
		case charged:
			s.unuse(e)
			s.discount(e)
		case uncertain:
			s.discount(e)
		}
	}
	if err != nil {
		s.log.Warn("cluster: a call its caller settled while it was charged is not given back yet", "call", fmt.Sprintf("%x", id), "account", ch.Account, "err", err)
	}
	return errSettled(id)
}

// Settle implements NodeServer.
func (s *Server) Settle(_ context.Context, r *SettleRequest) (*SettleReply, error) {
	if r.GetCallId() == 0 || r.GetAccount() == "" || len(r.GetAccount()) > maxObsAccountID {
		return nil, status.Error(codes.InvalidArgument, "cluster rpc: settle needs a call id and an account")
	}
	reply := func(out uint32) (*SettleReply, error) { return &SettleReply{Version: version, Outcome: out}, nil }
	b := s.calls
	b.mu.Lock()
	b.tick()
	e := b.find(r.CallId)
	if e == nil {
		// Never received, or forgotten: should it still come, it is
		// refused either way.
		b.cur[r.CallId] = &callEntry{account: r.Account, state: callVoid}
		vouch := !time.Unix(0, r.GetSentUnixNano()).Before(b.horizon.Add(vouchMargin))
		b.mu.Unlock()
		if !vouch {
			return reply(settleUnknown)
		}
		return reply(settleVoid)
	}
	if e.account != r.Account {
		b.mu.Unlock()
		return nil, status.Error(codes.InvalidArgument, fmt.Sprintf("cluster call %x is not of the account named", r.CallId))
	}
	switch e.state {
	case callRunning:
		e.settle = true
		armed := e.armed
		b.mu.Unlock()
		if !armed {
			return reply(settleVoid) // arm refuses it
		}
		// Its runner gives it back when its charge is done; the caller
		// asks again for the outcome.
		return nil, status.Error(codes.Unavailable, fmt.Sprintf("cluster call %x: being charged; it will be given back", r.CallId))
	case callRefunding:
		b.mu.Unlock()
		return nil, status.Error(codes.Unavailable, fmt.Sprintf("cluster call %x: its refund is under way", r.CallId))
	case callRefunded:
		b.mu.Unlock()
		return reply(settleRefunded)
	case callVoid:
		b.mu.Unlock()
		return reply(settleVoid)
	case callUncertain:
		b.mu.Unlock()
		return reply(settleUnknown)
	}
	// callDone
	if !e.charged {
		e.state = callVoid
		b.mu.Unlock()
		return reply(settleVoid)
	}
	e.state = callRefunding
	ref := e.charge.refund(e.account)
	b.mu.Unlock()
	err := s.cfg.Quota.Refund(ref)
	b.refunded(e, err)
	switch outcomeOf(err) {
	case charged:
		s.unuse(e)
		s.discount(e)
		return reply(settleRefunded)
	case uncertain:
		s.discount(e)
		return reply(settleUnknown)
	}
	return nil, status.Error(codes.Unavailable, fmt.Sprintf("cluster call %x: refund: %v", r.CallId, err))
}

// How long a caller goes on settling an ambiguous call after it was sent,
// and its pauses between attempts (doubling).
const (
	settleMax      = 10 * time.Second
	settlePause    = 50 * time.Millisecond
	settleMaxPause = time.Second
)

// ambiguous reports whether a call that failed with err may have been
// acted on: it was sent, and the node did not answer that it did nothing.
func ambiguous(err error) bool { return err != nil && !nothingDone(err) }

// nothingDone reports whether a call's status says the node did nothing:
// it was never sent (a dial error), or the node refused it before acting
// (an old build's Unimplemented, not the owner, a malformed request, or
// Aborted: too little of the deadline left, a charge its quota failed, no
// owner work here).
func nothingDone(err error) bool {
	switch status.Code(err) {
	case codes.FailedPrecondition, codes.InvalidArgument, codes.Aborted, codes.Unimplemented:
		return true
	}
	return notSent(err)
}

// answered records the runner's charge (err its quota's error, use the
// device event use its evaluation recorded) and returns the call's error
// status: nil when it stands; Aborted when it was settled meanwhile (and
// is given back now) or its quota did nothing; Unavailable when the quota
// may still make it.
func (s *Server) answered(id uint64, err error, c *quota.Charge, res *quota.ChargeResult, use *eventUse) error {
	o := outcomeOf(err)
	if s.calls.done(id, o, c, res, use) {
		return s.refundLate(id, c, res)
	}
	switch {
	case err == nil:
		return nil
	case o == notCharged:
		return status.Error(codes.Aborted, err.Error())
	}
	return status.Error(codes.Unavailable, err.Error())
}

// settle makes sure call id, sent to node at sent for account, does not
// count: in the background, it asks node to Settle it until node answers
// or settleMax after sent. The caller answers at once (a 503, or the call
// at another owner) rather than hold its worker. Id 0: nothing to settle.
func (q *Quota) settle(node, account string, id uint64, sent time.Time) {
	if id == 0 {
		return
	}
	// Under the lock, as a peer's workers start: Close must not be
	// waiting already.
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed.Load() {
		return
	}
	q.settles.Add(1)
	q.wg.Go(func() { q.settleLoop(node, account, id, sent) })
}

func (q *Quota) settleLoop(node, account string, id uint64, sent time.Time) {
	req := &SettleRequest{Version: version, Account: account, CallId: id, SentUnixNano: sent.UnixNano()}
	call := fmt.Sprintf("%x", id)
	end := sent.Add(settleMax)
	pause := settlePause
	closing := func() {
		q.log.Warn("cluster: a call may have counted although its caller gave up on it: this node stopped before its node answered", "node", node, "account", account, "call", call)
	}
	for {
		if q.closed.Load() {
			closing()
			return
		}
		// The member's connection as of now: it may have come back on
		// another address.
		p, err := q.peer(node)
		var rep *SettleReply
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), q.cfg.Timeout)
			rep, err = p.cli.Settle(ctx, req)
			cancel()
		}
		switch {
		case err == nil && rep.GetOutcome() == settleUnknown:
			q.log.Warn("cluster: a call may have counted although its caller gave up on it: its node cannot say whether it charged it", "node", node, "account", account, "call", call)
			return
		case err == nil:
			return
		case status.Code(err) == codes.Unimplemented || status.Code(err) == codes.InvalidArgument:
			q.log.Warn("cluster: a call may have counted although its caller gave up on it: its node cannot settle it", "node", node, "account", account, "call", call, "err", err)
			return
		}
		if !time.Now().Add(pause).Before(end) {
			q.log.Warn("cluster: a call may have counted although its caller gave up on it: its node did not answer", "node", node, "account", account, "call", call, "err", err)
			return
		}
		select {
		case <-q.done:
			closing()
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, settleMaxPause)
	}
}
