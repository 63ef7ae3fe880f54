// Package recent keeps each account's most recent evaluations for the
// operator console (GET /admin/v1/accounts/{id}/evaluations): a ring of at
// most Size entries per account, none older than Retention, in Pebble.
//
// # The evaluate path
//
// Record is the only call on the evaluate path and its budget is 0.5 µs. It
// copies one fixed-size Entry — bit sets, a netip.Addr, the account view's
// and the policy's immutable strings, nothing that points into the request —
// into a pending buffer under a mutex: no allocation, no actor hop. A
// protoactor Send per evaluation would cost more than the whole budget
// (0.6–1.3 µs measured here), so a flusher hands the pending buffer to the
// owner actor once per FlushEvery (250 ms), or as soon as FlushAt entries
// wait, one Send per batch. The owner writes only each account's Size newest
// entries of a batch, so the longer the batch, the fewer of a busy account's
// entries ever reach Pebble: at 15,000 evaluations a second the 20 ms batch
// this replaced wrote 0.8 keys per evaluation into the memtable (a tenth of
// a live evaluation's CPU went to memtable inserts), the 2,048-entry batch
// writes 0.1. A List hands over what is pending first, so the console never
// misses an entry recorded before it asked. When more than MaxPending
// entries wait, the newest are dropped and counted: this is a view, and
// evaluate never waits for it.
//
// # The owner
//
// One actor owns every account's ring: the refs (time, sequence) of its
// stored entries, oldest first, loaded from the store on an account's first
// entry. It formats a batch into records and commits the new entries (not
// those that Size newer ones of the same batch push out at once) and, once
// Size entries have fallen out of a ring, one range delete of them, as one
// write-behind batch (storage syncs it within its SyncInterval, like the device
// stores), so a crash loses at most the last moments of the list. A ring
// found over Size on load is trimmed with one range delete. Rings idle for
// IdleAfter leave memory. Entries older than Retention are never listed and
// are deleted once per day of the service clock (one range delete per
// account).
package recent

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/intel/score"
	"github.com/fraudd/fraudd/internal/clock"
	"github.com/fraudd/fraudd/storage"
)

// Ring bounds (issue 16): 200 entries, 7 days.
const (
	Size      = 200
	Retention = 7 * 24 * time.Hour
)

// RequestIDMax is the longest request id an entry keeps.
const RequestIDMax = 32

// ErrStopped is returned by List after Stop.
var ErrStopped = errors.New("recent: stopped")

// ErrUnavailable wraps a store that cannot be read.
var ErrUnavailable = storage.ErrUnavailable

// Evaluation is one listed entry, as stored.
type Evaluation = storage.Evaluation

// Entry is one evaluation as the evaluate path hands it over. It is copied
// by value; its strings must be immutable ones (the account view's id, the
// policy's pin fields), never views of a request buffer.
type Entry struct {
	Account string
	At      time.Time
	// RequestID is the answer's X-Request-Id, zero-padded.
	RequestID [RequestIDMax]byte
	// IP is the visitor's address; invalid on the degraded answer.
	IP      netip.Addr
	Country [2]byte
	// Decision is the final decision, Engine the engine's own.
	Decision, Engine score.Action
	Source           score.Source
	// Rule decided when Source is SourceRules; RuleMatched are the signals
	// whose rules applied.
	Rule        score.Signal
	RuleMatched score.SignalSet
	// Pin decided when Source is SourceException.
	Pin     score.Pin
	Risk    uint8
	Reasons score.ReasonSet
	// Test: a personal test key or a fixed test_* token answered.
	Test bool
}

// SetRequestID copies id (truncated to RequestIDMax bytes) into e.
func (e *Entry) SetRequestID(id []byte) {
	e.RequestID = [RequestIDMax]byte{}
	copy(e.RequestID[:], id)
}

// SetCountry keeps a two-letter country code; anything else is left empty.
func (e *Entry) SetCountry(cc string) {
	if len(cc) == 2 {
		e.Country = [2]byte{cc[0], cc[1]}
	} else {
		e.Country = [2]byte{}
	}
}

// Store is where the rings live; *storage.DB implements it.
type Store interface {
	WriteEvaluations(w *storage.EvalWrite) error
	EvaluationRefs(account string, limit int) ([]storage.EvalRef, bool, error)
	RecentEvaluations(account string, since time.Time, limit int) ([]*storage.Evaluation, error)
	TrimEvaluations(account string, keep storage.EvalRef) error
	PruneEvaluations(before time.Time) error
}

