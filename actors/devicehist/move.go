package devicehist

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/storage"
)

// Moving history between nodes (cluster mode): Take removes the records of
// some customers from this node and returns them; Merge adds records another
// node took into this one's. Together they move a customer's history to the
// owner of its account shard without counting anything twice: a taken
// record is gone here (its delete stored and synced before Take returns)
// before it travels, and the owner adds it to what it holds (merge.go).
//
// A taken entry stays in memory, empty, until its delete is stored: an
// observation arriving meanwhile starts from nothing instead of reloading
// the stored copy that is about to go.

// takeWait bounds how long Take and Merge wait for the shards, as a
// time.Duration. Atomic, for the tests of what happens past it: a test
// sets it back while an earlier Take's late give-back still reads it.
var takeWait = func() *atomic.Int64 {
	var v atomic.Int64
	v.Store(int64(30 * time.Second))
	return &v
}()

// lateWait bounds how long the replies of shards that missed takeWait are
// still waited for (in the background) before they are given up on.
const lateWait = 10 * time.Minute

type (
	// takeReq asks a shard for the records refs names (read from the
	// store), or without a store for every resident record of the
	// customers match selects.
	takeReq struct {
		match func(customer string) bool
		refs  []storage.HistRef
		// reset selects the customers whose watchers hear Reset (the
		// customers taken, whether or not this shard held a record).
		reset func(customer string) bool
		now   int64
		reply chan takeReply
	}
	takeReply struct {
		recs []storage.HistRecord
		err  error
	}
	// mergeReq asks a shard to add recs into its own: all of them or,
	// when one cannot be read, none.
	mergeReq struct {
		recs  []storage.HistRecord
		now   int64
		part  int
		reply chan mergeReply
	}
	mergeReply struct {
		part int
		err  error
	}
)

// Take removes from this node, and returns, the history records of the
// customers match selects. Records with nothing left in the window are
// dropped, not returned. With a store, Take returns once their deletes are
// durable, so a crash afterwards does not bring back what another node
// merged; when that fails they are given back here and Take answers the
// error alone. A caller that cannot deliver them gives them back with
// Merge. Another error may come with the records taken before it: they are
// gone here either way.
func (c *Client) Take(match func(customer string) bool, now time.Time) ([]storage.HistRecord, error) {
	if c.stopped.Load() {
		return nil, ErrStopped
	}
	n := c.shards.Len()
	refs := make([][]storage.HistRef, n)
	if c.store != nil {
		// Everything changed so far is stored after the barrier, so the
		// store names every record to take, and the shards need not walk
		// their memory (a record created meanwhile goes with the next
		// call).
		if err := c.barrierAll(c.timeout); err != nil {
			return nil, fmt.Errorf("devicehist: take: %w", err)
		}
		err := c.store.HistOf(match, func(r storage.HistRef) bool {
			i := c.shards.Index(actors.HashString(r.Customer))
			refs[i] = append(refs[i], r)
			return true
		})
		if err != nil {
			return nil, fmt.Errorf("devicehist: take: %w", fmtUnavailable(err))
		}
	}
	replies := make(chan takeReply, n)
	sent := 0
	for i := range n {
		switch {
		case c.store == nil:
			c.shards.Send(uint64(i), &takeReq{match: match, reset: match, now: now.Unix(), reply: replies})
		case len(refs[i]) > 0 || c.watched.Load():
			// A shard with watchers hears of the take even when it holds
			// nothing to take: the customers are no longer this node's.
			c.shards.Send(uint64(i), &takeReq{refs: refs[i], reset: match, now: now.Unix(), reply: replies})
		default:
			continue
		}
		sent++
	}
	var out []storage.HistRecord
	var errs error
	// A shard that answers late has taken its records all the same, and
	// they would be lost: wait well past the call timeout before giving up.
	t := time.NewTimer(max(c.timeout, time.Duration(takeWait.Load())))
	defer t.Stop()
	for got := 0; got < sent; got++ {
		select {
		case r := <-replies:
			out = append(out, r.recs...)
			if r.err != nil && errs == nil {
				errs = r.err
			}
		case <-t.C:
			// Nothing is handed out: the late shards take theirs when
			// they get to it, and what they and the others took goes
			// back into this node's history (their deletes may not be
			// durable either), for the next move to take again.
			go c.giveBackLate(replies, sent-got, now)
			if len(out) > 0 {
				if err := c.Merge(out, now); err != nil {
					c.log.Error("devicehist: records taken for a move that timed out could not be given back; they are lost", "records", len(out), "err", err)
				}
			}
			return nil, fmt.Errorf("devicehist: take: %w", actors.ErrTimeout)
		}
	}
	if len(out) > 0 && c.store != nil {
		// The records are about to count at another node: their deletes
		// must be durable first, or a crash of this node within the
		// store's sync interval would bring them back and they would be
		// sent (and counted) again. One sync per call that took
		// something; moves are rare.
		if err := c.durable(); err != nil {
			if berr := c.Merge(out, now); berr != nil {
				// Neither durable nor given back: hand them out all the
				// same (a possible double count rather than a loss).
				return out, fmt.Errorf("devicehist: take: %w", errors.Join(err, berr))
			}
			return nil, fmt.Errorf("devicehist: take: %w", err)
		}
	}
	if errs != nil {
		return out, fmt.Errorf("devicehist: take: %w", errs)
	}
	return out, nil
}

