// Package events owns the browser collector's device events and the global
// sightings they add up to: each device's times_seen and first_seen, across
// every customer (a customer's own view of its devices is actors/devicehist).
// Events and sightings are spread over shard actors so that an event and its
// device's sightings live in the same shard: an event id carries 16 bits of its visitor hash (RouteOf),
// and both route by them. Recording an event is one fire-and-forget Send;
// resolving one on evaluate is one round trip answered on a pooled channel.
//
// # Durability
//
// Shards change their entries in memory and note them dirty; nothing is
// written per call. Before each group sync of the store (storage.DB.OnSync,
// every Options.SyncInterval, 10 ms by default) the client asks every shard
// with changes to hand them over as one write, and the committer stores the
// writes of all shards as one batch before the sync runs. An entry that
// changed many times in an interval is written once. A crash (kill -9,
// power loss) can therefore lose the events collected and the uses recorded
// in the last interval (plus the time one flush and sync take), the same
// bound as the usage counts, and nothing older. A lost use means one replay
// goes unnoticed; a lost event resolves as "unavailable". Shards keep what
// they touched in memory and evict entries idle for IdleAfter once their
// writes are stored, or sooner, least recently touched first, when a shard
// holds its bound (Config.MaxEvents, MaxSightings); a later touch reloads
// them from the store.
//
// # Retention
//
// Events are kept storage.EventRetention (30 days) and device sightings
// until a 90-day period passes without a sighting (storage's bucketed keys);
// Prune drops the expired buckets with range deletes, and the client runs it
// once per day of the service clock.
package events

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/intel/device"
	"github.com/fraudd/fraudd/internal/clock"
	"github.com/fraudd/fraudd/storage"
)

// ErrStopped is returned after Stop.
var ErrStopped = fmt.Errorf("device: stopped: %w", actors.ErrUnavailable)

// Store is where events and sightings live; *storage.DB implements it.
// OnSync registers the flush that runs before each of the store's group
// syncs.
type Store interface {
	OnSync(fn func()) (remove func())
	GetEvent(id [storage.EventIDLen]byte) (*storage.DeviceEvent, error)
	LoadSightings(visitor string, now time.Time) (storage.Sightings, bool, error)
	WriteDevice(w storage.DeviceWrite) error
	PruneEvents(before time.Time) error
	PruneSightings(now time.Time) error
}

// Config configures New; the zero value works (memory only).
type Config struct {
	Shards int         // shard actors (power of two); 0 = 2×GOMAXPROCS
	Store  Store       // nil: memory only, nothing survives a restart
	Clock  clock.Clock // stamps the sweep tick and the daily prune; nil: neither runs by itself
	// Timeout bounds one Resolve round trip; 0 = 2 s.
	Timeout time.Duration
	// IdleAfter is how long an untouched entry stays in memory; 0 = 30 min.
	IdleAfter time.Duration
	// MaxEvents and MaxSightings bound the events and sightings held in
	// memory over all shards; past a bound the entries the store holds go,
	// least recently touched first, before their IdleAfter (a later touch
	// reloads them). 0 = DefaultMaxEvents, DefaultMaxSightings; < 0 = no
	// bound.
	MaxEvents, MaxSightings int
	// SweepEvery is the eviction tick; 0 = 1 min.
	SweepEvery time.Duration
	Group      actors.GroupConfig
	Logger     *slog.Logger
	// Node, when not zero, is this cluster node's route (NodeOf): every id
	// Collect mints carries it, so another node asked to resolve the event
	// knows which member stored it.
	Node uint16
	// KeepRecent is how many of the newest events stored here Recent can
	// name (cluster mode: a lease holder's first watch); 0: none are kept.
	KeepRecent int
}

// DefaultMaxEvents and DefaultMaxSightings are the entries held in memory
// when Config leaves them 0: about 17 MB of events (a real report keeps
// about 1 KiB of signals, some 2 KiB in memory) and 6 MB of sightings, which
// the garbage collector's headroom doubles in RSS. IdleAfter alone bounds
// memory by the collection rate only: the publishable key is public, and a
// Scale account's daily budget (333,333 events) can be posted in minutes,
// which held 200,000 events at 735 MB of RSS for half an hour, past the
// 300 MB budget. An event is evaluated within seconds to minutes of its
// collection, so the newest stay in memory and an older one is read back
// from the store on its next touch.
const (
	DefaultMaxEvents    = 8192
	DefaultMaxSightings = 32_768
)