// Config configures New.
type Config struct {
	Store Store // required
	// Clock stamps the eviction tick and the daily prune; nil: neither runs
	// by itself.
	Clock clock.Clock
	// FlushEvery is how often pending entries go to the owner; 0 = 250 ms.
	FlushEvery time.Duration
	// FlushAt hands pending entries to the owner as soon as this many wait;
	// 0 = 2048.
	FlushAt int
	// MaxPending bounds the entries waiting for a flush; 0 = 8192.
	MaxPending int
	// IdleAfter is how long an untouched ring stays in memory; 0 = 30 min.
	IdleAfter time.Duration
	// Timeout bounds one List round trip; 0 = 5 s.
	Timeout time.Duration
	Logger  *slog.Logger
}

// List asks for an account's entries.
type List struct {
	Account string
	Now     time.Time
	Limit   int
}

type listCall = actors.Call[List, []*Evaluation]

// batch carries pending entries to the owner; the owner puts the buffer back.
type batch struct {
	entries []Entry
	dropped uint64
}

// Client is the typed client of the owner.
type Client struct {
	mu      sync.Mutex
	pending []Entry
	max     int
	flushAt int
	dropped uint64
	// free holds emptied buffers for reuse with their capacity (a
	// sync.Pool loses them at every GC, and Record would regrow them).
	free chan []Entry

	shards  *actors.Shards
	lists   *actors.Calls[List, []*Evaluation]
	store   Store
	log     *slog.Logger
	stopped atomic.Bool
	stopFl  chan struct{}
	flDone  chan struct{}
	daily   actors.Daily
	once    sync.Once
}

// New spawns the owner and starts the flusher (and, with a clock, the
// eviction tick and the daily prune).
func New(root *actor.RootContext, cfg Config) (*Client, error) {
	if cfg.Store == nil {
		return nil, errors.New("recent: a store is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.FlushEvery <= 0 {
		cfg.FlushEvery = 250 * time.Millisecond
	}
	if cfg.FlushAt <= 0 {
		cfg.FlushAt = 2048
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = 8192
	}
	if cfg.IdleAfter <= 0 {
		cfg.IdleAfter = 30 * time.Minute
	}
	c := &Client{max: cfg.MaxPending, flushAt: cfg.FlushAt, lists: actors.NewCalls[List, []*Evaluation](cfg.Timeout),
		store: cfg.Store, log: cfg.Logger, stopFl: make(chan struct{}), flDone: make(chan struct{})}
	c.free = make(chan []Entry, 4)
	c.pending = c.buffer(0)
	st := &owner{rings: actors.NewTable[string, *ring](64), left: map[string]int{}, store: cfg.Store, log: cfg.Logger,
		idleAfter: cfg.IdleAfter, client: c}
	c.shards = actors.SpawnShards(root, 1, func(int) actor.Actor { return st })
	go c.flushLoop(cfg.FlushEvery)
	if cfg.Clock != nil {
		c.shards.Tick(cfg.Clock, time.Minute)
		c.daily.Start(cfg.Clock, time.Minute, c.Prune, func(err error) {
			c.log.Warn("recent evaluations: prune failed; retried at the next check", "err", err)
		})
	}
	return c, nil
}

// Record queues one evaluation, fire-and-forget. It never blocks on the
// owner and does not allocate. The entry is taken by value, so a caller
// behind an interface keeps its own on the stack.
func (c *Client) Record(e Entry) {
	c.mu.Lock()
	if len(c.pending) < c.max {
		c.pending = append(c.pending, e)
		if len(c.pending) >= c.flushAt {
			c.flushLocked()
		}
	} else {
		c.dropped++
	}
	c.mu.Unlock()
}

// flushLocked hands the pending entries to the owner. The Send happens under
// the mutex, so everything recorded before a List reaches the owner before
// that List does.
func (c *Client) flushLocked() {
	if len(c.pending) == 0 && c.dropped == 0 {
		return
	}
	b := &batch{entries: c.pending, dropped: c.dropped}
	c.pending, c.dropped = c.buffer(len(b.entries)), 0
	c.shards.Send(0, b)
}

// keepBuffer is the largest buffer (in entries, 200 bytes each) kept for
// reuse; a burst's bigger ones go to the GC.
const keepBuffer = 4096

// buffer returns an empty pending buffer: a reused one, or a new one sized
// for the last batch, so a steady rate stops regrowing buffers.
func (c *Client) buffer(last int) []Entry {
	select {
	case b := <-c.free:
		return b[:0]
	default:
		return make([]Entry, 0, min(max(64, last), keepBuffer))
	}
}

func (c *Client) release(b []Entry) {
	if cap(b) > keepBuffer {
		return
	}
	clear(b)
	select {
	case c.free <- b[:0]:
	default:
	}
}

func (c *Client) flushLoop(every time.Duration) {
	defer close(c.flDone)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-c.stopFl:
			return
		case <-t.C:
			c.mu.Lock()
			c.flushLocked()
			c.mu.Unlock()
		}
	}
}