// giveBackLate waits (lateWait at most) for the n shards of a Take that
// did not answer in time, and merges back what they took.
func (c *Client) giveBackLate(replies <-chan takeReply, n int, now time.Time) {
	t := time.NewTimer(lateWait)
	defer t.Stop()
	var late []storage.HistRecord
collect:
	for range n {
		select {
		case r := <-replies:
			late = append(late, r.recs...)
		case <-t.C:
			c.log.Error("devicehist: shards of a timed-out move never answered; what they took is lost", "shards", n)
			break collect
		}
	}
	if len(late) == 0 {
		return
	}
	if err := c.Merge(late, now); err != nil {
		c.log.Error("devicehist: records a late shard took for a timed-out move could not be given back; they are lost", "records", len(late), "err", err)
	}
}

// durable returns once every write the shards handed to the committer so
// far (a take's deletes) is stored and synced.
func (c *Client) durable() error {
	if err := c.barrierAll(max(c.timeout, time.Duration(takeWait.Load()))); err != nil {
		return err
	}
	if err := c.store.Sync(); err != nil {
		return fmtUnavailable(err)
	}
	return nil
}

// Merge adds records taken on another node (or given back after a failed
// delivery) into this node's history, as of now.
func (c *Client) Merge(recs []storage.HistRecord, now time.Time) error {
	_, err := c.MergeParts(recs, now)
	return err
}

// MergeParts is Merge that says which records merged when not all did:
// merged[i] tells whether recs[i] is in this node's history now (nil with
// an error that merged nothing: an invalid record, a stopped client). The
// records of one shard merge together or not at all, so a batch that
// failed in part can be sent again with only the rest. A shard that does
// not answer within the wait counts as merged: the merge is in its queue
// and runs when it gets there.
func (c *Client) MergeParts(recs []storage.HistRecord, now time.Time) (merged []bool, err error) {
	if c.stopped.Load() {
		return nil, ErrStopped
	}
	n := c.shards.Len()
	parts := make([][]storage.HistRecord, n)
	of := make([]int, len(recs)) // the shard of each record
	for k, r := range recs {
		cust := storage.HistCustomerOf(r)
		if cust == "" || len(cust) > storage.MaxHistCustomer {
			return nil, fmt.Errorf("devicehist: merge: %w", ErrInvalid)
		}
		i := c.shards.Index(actors.HashString(cust))
		parts[i] = append(parts[i], r)
		of[k] = i
	}
	replies := make(chan mergeReply, n)
	sent := 0
	for i, p := range parts {
		if len(p) > 0 {
			c.shards.Send(uint64(i), &mergeReq{recs: p, now: now.Unix(), part: i, reply: replies})
			sent++
		}
	}
	failed := make([]bool, n)
	// A shard that answers late has merged its records all the same, and a
	// caller that took the error for "not merged" would give them back or
	// have them sent again (counted twice): wait well past the call timeout.
	t := time.NewTimer(max(c.timeout, time.Duration(takeWait.Load())))
	defer t.Stop()
	var first error
wait:
	for got := 0; got < sent; got++ {
		select {
		case r := <-replies:
			if r.err != nil {
				failed[r.part] = true
				first = firstErr(first, r.err)
			}
		case <-t.C:
			first = firstErr(first, actors.ErrTimeout)
			// Counted as merged (see above); should the merge fail when
			// the shard gets to it, its records are lost: said in the log.
			go c.watchLateMerges(replies, sent-got, parts)
			break wait
		}
	}
	merged = make([]bool, len(recs))
	for k := range recs {
		merged[k] = !failed[of[k]]
	}
	if first != nil {
		return merged, fmt.Errorf("devicehist: merge: %w", first)
	}
	return merged, nil
}