// EventIDPrefix starts every event id string.
const EventIDPrefix = "ev_"

// EventID is an event's binary id: its UTC day (4 bytes, storage.EventDay),
// the route of its visitor hash (2 bytes), then 10 random bytes — of which,
// in cluster mode, the first 2 are the route of the node that stored it
// (Config.Node, NodeOf).
type EventID = [storage.EventIDLen]byte

// RouteOf is the 16-bit route of a visitor hash.
func RouteOf(visitor string) uint16 { return uint16(actors.HashString(visitor) >> 48) }

// NodeOf is the route of the cluster node that stored event id: bytes 6
// and 7 of the id. An id minted outside cluster mode has random bytes
// there (rpc.Events looks for such an event on the node asked too).
func NodeOf(id *EventID) uint16 { return binary.BigEndian.Uint16(id[6:8]) }

// NewEventID mints an id for an event of visitor at now.
func NewEventID(visitor string, now time.Time) EventID {
	var id EventID
	binary.BigEndian.PutUint32(id[:4], uint32(storage.DayOf(now)))
	binary.BigEndian.PutUint16(id[4:6], RouteOf(visitor))
	if _, err := rand.Read(id[6:]); err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err))
	}
	return id
}

// FormatEventID is the id as the collector and evaluate see it.
func FormatEventID(id EventID) string {
	var b [len(EventIDPrefix) + 2*storage.EventIDLen]byte
	copy(b[:], EventIDPrefix)
	hex.Encode(b[len(EventIDPrefix):], id[:])
	return string(b[:])
}

