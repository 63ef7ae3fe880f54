package events

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/storage"
)

// Entries carry their write-behind state: dirty while changed since the
// shard's last flush, and wseq, the shard's write that last carried them.
// An entry is evicted only when it is clean and that write is stored, so a
// reload never reads an older copy.
type eventEntry struct {
	e       storage.DeviceEvent
	touched time.Time
	dirty   bool
	wseq    uint64
	// firstGone: the first use was given back while later uses stood, so
	// the last of those may take the count to zero (memory only: a reloaded
	// entry cannot tell, and keeps its standing use).
	firstGone bool
}

type sightingsEntry struct {
	h       storage.Sightings
	touched time.Time
	dirty   bool
	wseq    uint64
}

// write is one shard's flush on its way to the store: copies, so the shard
// may go on changing its entries. Pooled.
type write struct {
	events []storage.DeviceEvent
	sights []storage.Sightings
	st     *shardState
	seq    uint64
	ack    flushReq // answered once stored; nil when nobody waits
}

var writePool = sync.Pool{New: func() any { return new(write) }}

// flushReq asks a shard to hand what changed since its last flush to the
// committer (Shards.FlushPending sends it).
type flushReq = actors.FlushReq

// shardState outlives the actor value. With a store, a restart after a panic
// stores what changed and then drops the entries (see New); without one it
// keeps them, as the only copy.
type shardState struct {
	events    *actors.Table[EventID, *eventEntry]
	sightings *actors.Table[string, *sightingsEntry]
	store     Store
	commit    *actors.GroupCommitter[*write]
	idleAfter time.Duration
	log       *slog.Logger
	// maxEvents and maxSights bound the entries held (Config.MaxEvents,
	// MaxSightings), per shard.
	maxEvents, maxSights actors.Bound

	// Changed since the last flush (shard goroutine only).
	dirtyEvents []*eventEntry
	dirtySights []*sightingsEntry
	// pending is set when the first entry turns dirty after a flush, so the
	// flush hook messages only shards with something to write.
	pending atomic.Bool
	seq     uint64 // writes handed to the committer (shard goroutine only)
	// marks: how far those writes went; entries last carried by a write
	// that did not reach the store are not evicted.
	marks actors.WriteMarks
	// stoppedLogged: the shard said once that it outlived Stop (refused).
	stoppedLogged bool
	// retried is the last failed write whose entries were marked to be
	// written again (retryFailed).
	retried uint64
}

type shard struct{ *shardState }

func (s shard) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *resolveCall:
		res, err := s.resolve(&m.Req)
		m.Reply(res, err)
	case ResolveStep:
		r := m.ResolveReq()
		if g, ok := m.(GivenUp); ok && !r.Peek && g.GivenUp() {
			peek := *r
			peek.Peek = true
			r = &peek
		}
		m.Resolved(s.resolve(r))
	case *record:
		s.record(m.e)
	case *unuse:
		s.unuse(m)
	case flushReq:
		s.flush(m)
	case actors.Tick:
		if s.store == nil {
			return // memory only: an evicted entry would be lost
		}
		in := s.marks.InStore()
		s.events.Sweep(func(_ EventID, e *eventEntry) bool {
			return in(e.dirty, e.wseq) && m.Now.Sub(e.touched) > s.idleAfter
		})
		s.sightings.Sweep(func(_ string, h *sightingsEntry) bool {
			return in(h.dirty, h.wseq) && m.Now.Sub(h.touched) > s.idleAfter
		})
		s.maxEvents.Reset(s.events.Len())
		s.maxSights.Reset(s.sightings.Len())
	case lenProbe:
		m <- [2]int{s.events.Len(), s.sightings.Len()}
	}
}

// dropStored forgets every entry the store holds as it is (WriteMarks.InStore); the
// others, changed or last carried by a failed write, are the only copy.
func (s *shardState) dropStored() {
	in := s.marks.InStore()
	s.events.Sweep(func(_ EventID, e *eventEntry) bool { return in(e.dirty, e.wseq) })
	s.sightings.Sweep(func(_ string, h *sightingsEntry) bool { return in(h.dirty, h.wseq) })
}

func (s shard) record(e *storage.DeviceEvent) {
	ent := &eventEntry{e: *e, touched: e.Created}
	s.events.Put(e.ID, ent)
	s.markEvent(ent)
	s.trimEvents()
	if e.VisitorID == "" {
		return
	}
	he, err := s.sightingsOf(e.VisitorID, e.Created)
	if err != nil {
		// Without the stored sightings fresh ones would overwrite them: skip.
		s.log.Warn("device: sightings not updated", "err", err)
		return
	}
	h := &he.h
	if h.FirstSeen.IsZero() {
		h.FirstSeen = e.Created
	}
	if e.Created.After(h.LastSeen) {
		h.LastSeen = e.Created
	}
	h.TimesSeen++
	s.markSightings(he)
}