// watchLateMerges waits (lateWait at most) for the n merges of MergeParts
// that did not answer in time, which it counted as merged, and logs those
// that failed: their records are in no node's history.
func (c *Client) watchLateMerges(replies <-chan mergeReply, n int, parts [][]storage.HistRecord) {
	t := time.NewTimer(lateWait)
	defer t.Stop()
	for range n {
		select {
		case r := <-replies:
			if r.err != nil {
				c.log.Error("devicehist: a merge counted as done (its shard answered late) failed; its records are lost", "records", len(parts[r.part]), "err", r.err)
			}
		case <-t.C:
			c.log.Error("devicehist: shards of a merge counted as done never answered", "shards", n)
			return
		}
	}
}

// take runs takeReq on the shard's goroutine.
func (s shard) take(m *takeReq) {
	if s.commit != nil && s.commit.Closed() {
		// Stop closed the committer while this shard was stuck in a
		// handler: the deletes could not be stored, so nothing is taken.
		s.outlived()
		m.reply <- takeReply{err: ErrStopped}
		return
	}
	var (
		out  []storage.HistRecord
		w    *storage.HistWrite
		ferr error
	)
	// put hands back what an entry held (trimmed; nothing when it held
	// nothing in the window), writes the delete of its stored copy, and
	// leaves it empty, clean and resident until that write is stored.
	put := func(rec storage.HistRecord, keep bool, st *storage.HistStored, dirty *bool, wseq *uint64) {
		*dirty = false // a flush must not write it back
		// What the store holds after a failed write (see where); when it
		// cannot be read, the delete goes by what memory says.
		if s.commit != nil {
			s.where(rec, st, *wseq)
		}
		if st.OK && s.commit != nil {
			if w == nil {
				w = writePool.Get().(*storage.HistWrite)
				w.Reset()
				s.seq++
			}
			w.Delete(rec, *st)
			*wseq = s.seq
		}
		*st = storage.HistStored{}
		if keep {
			out = append(out, rec)
		}
	}
	takeDevice := func(e *deviceEntry) {
		rec := e.rec
		e.rec = storage.HistCustomerDevice{Customer: rec.Customer, Device: rec.Device}
		put(&rec, trimDevice(&rec, m.now), &e.stored, &e.dirty, &e.wseq)
	}
	takeAccount := func(e *accountEntry) {
		rec := e.rec
		e.rec = storage.HistAccount{Customer: rec.Customer, Hash: rec.Hash}
		put(&rec, trimAccount(&rec, m.now), &e.stored, &e.dirty, &e.wseq)
	}
	takeAddress := func(e *addressEntry) {
		rec := e.rec
		e.rec = storage.HistAddress{Customer: rec.Customer, Addr: rec.Addr}
		put(&rec, trimAddress(&rec, m.now), &e.stored, &e.dirty, &e.wseq)
	}
	if m.match != nil {
		eachMatching(s.devices, func(k deviceKey) string { return k.customer }, m.match, takeDevice)
		eachMatching(s.accounts, func(k accountKey) string { return k.customer }, m.match, takeAccount)
		eachMatching(s.addresses, func(k addressKey) string { return k.customer }, m.match, takeAddress)
	}
	// The store's records, loaded unless resident (a resident entry is the
	// current copy; a taken one is empty, and so is one gone meanwhile:
	// they yield nothing).
	for i := range m.refs {
		ref := &m.refs[i]
		var err error
		switch ref.Kind {
		case storage.HistKindCustomerDevice:
			err = takeWith(s.device(ref.Customer, ref.Device, false))(takeDevice)
		case storage.HistKindAccount:
			err = takeWith(s.account(ref.Customer, ref.Hash, false))(takeAccount)
		case storage.HistKindAddress:
			err = takeWith(s.addressEntry(ref.Customer, ref.Addr, false))(takeAddress)
		}
		ferr = firstErr(ferr, err)
	}
	if w != nil && !s.add(pending{w: w, st: s.shardState, seq: s.seq}) {
		// Close came while this take ran: its deletes will not be stored,
		// so the records stay in the store and must not travel (the node
		// merging them would count them twice). The entries emptied here
		// stay empty in this shard's memory, which Stop has given up on;
		// the store keeps them whole for the next start.
		m.reply <- takeReply{err: ErrStopped}
		return
	}
	if len(s.watchers) > 0 {
		s.resetWatchers(m.reset)
	}
	m.reply <- takeReply{recs: out, err: ferr}
}