// ParseEventID reads FormatEventID's form; ok is false for anything else.
// It does not allocate.
func ParseEventID(s string) (id EventID, ok bool) {
	if len(s) != len(EventIDPrefix)+2*storage.EventIDLen || s[:len(EventIDPrefix)] != EventIDPrefix {
		return id, false
	}
	for i := range id {
		hi, ok1 := unhex(s[len(EventIDPrefix)+2*i])
		lo, ok2 := unhex(s[len(EventIDPrefix)+2*i+1])
		if !ok1 || !ok2 {
			return id, false
		}
		id[i] = hi<<4 | lo
	}
	return id, true
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

func routeHash(r uint16) uint64 { return actors.Mix64(uint64(r) + 1) }

// Resolve asks for an event on evaluate: it is found only for the account
// that collected it, and the call records one use of it.
type Resolve struct {
	ID      EventID
	Account string // copied by the caller: it crosses into the actor
	Now     time.Time
	// Peek finds the event without counting a use (Client.Peek).
	Peek bool
	// Deadline, when set, is when a resolve that must ask another node
	// (cluster mode) gives up, so the facts fail open: an account's owner
	// resolving for a caller that waits for it answers within the caller's
	// deadline. The local actors ignore it.
	Deadline time.Time
}

// Resolved is Resolve's answer.
type Resolved struct {
	Found bool
	// Event is the stored event as of before this use; its slices are
	// shared and must not be modified.
	Event storage.DeviceEvent
	// Replayed: the event had already been resolved before this call.
	Replayed bool
	// Sightings are the device's global sightings (times_seen, first_seen)
	// as of now; zero when the event has no visitor id.
	Sightings storage.Sightings
}

type resolveCall = actors.Call[Resolve, Resolved]

// ResolveStep is a Resolve that is one step of a chained call
// (actors/checks): the event's shard hands the answer to Resolved on its own
// goroutine instead of answering a waiting caller. Resolved must not block.
// While the shard is down or stopping, Fail gets the error instead (on the
// sender's goroutine).
type ResolveStep interface {
	actors.Failer
	ResolveReq() *Resolve
	Resolved(Resolved, error)
}

// GivenUp is a ResolveStep that can say its caller answered without it (it
// waited past its time): the shard then resolves it as a Peek, counting no
// use, so that a retry of the evaluation is not told the event was used.
type GivenUp interface {
	GivenUp() bool
}

// Verdict is the device verdict stored with the event, as intel/device
// computed it when the event arrived (its findings aside).
func (r *Resolved) Verdict() device.Verdict {
	e := &r.Event
	return device.Verdict{
		Automation:     e.Flags&storage.EventAutomation != 0,
		Antidetect:     e.Flags&storage.EventAntidetect != 0,
		Emulator:       e.Flags&storage.EventEmulator != 0,
		VirtualMachine: e.Flags&storage.EventVirtualMachine != 0,
		Incognito:      e.Flags&storage.EventIncognito != 0,
		PrivacyMode:    e.Flags&storage.EventPrivacyMode != 0,
		IPBlocklisted:  e.Flags&storage.EventIPBlocklisted != 0,
		Complete:       e.Flags&storage.EventComplete != 0,
		TamperingScore: float64(e.Tampering) / 10000,
		Checked:        device.Checked(e.Checked),
		VisitorID:      e.VisitorID,
	}
}

// Collected is one collector report with the verdict intel/device computed
// for it; Collect turns it into a stored event.
type Collected struct {
	Account string // the publishable key's account
	Now     time.Time
	Origin  string     // the page's Origin header, "" when none was sent
	Addr    netip.Addr // the caller's address
	Schema  uint8      // the signal schema version the collector sent
	Signals []byte     // the compact signals (device.Signals.Compact); the caller's own copy
	Verdict *device.Verdict
}

// flagsOf packs a verdict's booleans into storage.DeviceEvent.Flags.
func flagsOf(v *device.Verdict) uint16 {
	var f uint16
	for _, b := range [...]struct {
		on  bool
		bit uint16
	}{
		{v.Automation, storage.EventAutomation}, {v.Antidetect, storage.EventAntidetect},
		{v.Emulator, storage.EventEmulator}, {v.VirtualMachine, storage.EventVirtualMachine},
		{v.Incognito, storage.EventIncognito}, {v.PrivacyMode, storage.EventPrivacyMode},
		{v.IPBlocklisted, storage.EventIPBlocklisted}, {v.Complete, storage.EventComplete},
	} {
		if b.on {
			f |= b.bit
		}
	}
	return f
}

// record carries a new event to its shard (fire-and-forget).
type record struct{ e *storage.DeviceEvent }

// lenProbe asks a shard for its entry counts (tests).
type lenProbe chan [2]int

// Client is the typed client of the device shards.
type Client struct {
	shards   *actors.Shards
	states   []*shardState
	commit   *actors.GroupCommitter[*write]
	resolves *actors.Calls[Resolve, Resolved]
	store    Store
	log      *slog.Logger
	timeout  time.Duration
	node     uint16 // this cluster node's route in the ids minted (Config.Node)
	stopped  atomic.Bool

	flushMu sync.Mutex // one flush at a time; Stop waits for it
	unhook  func()

	daily actors.Daily

	recent *recentRing // nil: Config.KeepRecent zero
}

// New spawns the shards (and the committer when there is a store).
func New(root *actor.RootContext, cfg Config) *Client {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.IdleAfter <= 0 {
		cfg.IdleAfter = 30 * time.Minute
	}
	if cfg.SweepEvery <= 0 {
		cfg.SweepEvery = time.Minute
	}
	c := &Client{resolves: actors.NewCalls[Resolve, Resolved](cfg.Timeout), store: cfg.Store, log: cfg.Logger, timeout: cfg.Timeout, node: cfg.Node}
	if cfg.KeepRecent > 0 {
		c.recent = newRecentRing(cfg.KeepRecent)
	}
	if cfg.Store != nil {
		c.commit = newCommitter(cfg.Store, cfg.Group, cfg.Logger)
	}
	if cfg.MaxEvents == 0 {
		cfg.MaxEvents = DefaultMaxEvents
	}
	if cfg.MaxSightings == 0 {
		cfg.MaxSightings = DefaultMaxSightings
	}
	n := actors.ShardCount(cfg.Shards)
	perShard := func(total int) int {
		if total < 0 || cfg.Store == nil {
			return 0 // memory only: an evicted entry would be lost
		}
		return max(total/n, 64)
	}
	c.states = make([]*shardState, n)
	for i := range c.states {
		c.states[i] = &shardState{
			events:    actors.NewTable[EventID, *eventEntry](64),
			sightings: actors.NewTable[string, *sightingsEntry](64),
			store:     cfg.Store, commit: c.commit, idleAfter: cfg.IdleAfter, log: cfg.Logger,
			maxEvents: actors.Bound{Max: perShard(cfg.MaxEvents)}, maxSights: actors.Bound{Max: perShard(cfg.MaxSightings)},
		}
	}
	// Inline (actors.InlineRuns): a resolve is a map lookup (a store read
	// for an event not in memory) and a flush hands one write to the
	// committer, so the evaluation that finds the shard idle runs it on its
	// own goroutine instead of waking the shard's worker.
	opts := []actors.ShardOption{actors.Named("events"), actors.WithLogger(cfg.Logger), actors.InlineRuns()}
	if cfg.Store != nil {
		// After a panic the shard's memory may be half-changed: what it
		// changed before is stored first (as its next flush would have),
		// then it drops what the store holds and loads entries from the
		// store on first touch.
		opts = append(opts, actors.OnRestart(func(i int) {
			st := c.states[i]
			shard{st}.flush(nil)
			if err := c.commit.Barrier(cfg.Timeout); err != nil {
				cfg.Logger.Warn("events: shard restarts before its writes were stored", "shard", i, "err", err)
			}
			// Entries the store does not hold as they are (their write
			// failed or is still on its way) stay: they are the only copy,
			// and the process goes on.
			st.dropStored()
		}))
	}
	c.shards = actors.SpawnShards(root, n, func(i int) actor.Actor { return shard{c.states[i]} }, opts...)
	c.shards.Tick(cfg.Clock, cfg.SweepEvery)
	if cfg.Store != nil {
		c.unhook = cfg.Store.OnSync(c.flush)
	}
	if cfg.Clock != nil && cfg.Store != nil {
		c.daily.Start(cfg.Clock, cfg.SweepEvery, c.prune, func(err error) { c.log.Warn("device: prune failed", "err", err) })
	}
	return c
}

// newID mints an event id, with this node's route in it in cluster mode
// (8 random bytes then remain).
func (c *Client) newID(visitor string, now time.Time) EventID {
	id := NewEventID(visitor, now)
	if c.node != 0 {
		binary.BigEndian.PutUint16(id[6:8], c.node)
	}
	return id
}

// Record stores a new event, fire-and-forget. The event must not be modified
// afterwards. A Resolve sent after Record returns finds it: both go to the
// same shard, in order.
func (c *Client) Record(e *storage.DeviceEvent) {
	if c.stopped.Load() {
		return
	}
	c.shards.Send(routeHash(binary.BigEndian.Uint16(e.ID[4:6])), &record{e: e})
}

// Collect mints an id for a collector report and stores it as a new event
// (Record: fire-and-forget). It fails only after Stop.
func (c *Client) Collect(m Collected) (EventID, error) {
	e := EventOf(m)
	return c.Store(&e)
}

// EventOf is the stored form of a collected report, without its id (Store
// mints it).
func EventOf(m Collected) storage.DeviceEvent {
	v := m.Verdict
	e := storage.DeviceEvent{
		Account:   m.Account,
		Created:   m.Now,
		Origin:    m.Origin,
		Addr:      m.Addr,
		Schema:    m.Schema,
		Signals:   m.Signals,
		Flags:     flagsOf(v),
		Tampering: uint16(v.TamperingScore*10000 + 0.5),
		Checked:   uint8(v.Checked),
		VisitorID: v.VisitorID,
	}
	for _, f := range v.Findings {
		e.Findings = append(e.Findings, string(f))
	}
	return e
}

// Store stores a new event under an id minted here (naming this node in
// cluster mode), fire-and-forget, and returns the id: a report collected
// here (Collect), or one another node collected for an account this node
// owns. e must not be modified afterwards.
func (c *Client) Store(e *storage.DeviceEvent) (EventID, error) {
	if c.stopped.Load() {
		return EventID{}, ErrStopped
	}
	e.ID = c.newID(e.VisitorID, e.Created)
	c.Record(e)
	if c.recent != nil {
		c.recent.add(e.Account, e.ID, e.Created)
	}
	return e.ID, nil
}

// Peek finds the account's event without counting a use, so that issuing a
// device-evidence challenge does not make the evaluation that follows a
// replay. It asks the event's shard, which holds the events written behind
// and not yet stored: a peek at the store alone missed an event collected
// within the last sync interval and fell back to counting a use.
func (c *Client) Peek(m Resolve) (Resolved, error) {
	m.Peek = true
	return c.Resolve(m)
}

// Resolve looks an event up for an evaluation and records the use, in one
// round trip. Errors mean the event could not be read (store down, timeout);
// an unknown event is Found false with no error.
func (c *Client) Resolve(m Resolve) (Resolved, error) {
	if c.stopped.Load() {
		return Resolved{}, ErrStopped
	}
	call := c.resolves.Get(m)
	c.shards.Send(routeHash(binary.BigEndian.Uint16(m.ID[4:6])), call)
	return c.resolves.Wait(call)
}

// Unuse gives back the use a Resolve stamped at recorded: an evaluation
// whose caller never got its answer (cluster mode: a call its caller
// settled and answered 503, docs/cluster.md), so that the evaluation tried
// again does not read as a replay. Fire-and-forget, like Record, and after
// any Resolve sent before it; an event not stored here, or of another
// account, or without a use, is left alone.
func (c *Client) Unuse(id EventID, account string, at time.Time) {
	if c.stopped.Load() {
		return
	}
	c.shards.Send(routeHash(binary.BigEndian.Uint16(id[4:6])), &unuse{id: id, account: account, at: at})
}

// unuse is Unuse's message.
type unuse struct {
	id      EventID
	account string
	at      time.Time
}

// ResolveThen is Resolve as a step of a chained call: it sends st to the
// event's shard and returns at once; the shard calls st.Resolved.
func (c *Client) ResolveThen(st ResolveStep) {
	if c.stopped.Load() {
		st.Fail(ErrStopped)
		return
	}
	id := &st.ResolveReq().ID
	c.shards.Send(routeHash(binary.BigEndian.Uint16(id[4:6])), st)
}

// flush has every shard with changes hand them to the committer and waits
// until they are stored. The store runs it before each group sync.
func (c *Client) flush() {
	c.flushMu.Lock()
	defer c.flushMu.Unlock()
	if c.stopped.Load() {
		return
	}
	if !c.shards.FlushPending(func(i int) bool { return c.states[i].pending.Load() }, c.timeout) {
		c.log.Warn("events: shards did not store their changes in time; the sync goes on without them")
	}
}

// Prune drops events past retention and sightings past their periods as of now.
func (c *Client) Prune(now time.Time) error {
	if c.store == nil {
		return nil
	}
	return c.daily.Run(now, c.prune)
}

func (c *Client) prune(now time.Time) error {
	if err := c.store.PruneEvents(now.Add(-storage.EventRetention)); err != nil {
		return fmt.Errorf("prune device events: %w", err)
	}
	if err := c.store.PruneSightings(now); err != nil {
		return fmt.Errorf("prune device sightings: %w", err)
	}
	return nil
}

// Sweep asks every shard to evict idle entries as of now.
func (c *Client) Sweep(now time.Time) {
	if !c.stopped.Load() {
		c.shards.Broadcast(actors.Tick{Now: now})
	}
}

// resident reports the events and sightings held in memory (tests).
func (c *Client) resident() (events, sightings int) {
	ch := make(lenProbe, c.shards.Len())
	c.shards.Broadcast(ch)
	for range c.shards.Len() {
		n := <-ch
		events += n[0]
		sightings += n[1]
	}
	return events, sightings
}

// Stop refuses new work, drains the shards, then stores everything they
// changed. Call it after the HTTP server stopped sending. A shard stuck in
// a handler past actors.StopTimeout keeps its changes (logged, and named in
// the error): it still runs, and they are its own.
func (c *Client) Stop() error { return c.StopBy(time.Time{}) }

// StopBy is Stop waiting for the shards only until by (actors.StopWait);
// what the shards that stopped changed is stored before it returns.
func (c *Client) StopBy(by time.Time) error {
	if c.stopped.Swap(true) {
		return nil
	}
	c.flushMu.Lock() // a flush under way finishes while the shards still run
	c.flushMu.Unlock()
	if c.unhook != nil {
		c.unhook()
	}
	c.daily.Stop()
	err := c.shards.StopBy(by)
	if c.commit != nil {
		// The goroutines of the shards that stopped are done: their states
		// are Stop's now. A shard Stop gave up on (stuck in a handler) still
		// owns its state, so it is left alone: what it changed since its
		// last flush is not stored, as after a crash (package doc:
		// Durability).
		for i, st := range c.states {
			if !c.shards.Stopped(i) {
				c.log.Error("device: a shard did not stop; the events and sightings it changed since its last flush are not stored", "shard", i)
				continue
			}
			shard{st}.flush(nil)
		}
		c.commit.Close()
	}
	if err != nil {
		return fmt.Errorf("device: %w", err)
	}
	return nil
}

// Stats reports the group committer's work so far: batches and writes (one
// event or sighting each); zero without a store.
func (c *Client) Stats() (groups, writes uint64) {
	if c.commit == nil {
		return 0, 0
	}
	return c.commit.Stats()
}