// List returns up to l.Limit of the account's entries of the last
// Retention, newest first, including everything recorded before the call.
func (c *Client) List(l List) ([]*Evaluation, error) {
	if c.stopped.Load() {
		return nil, ErrStopped
	}
	l.Limit = min(max(l.Limit, 0), Size)
	call := c.lists.Get(l)
	c.mu.Lock()
	c.flushLocked()
	c.shards.Send(0, call)
	c.mu.Unlock()
	return c.lists.Wait(call)
}

// Prune deletes every account's entries older than Retention as of now.
func (c *Client) Prune(now time.Time) error {
	return c.store.PruneEvaluations(now.Add(-Retention))
}

// Stop writes what is pending and stops the owner. Record must not be
// called afterwards.
func (c *Client) Stop() error { return c.StopBy(time.Time{}) }

// StopBy is Stop waiting for the shards only until by (actors.StopWait);
// the last batch is written all the same.
func (c *Client) StopBy(by time.Time) error {
	var err error
	c.once.Do(func() {
		c.stopped.Store(true)
		c.daily.Stop()
		close(c.stopFl)
		<-c.flDone
		c.mu.Lock()
		c.flushLocked()
		c.mu.Unlock()
		err = c.shards.StopBy(by)
	})
	return err
}

// ring is one account's stored refs, oldest first, in a circular buffer.
//
// An entry pushed out of the ring is not deleted at once: once Size of them
// wait (stale), one range delete drops every stored entry below the oldest
// the ring keeps, from where the last one ended (trimmed). A busy account
// then writes one key per evaluation, not two (a put and a point delete).
// The list never shows the stale ones: it reads the newest Size entries, and
// with a clock that only moves forward those are the ring's.
type ring struct {
	refs    [Size]storage.EvalRef
	head, n int
	touched time.Time // service clock of the last entry

	stale   int             // entries pushed out since the last trim
	trimmed storage.EvalRef // stored entries below it are gone (hasTrim)
	hasTrim bool
}

// trim returns the range delete that drops what fell out of the ring, and
// notes it; ok is false when there is nothing to drop below the ring.
func (r *ring) trim(account string) (t storage.EvalTrim, ok bool) {
	oldest := r.refs[r.head]
	for i := 1; i < r.n; i++ {
		if ref := r.refs[(r.head+i)%Size]; ref.Before(oldest) {
			oldest = ref
		}
	}
	r.stale = 0
	if r.hasTrim && !r.trimmed.Before(oldest) {
		return t, false // the clock went back: the next trim covers them
	}
	t = storage.EvalTrim{Account: account, HasFrom: r.hasTrim, From: r.trimmed, To: oldest}
	r.trimmed, r.hasTrim = oldest, true
	return t, true
}

func (r *ring) push(ref storage.EvalRef) (evicted storage.EvalRef, full bool) {
	if r.n == Size {
		evicted = r.refs[r.head]
		r.refs[r.head] = ref
		r.head = (r.head + 1) % Size
		return evicted, true
	}
	r.refs[(r.head+r.n)%Size] = ref
	r.n++
	return storage.EvalRef{}, false
}

// owner is the actor owning every ring. Its state lives outside the actor
// value so a restart after a panic keeps it.
type owner struct {
	rings     *actors.Table[string, *ring]
	store     Store
	log       *slog.Logger
	idleAfter time.Duration
	seq       uint32
	client    *Client
	write     storage.EvalWrite
	lost      uint64
	left      map[string]int // per account: entries of the batch not yet applied
}