// takeWith passes a looked-up entry to take unless the lookup failed.
func takeWith[R any](e *entry[R], err error) func(take func(*entry[R])) error {
	return func(take func(*entry[R])) error {
		if err == nil {
			take(e)
		}
		return err
	}
}

// eachMatching calls take with every entry of t whose customer match selects.
func eachMatching[K comparable, R any](t *actors.Table[K, *entry[R]], customer func(K) string, match func(string) bool, take func(*entry[R])) {
	t.Range(func(k K, e *entry[R]) bool {
		if match(customer(k)) {
			take(e)
		}
		return true
	})
}

// merge runs mergeReq on the shard's goroutine: it reads every record
// first and merges only when all of them could be read, so a part merges
// whole or not at all.
func (s shard) merge(m *mergeReq) {
	devices := make([]*deviceEntry, len(m.recs))
	accounts := make([]*accountEntry, len(m.recs))
	addresses := make([]*addressEntry, len(m.recs))
	for i, r := range m.recs {
		var err error
		switch r := r.(type) {
		case *storage.HistCustomerDevice:
			devices[i], err = s.device(r.Customer, r.Device, true)
		case *storage.HistAccount:
			accounts[i], err = s.account(r.Customer, r.Hash, true)
		case *storage.HistAddress:
			addresses[i], err = s.addressEntry(r.Customer, r.Addr, true)
		}
		if err != nil {
			m.reply <- mergeReply{part: m.part, err: err}
			return
		}
	}
	for i, r := range m.recs {
		switch r := r.(type) {
		case *storage.HistCustomerDevice:
			e := devices[i]
			trimDevice(&e.rec, m.now)
			mergeDevice(&e.rec, r)
			e.touched = m.now
			s.mark(e, nil, nil)
		case *storage.HistAccount:
			e := accounts[i]
			trimAccount(&e.rec, m.now)
			mergeAccount(&e.rec, r)
			e.touched = m.now
			s.mark(nil, e, nil)
		case *storage.HistAddress:
			e := addresses[i]
			trimAddress(&e.rec, m.now)
			mergeAddress(&e.rec, r)
			e.touched = m.now
			s.mark(nil, nil, e)
		}
	}
	if len(s.watchers) > 0 {
		s.pushMerged(m.recs, devices, accounts, addresses)
	}
	m.reply <- mergeReply{part: m.part}
}

func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