// entry returns the event's entry, loading it on first touch; nil when
// there is no such event.
func (s shard) entry(id EventID) (*eventEntry, error) {
	ent, ok := s.events.Get(id)
	if !ok && s.store != nil {
		e, err := s.store.GetEvent(id)
		switch {
		case errors.Is(err, storage.ErrNotFound):
		case err != nil:
			return nil, err
		default:
			s.trimEvents()
			ent = &eventEntry{e: *e}
			s.events.Put(id, ent)
		}
	}
	return ent, nil
}

func (s shard) resolve(r *Resolve) (Resolved, error) {
	ent, err := s.entry(r.ID)
	if err != nil {
		return Resolved{}, err
	}
	if ent == nil || ent.e.Account != r.Account || storage.EventExpired(ent.e.Created, r.Now) {
		// An event past its 30 days is gone, whether or not this shard
		// still holds it or the daily prune has run: a use would also
		// write it back to the store.
		return Resolved{}, nil
	}
	ent.touched = r.Now
	res := Resolved{Found: true, Event: ent.e, Replayed: ent.e.Uses > 0}
	// A peek reads the sightings too: they are the device's, not the
	// use's (SPEC 2.2 times_seen and first_seen are "not scoped to the
	// key"), and a peek answers the personal test key's evaluation, which
	// shows them, and a cluster owner's push to its mirrors, which later
	// answer from it.
	if v := ent.e.VisitorID; v != "" {
		if he, err := s.sightingsOf(v, r.Now); err == nil {
			res.Sightings = he.h
		} else {
			s.log.Warn("device: sightings not read", "err", err)
		}
	}
	if r.Peek {
		return res, nil
	}
	ent.e.Uses++
	if ent.e.FirstUse.IsZero() {
		// Only the first use changes what a resolve reads back (Replayed):
		// it is written. Later uses are counted here and stored with the
		// event's next write, if any; a replay costs no write.
		ent.e.FirstUse = r.Now
		s.markEvent(ent)
	}
	return res, nil
}

// unuse takes back one use; when none stands, the event reads as never
// used again, and that is written as the first use was. Only the first
// use's own refund, or the last refund after it, takes the count to zero:
// a stored count can be below the uses made (replays are counted in memory
// only), so after a reload the last use counted may be one that still
// stands, and another's refund must not make the event read as unused.
func (s shard) unuse(m *unuse) {
	ent, err := s.entry(m.id)
	if err != nil {
		s.log.Warn("device: a use not given back", "err", err)
		return
	}
	if ent == nil || ent.e.Account != m.account || ent.e.Uses == 0 || storage.EventExpired(ent.e.Created, m.at) {
		return
	}
	first := ent.e.FirstUse.Equal(m.at)
	if ent.e.Uses == 1 && !first && !ent.firstGone {
		return
	}
	if first && ent.e.Uses > 1 {
		ent.firstGone = true
	}
	ent.e.Uses--
	if ent.e.Uses == 0 {
		ent.e.FirstUse, ent.firstGone = time.Time{}, false
		s.markEvent(ent)
	}
}

// sightingsOf returns the visitor's entry, loading it on first touch.
func (s shard) sightingsOf(visitor string, now time.Time) (*sightingsEntry, error) {
	if he, ok := s.sightings.Get(visitor); ok {
		he.touched = now
		if storage.SightingsLapsed(he.h.LastSeen, now) {
			// Pruned from the store (or due to be): the device starts a
			// new record, as it would after a reload.
			he.h = storage.Sightings{Visitor: visitor}
		}
		return he, nil
	}
	he := &sightingsEntry{h: storage.Sightings{Visitor: visitor}, touched: now}
	if s.store != nil {
		h, ok, err := s.store.LoadSightings(visitor, now)
		if err != nil {
			return nil, err
		}
		if ok {
			he.h = h
		}
	}
	s.trimSightings()
	s.sightings.Put(visitor, he)
	return he, nil
}

// trimEvents and trimSightings make room when a table holds its bound: the
// entries the store holds as they are go, least recently touched first,
// down to three quarters of the bound, as they would once idle (a later
// touch reloads them). A changed entry, or one whose write failed, is the
// only copy and stays.
func (s shard) trimEvents() {
	in := s.marks.InStore()
	actors.TrimOver(s.events, &s.maxEvents, func(e *eventEntry) (int64, bool) { return e.touched.UnixNano(), in(e.dirty, e.wseq) })
}

func (s shard) trimSightings() {
	in := s.marks.InStore()
	actors.TrimOver(s.sightings, &s.maxSights, func(h *sightingsEntry) (int64, bool) { return h.touched.UnixNano(), in(h.dirty, h.wseq) })
}

// markEvent and markSightings note a change for the next flush: however often
// an entry changes within an interval, it is written once.
func (s shard) markEvent(e *eventEntry) {
	if s.commit == nil || e.dirty {
		return
	}
	s.notePending()
	e.dirty = true
	s.dirtyEvents = append(s.dirtyEvents, e)
}