func (o *owner) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *batch:
		o.apply(m)
	case *listCall:
		l := m.Req
		out, err := o.store.RecentEvaluations(l.Account, l.Now.Add(-Retention), l.Limit)
		m.Reply(out, err)
	case actors.Tick:
		o.rings.Sweep(func(_ string, r *ring) bool {
			return m.Now.Sub(r.touched) > o.idleAfter || r.touched.After(m.Now.Add(time.Hour))
		})
	}
}

// apply stores a batch: new entries, and range deletes of the entries they
// pushed out of their rings (ring).
func (o *owner) apply(b *batch) {
	w := &o.write
	w.Put, w.Delete, w.Trim = w.Put[:0], w.Delete[:0], w.Trim[:0]
	// An entry with Size newer ones of its account in the same batch would
	// be pushed out before it is ever listed: it is not written at all.
	left := o.left
	for i := range b.entries {
		left[b.entries[i].Account]++
	}
	for i := range b.entries {
		e := &b.entries[i]
		n := left[e.Account]
		left[e.Account] = n - 1
		if n > Size {
			continue
		}
		r, err := o.ring(e.Account)
		if err != nil {
			o.lost++
			continue
		}
		o.seq++
		ref := storage.EvalRef{At: e.At.UTC(), Seq: o.seq}
		if _, full := r.push(ref); full {
			if r.stale++; r.stale >= Size {
				if t, ok := r.trim(e.Account); ok {
					w.Trim = append(w.Trim, t)
				}
			}
		}
		r.touched = e.At
		w.Put = append(w.Put, record(e, ref))
	}
	if err := o.store.WriteEvaluations(w); err != nil {
		o.lost += uint64(len(w.Put))
		o.log.Warn("recent evaluations not stored", "entries", len(w.Put), "err", err)
	}
	if dropped := b.dropped + o.lost; dropped > 0 {
		o.log.Warn("recent evaluations dropped", "entries", dropped, "why", "pending buffer full or store unavailable")
		o.lost = 0
	}
	clear(w.Put) // drop records for the GC
	clear(left)
	o.client.release(b.entries)
}

// ring returns account's ring, loading its stored refs on first use and
// trimming a store that holds more than Size.
func (o *owner) ring(account string) (*ring, error) {
	if r, ok := o.rings.Get(account); ok {
		return r, nil
	}
	refs, more, err := o.store.EvaluationRefs(account, Size)
	if err != nil {
		return nil, fmt.Errorf("load recent evaluations of %s: %w", account, err)
	}
	if more {
		if err := o.store.TrimEvaluations(account, refs[len(refs)-1]); err != nil {
			return nil, fmt.Errorf("trim recent evaluations of %s: %w", account, err)
		}
	}
	r := &ring{}
	for i := len(refs) - 1; i >= 0; i-- { // refs are newest first
		r.push(refs[i])
	}
	if len(refs) > 0 && more {
		// Everything below the oldest loaded entry was trimmed just now.
		r.trimmed, r.hasTrim = refs[len(refs)-1], true
	}
	o.rings.Put(account, r)
	return r, nil
}

// record formats an entry for the store.
func record(e *Entry, ref storage.EvalRef) *storage.Evaluation {
	rec := &storage.Evaluation{Account: e.Account, At: ref.At, Seq: ref.Seq,
		Decision: e.Decision.String(), EngineDecision: e.Engine.String(), Source: e.Source.String(),
		Risk: int(e.Risk), Test: e.Test, IP: "unknown"}
	n := 0
	for n < len(e.RequestID) && e.RequestID[n] != 0 {
		n++
	}
	rec.RequestID = string(e.RequestID[:n])
	if e.IP.IsValid() {
		rec.IP = e.IP.String()
	}
	if e.Country != [2]byte{} {
		rec.Country = string(e.Country[:])
	}
	switch e.Source {
	case score.SourceRules:
		rec.Rule = e.Rule.String()
	case score.SourceException:
		rec.Exception = e.Pin.Name()
	}
	if e.RuleMatched != 0 {
		rec.RuleMatched = e.RuleMatched.AppendStrings(nil)
	}
	if e.Reasons != 0 {
		rec.Reasons = e.Reasons.AppendStrings(nil)
	}
	return rec
}
