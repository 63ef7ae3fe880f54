package events

import (
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/storage"
)

type eventEntry struct {
	e        storage.DeviceEvent
	touched  time.Time
	inflight atomic.Int32
}

type sightingsEntry struct {
	h        storage.Sightings
	touched  time.Time
	inflight atomic.Int32
}

// write is one record on its way to the store: copies, so the shard may go
// on changing its entries.
type write struct {
	event *storage.DeviceEvent
	sight *storage.Sightings
	ev    *eventEntry
	he    *sightingsEntry
}

// shardState outlives the actor value, so a restart after a panic keeps the
// entries (protoactor's supervisor recreates the actor from its producer).
type shardState struct {
	events    *actors.Table[EventID, *eventEntry]
	sightings *actors.Table[string, *sightingsEntry]
	store     Store
	commit    *actors.GroupCommitter[write]
	idleAfter time.Duration
	log       *slog.Logger
}

type shard struct{ *shardState }

func (s shard) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *resolveCall:
		res, err := s.resolve(&m.Req)
		m.Reply(res, err)
	case *record:
		s.record(m.e)
	case actors.Tick:
		if s.store == nil {
			return // memory only: an evicted entry would be lost
		}
		s.events.Sweep(func(_ EventID, e *eventEntry) bool {
			return e.inflight.Load() == 0 && m.Now.Sub(e.touched) > s.idleAfter
		})
		s.sightings.Sweep(func(_ string, h *sightingsEntry) bool {
			return h.inflight.Load() == 0 && m.Now.Sub(h.touched) > s.idleAfter
		})
	case lenProbe:
		m <- [2]int{s.events.Len(), s.sightings.Len()}
	}
}

func (s shard) record(e *storage.DeviceEvent) {
	ent := &eventEntry{e: *e, touched: e.Created}
	s.events.Put(e.ID, ent)
	w := write{ev: ent}
	ev := ent.e
	w.event = &ev
	if e.VisitorID != "" {
		if he, err := s.sightingsOf(e.VisitorID, e.Created); err != nil {
			// Without the stored sightings fresh ones would overwrite them: skip.
			s.log.Warn("device: sightings not updated", "err", err)
		} else {
			h := &he.h
			if h.FirstSeen.IsZero() {
				h.FirstSeen = e.Created
			}
			if e.Created.After(h.LastSeen) {
				h.LastSeen = e.Created
			}
			h.TimesSeen++
			hc := *h
			w.sight, w.he = &hc, he
		}
	}
	s.persist(w)
}

func (s shard) resolve(r *Resolve) (Resolved, error) {
	ent, ok := s.events.Get(r.ID)
	if !ok && s.store != nil {
		e, err := s.store.GetEvent(r.ID)
		switch {
		case errors.Is(err, storage.ErrNotFound):
		case err != nil:
			return Resolved{}, err
		default:
			ent = &eventEntry{e: *e}
			s.events.Put(r.ID, ent)
		}
	}
	if ent == nil || ent.e.Account != r.Account {
		return Resolved{}, nil
	}
	ent.touched = r.Now
	res := Resolved{Found: true, Event: ent.e, Replayed: ent.e.Uses > 0}
	ent.e.Uses++
	if ent.e.FirstUse.IsZero() {
		ent.e.FirstUse = r.Now
	}
	ev := ent.e
	s.persist(write{event: &ev, ev: ent})
	if v := ent.e.VisitorID; v != "" {
		if he, err := s.sightingsOf(v, r.Now); err == nil {
			res.Sightings = he.h
		} else {
			s.log.Warn("device: sightings not read", "err", err)
		}
	}
	return res, nil
}

// sightingsOf returns the visitor's entry, loading it on first touch.
func (s shard) sightingsOf(visitor string, now time.Time) (*sightingsEntry, error) {
	if he, ok := s.sightings.Get(visitor); ok {
		he.touched = now
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
	s.sightings.Put(visitor, he)
	return he, nil
}

func (s shard) persist(w write) {
	if s.commit == nil {
		return
	}
	if w.ev != nil {
		w.ev.inflight.Add(1)
	}
	if w.he != nil {
		w.he.inflight.Add(1)
	}
	s.commit.Add(w)
}

// newCommitter stores every queued write as one synced batch. Nobody waits:
// a failure is logged (the store then reports itself unavailable) and the
// entries stay in memory, so the running process keeps serving them.
func newCommitter(_ *actor.RootContext, store Store, cfg actors.GroupConfig, log *slog.Logger) *actors.GroupCommitter[write] {
	var dw storage.DeviceWrite
	apply := func(ws []write) error {
		dw.Events, dw.Sightings = dw.Events[:0], dw.Sightings[:0]
		for _, w := range ws {
			if w.event != nil {
				dw.Events = append(dw.Events, w.event)
			}
			if w.sight != nil {
				dw.Sightings = append(dw.Sightings, w.sight)
			}
		}
		err := store.WriteDevice(dw)
		clear(dw.Events)
		clear(dw.Sightings)
		return err
	}
	done := func(ws []write, err error) {
		if err != nil {
			log.Error("device: events not stored", "writes", len(ws), "err", err)
		}
		for _, w := range ws {
			if w.ev != nil {
				w.ev.inflight.Add(-1)
			}
			if w.he != nil {
				w.he.inflight.Add(-1)
			}
		}
	}
	return actors.NewGroupCommitter(cfg, apply, done)
}