func (s shard) markSightings(h *sightingsEntry) {
	if s.commit == nil || h.dirty {
		return
	}
	s.notePending()
	h.dirty = true
	s.dirtySights = append(s.dirtySights, h)
}

func (s shard) notePending() {
	if len(s.dirtyEvents) == 0 && len(s.dirtySights) == 0 {
		s.pending.Store(true)
	}
}

// flush hands every entry changed since the last flush to the committer as
// one write; ack (when not nil) hears once it is stored. It runs on the
// shard's goroutine, or on Stop's once the shard has stopped.
func (s shard) flush(ack flushReq) {
	s.pending.Store(false)
	s.retryFailed()
	if s.commit == nil || len(s.dirtyEvents) == 0 && len(s.dirtySights) == 0 {
		if ack != nil {
			ack <- struct{}{}
		}
		return
	}
	s.seq++
	w := writePool.Get().(*write)
	for _, e := range s.dirtyEvents {
		e.dirty, e.wseq = false, s.seq
		w.events = append(w.events, e.e)
	}
	for _, h := range s.dirtySights {
		h.dirty, h.wseq = false, s.seq
		w.sights = append(w.sights, h.h)
	}
	clear(s.dirtyEvents)
	clear(s.dirtySights)
	s.dirtyEvents, s.dirtySights = s.dirtyEvents[:0], s.dirtySights[:0]
	w.st, w.seq, w.ack = s.shardState, s.seq, ack
	if !s.commit.Add(w) {
		s.refused(w)
	}
}

// retryFailed marks to be written again the entries last carried by the
// writes up to the last that failed, since it last ran: the store may hold
// an older copy of them (or none), and nothing else would write them again
// until they change, so a graceful stop after the store recovered lost
// them, and they stayed in memory for good (WriteMarks: not in the store).
// Some of those writes may have been stored: writing an entry again is
// harmless. Failures are rare; it walks the shard's entries once for each.
func (s shard) retryFailed() {
	f := s.marks.Failed()
	if s.commit == nil || f <= s.retried {
		return
	}
	from := s.retried
	s.retried = f
	s.events.Range(func(_ EventID, e *eventEntry) bool {
		if !e.dirty && e.wseq > from && e.wseq <= f {
			s.markEvent(e)
		}
		return true
	})
	s.sightings.Range(func(_ string, h *sightingsEntry) bool {
		if !h.dirty && h.wseq > from && h.wseq <= f {
			s.markSightings(h)
		}
		return true
	})
}

// refused settles a write the committer refused because Stop closed it
// while this shard was stuck in a handler (its stop timed out): nothing
// can be stored any more. As after a failed write, its entries stay in
// memory, the only copy, and are not evicted; the resolves still in the
// mailbox are answered from there, with what a crash would lose (package
// doc: Durability) lost to the store. Logged once per shard.
func (s shard) refused(w *write) {
	if !s.stoppedLogged {
		s.stoppedLogged = true
		s.log.Error("device: a shard outlived Stop; the events and sightings it changed since cannot be stored", "seq", w.seq)
	}
	s.marks.Settle(w.seq, true)
	if w.ack != nil {
		w.ack <- struct{}{}
	}
	putWrite(w)
}

// newCommitter stores the shards' flushes; the flushes of one interval
// usually arrive together and go out as one batch. Nobody waits but the
// flush hook: a failure is logged (the store then reports itself
// unavailable) and the entries stay in memory, so the running process keeps
// serving them.
func newCommitter(store Store, cfg actors.GroupConfig, log *slog.Logger) *actors.GroupCommitter[*write] {
	var dw storage.DeviceWrite
	apply := func(ws []*write) error {
		dw.Events, dw.Sightings = dw.Events[:0], dw.Sightings[:0]
		for _, w := range ws {
			for i := range w.events {
				dw.Events = append(dw.Events, &w.events[i])
			}
			for i := range w.sights {
				dw.Sightings = append(dw.Sightings, &w.sights[i])
			}
		}
		err := store.WriteDevice(dw)
		clear(dw.Events)
		clear(dw.Sightings)
		return err
	}
	done := func(ws []*write, err error) {
		if err != nil {
			log.Error("device: events not stored", "writes", len(ws), "err", err)
		}
		for _, w := range ws {
			w.st.marks.Settle(w.seq, err != nil)
			if w.ack != nil {
				w.ack <- struct{}{}
			}
			putWrite(w)
		}
	}
	return actors.NewGroupCommitter(cfg, apply, done)
}

// putWrite returns a settled write to the pool.
func putWrite(w *write) {
	clear(w.events)
	clear(w.sights)
	w.events, w.sights, w.st, w.ack = w.events[:0], w.sights[:0], nil, nil
	writePool.Put(w)
}
