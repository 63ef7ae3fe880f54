package devicehist

import (
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/internal/clock"
	"github.com/fraudd/fraudd/internal/secrets"
	"github.com/fraudd/fraudd/storage"
)

// Errors. Any error from Observe means "no device-history facts": answer
// without them (fail open); the evaluation itself is not affected.
var (
	ErrStopped = fmt.Errorf("devicehist: stopped: %w", actors.ErrUnavailable)
	// ErrInvalid: an id is longer than its bound (or the customer is empty).
	ErrInvalid = errors.New("devicehist: invalid observation")
	// ErrUnavailable wraps store failures.
	ErrUnavailable = errors.New("devicehist: store unavailable")
)

// MaxAccountID is the longest accountId in characters (SPEC §8 field
// bounds); Observe takes up to 4 bytes per character.
const (
	MaxAccountID    = 256
	maxAccountBytes = 4 * MaxAccountID
)

// DevicesLimit is how many devices the admin view lists (SPEC §8).
const DevicesLimit = 50

var sep = [1]byte{0}

// Store is where the history lives; *storage.DB implements it. OnSync
// registers the flush that runs before each of the store's group syncs.
type Store interface {
	OnSync(fn func()) (remove func())
	LoadHist(r storage.HistRecord) (storage.HistStored, bool, error)
	WriteHist(ws []*storage.HistWrite) error
	ExpiredHist(before storage.Day, fn func(storage.HistRef) bool) error
	// DropUndecodableHist deletes, through w, an expired record whose
	// stored value does not decode (Prune).
	DropUndecodableHist(w *storage.HistWrite, ref *storage.HistRef) (bool, error)
	RecentHistDevices(customer string, limit int) ([]*storage.HistCustomerDevice, error)
	// HistOf names the stored records of the customers match selects
	// (Take: cluster mode moves them to their owner).
	HistOf(match func(customer string) bool, fn func(storage.HistRef) bool) error
	// HistIdentitiesOf names one customer's stored records (a watcher's
	// existence filter, filter.go).
	HistIdentitiesOf(customer string, fn func(kind storage.HistKind, id []byte) bool) error
	// Sync makes every commit so far durable now (Take: the deletes of
	// the records it hands out).
	Sync() error
}

// Config configures New; the zero value works (memory only, nothing survives
// a restart, no automatic sweeps or pruning).
type Config struct {
	// Shards is the number of shard actors (a power of two); 0 = 2×GOMAXPROCS.
	Shards int
	// Store keeps the history. Nil: memory only.
	Store Store
	// Secret keys the accountId hash and seals its copy (derived keys).
	Secret secrets.Master
	// Clock stamps the sweep tick and the daily prune; nil: neither runs by itself.
	Clock clock.Clock
	// Timeout bounds one round trip; 0 = 2 s.
	Timeout time.Duration
	// IdleAfter is how long an untouched entry stays in memory; 0 = 30 min.
	IdleAfter time.Duration
	// MaxDevices, MaxAccounts and MaxAddresses bound the (customer, device),
	// (customer, account) and (customer, address) records each shard holds
	// in memory (per shard, not over all of them: a customer's records are
	// all in one shard); past a bound the records the store holds go, least
	// recently used first, before their IdleAfter (the next observation
	// reloads them). 0 = DefaultMaxDevices, DefaultMaxAccounts,
	// DefaultMaxAddresses; < 0 = no bound.
	MaxDevices, MaxAccounts, MaxAddresses int
	// SweepEvery is the eviction tick; 0 = 1 min.
	SweepEvery time.Duration
	// Group tunes the group committer.
	Group  actors.GroupConfig
	Logger *slog.Logger
}

// DefaultMaxDevices, DefaultMaxAccounts and DefaultMaxAddresses are the
// records a shard holds in memory when Config leaves them 0: a few MB a
// shard (an account record with its sealed copy is about 300 bytes, a busy
// device's record a few KB), some 30 MB over the 4 shards of a 2-core
// machine, which the garbage collector's headroom doubles in RSS, within
// the 300 MB budget. A customer's records of the last minutes stay in
// memory; an older one is read back from the store.
const (
	DefaultMaxDevices   = 4096
	DefaultMaxAccounts  = 8192
	DefaultMaxAddresses = 8192
)

// Observation is one evaluate's device and account evidence.
type Observation struct {
	// Customer is our account id (acc_…), whose view this is.
	Customer string
	// Test: personal test key. The facts are read as if the observation
	// were recorded, but nothing is stored, so test traffic never shows in
	// any later answer (SPEC 2.2 customer_history excludes test-key traffic).
	Test bool
	// EventID is the fingerprintEventId; a resubmitted event counts once.
	EventID string
	// Replayed: the event's use was counted before this one (events'
	// Resolved.Replayed, kept for the event's 30 days). The device's own
	// list keeps only its latest event ids, so without this an old
	// event resubmitted after newer ones counted as a new visit.
	Replayed bool
	// DeviceID is the resolved event's visitor id; "" without device evidence.
	DeviceID string
	// AccountID is the request's accountId; "" when not sent. It is hashed
	// with a key derived from Config.Secret, and sealed when first stored.
	AccountID string
	// IP is the visitor's address (invalid when unmeasured); SharedExit says
	// it is a VPN, proxy, relay, datacenter, Tor or mobile exit
	// (score.Network.SharedExit): the address is then neither counted nor
	// linked.
	IP         netip.Addr
	SharedExit bool
	// Now is the request's stamped time.
	Now time.Time
}

// obsReq is an Observation as it crosses into a shard: the strings copied
// into the (pooled) call, so a request buffer may be reused at once.
type obsReq struct {
	now        int64
	ev         uint64
	ip         netip.Addr
	acct       storage.AccountHash
	test       bool
	sharedExit bool
	replayed   bool
	nCust      uint8
	nDev       uint8
	nAcct      uint16
	cust       [storage.MaxHistCustomer]byte
	dev        [storage.MaxHistDevice]byte
	acctID     [maxAccountBytes]byte
	sum        [sha256.Size]byte
}

type (
	obsCall     = actors.Call[obsReq, Facts]
	devicesCall = actors.Call[devicesReq, []DeviceView]
)

type devicesReq struct {
	customer string
	limit    int
	now      int64
}

// Client is the typed client of the device-history shards.
type Client struct {
	shards  *actors.Shards
	states  []*shardState
	commit  *actors.GroupCommitter[pending]
	calls   *actors.Calls[obsReq, Facts]
	mcalls  *actors.Calls[mirrorReq, Facts]
	lists   *actors.Calls[devicesReq, []DeviceView]
	store   Store
	macs    sync.Pool
	timeout time.Duration
	log     *slog.Logger
	stopped atomic.Bool
	// sink receives the owner's mirror pushes (SetMirrorSink); watched is
	// set by the first Watch (Take then tells every shard, watchers or
	// not).
	sink    atomic.Pointer[func(MirrorPush)]
	watched atomic.Bool
	// watchedSet holds the customers some watcher watches (written by
	// their shards, read by IsWatched).
	watchedSet sync.Map
	// builder builds the filters of first watches (filter.go).
	builder *filterBuilder

	flushMu sync.Mutex // one flush at a time; Stop waits for it
	unhook  func()

	daily actors.Daily
}

// New spawns the shards (and the group committer when there is a store).
func New(root *actor.RootContext, cfg Config) (*Client, error) {
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
	sealer, err := secrets.NewSealer(cfg.Secret, secrets.LabelAccountSeal)
	if err != nil {
		return nil, fmt.Errorf("devicehist: %w", err)
	}
	hashKey := cfg.Secret.Derive(secrets.LabelAccountHash)
	c := &Client{
		calls:   actors.NewCalls[obsReq, Facts](cfg.Timeout),
		mcalls:  actors.NewCalls[mirrorReq, Facts](cfg.Timeout),
		lists:   actors.NewCalls[devicesReq, []DeviceView](cfg.Timeout),
		store:   cfg.Store,
		timeout: cfg.Timeout,
		log:     cfg.Logger,
	}
	c.macs.New = func() any { return hmac.New(sha256.New, hashKey) }
	c.builder = newFilterBuilder(c)
	if cfg.Store != nil {
		c.commit = newCommitter(cfg.Store, cfg.Group, cfg.Logger)
	}
	n := actors.ShardCount(cfg.Shards)
	perShard := func(bound, dflt int) actors.Bound {
		if bound == 0 {
			bound = dflt
		}
		if bound < 0 || cfg.Store == nil {
			return actors.Bound{} // memory only: an evicted record would be lost
		}
		return actors.Bound{Max: max(bound, 64)}
	}
	c.states = make([]*shardState, n)
	for i := range c.states {
		c.states[i] = newShardState(cfg.Store, c.commit, sealer, int64(cfg.IdleAfter/time.Second), cfg.Logger, &c.sink)
		c.states[i].maxDevices = perShard(cfg.MaxDevices, DefaultMaxDevices)
		c.states[i].maxAccounts = perShard(cfg.MaxAccounts, DefaultMaxAccounts)
		c.states[i].maxAddresses = perShard(cfg.MaxAddresses, DefaultMaxAddresses)
		c.states[i].watchedSet = &c.watchedSet
		c.states[i].builder = c.builder
	}
	// Inline (actors.InlineRuns): an observation updates three records in
	// memory (a store read for one not in memory) and a flush hands one
	// write to the committer, so the evaluation that finds the shard idle
	// runs it on its own goroutine instead of waking the shard's worker.
	opts := []actors.ShardOption{actors.Named("devicehist"), actors.WithLogger(cfg.Logger), actors.InlineRuns()}
	// After a panic the shard's memory may be half-changed: what it
	// changed before is stored first (as its next flush would have),
	// then it drops what the store holds and loads records from the
	// store on first touch. Entries the store does not hold as they
	// are (their write failed or is still on its way) stay: they are
	// the only copy of what was observed, and the process goes on.
	// Its watchers are told to drop their copies (a change the panic cut
	// short was never pushed) and ask again.
	opts = append(opts, actors.OnRestart(func(i int) {
		st := c.states[i]
		shard{st}.resetWatchers(nil)
		if cfg.Store == nil {
			return
		}
		shard{st}.flush(nil)
		if err := c.commit.Barrier(cfg.Timeout); err != nil {
			cfg.Logger.Warn("devicehist: shard restarts before its writes were stored", "shard", i, "err", err)
		}
		st.dropStored()
	}))
	c.shards = actors.SpawnShards(root, n, func(i int) actor.Actor { return shard{c.states[i]} }, opts...)
	c.shards.Tick(cfg.Clock, cfg.SweepEvery)
	if cfg.Store != nil {
		c.unhook = cfg.Store.OnSync(c.flush)
	}
	if cfg.Clock != nil && cfg.Store != nil {
		c.daily.Start(cfg.Clock, cfg.SweepEvery, c.prune, func(err error) { c.log.Warn("devicehist: prune failed", "err", err) })
	}
	return c, nil
}

// Observe records one evaluate's evidence on the customer's shard and
// answers its facts, in one round trip. Nothing to observe (no device and no
// account) answers zero Facts without a hop. Writes go to the store behind
// the answer (package doc: Durability).
func (c *Client) Observe(o Observation) (Facts, error) {
	if o.DeviceID == "" && o.AccountID == "" {
		return Facts{}, nil
	}
	if c.stopped.Load() {
		return Facts{}, ErrStopped
	}
	call := c.calls.Get(obsReq{})
	if err := c.prepare(o, &call.Req); err != nil {
		return Facts{}, err
	}
	c.shards.Send(actors.HashString(o.Customer), call)
	f, err := c.calls.Wait(call)
	if err != nil {
		return Facts{}, fmt.Errorf("devicehist: %w", err)
	}
	return f, nil
}

// Prepared is an Observation made ready to cross into a shard as one step
// of a chained call (Prepare, then ObserveThen): its strings copied and the
// accountId hashed on the caller's goroutine. The zero value observes
// nothing.
type Prepared struct {
	q      obsReq
	hash   uint64 // the customer's shard
	mirror bool   // answer from the mirror (SetMirror)
}

// SetDevice sets the resolved event's visitor id, known only once the
// event resolved (an earlier step of the chain); "" for none. An id over
// its bound is dropped (observed without a device).
func (p *Prepared) SetDevice(id string) {
	if len(id) > storage.MaxHistDevice {
		id = ""
	}
	p.q.nDev = uint8(copy(p.q.dev[:], id))
}

// SetReplayed sets Observation.Replayed, known only once the event
// resolved.
func (p *Prepared) SetReplayed(replayed bool) { p.q.replayed = replayed }

// Prepare readies o for ObserveThen; o.DeviceID may be left "" and set
// later with SetDevice. The error is Observe's ErrInvalid.
func (c *Client) Prepare(o Observation, p *Prepared) error {
	if err := c.prepare(o, &p.q); err != nil {
		return err
	}
	p.hash = actors.HashString(o.Customer)
	return nil
}

func (c *Client) prepare(o Observation, q *obsReq) error {
	if o.Customer == "" || len(o.Customer) > storage.MaxHistCustomer || len(o.DeviceID) > storage.MaxHistDevice || len(o.AccountID) > maxAccountBytes {
		return ErrInvalid
	}
	q.now, q.test = o.Now.Unix(), o.Test
	q.nCust = uint8(copy(q.cust[:], o.Customer))
	q.nDev = uint8(copy(q.dev[:], o.DeviceID))
	q.nAcct = uint16(copy(q.acctID[:], o.AccountID))
	q.ev, q.acct, q.ip = 0, storage.AccountHash{}, netip.Addr{}
	if o.EventID != "" {
		q.ev = max(actors.HashString(o.EventID), 1)
	}
	if o.AccountID != "" {
		q.acct = c.accountHash(q)
		if o.IP.IsValid() && !o.SharedExit {
			q.ip = o.IP.Unmap().WithZone("")
		}
	}
	q.sharedExit, q.replayed = o.SharedExit, o.Replayed
	return nil
}

// ObserveStep is an Observe that is one step of a chained call
// (actors/checks): the customer's shard hands the facts to Observed on its
// own goroutine instead of answering a waiting caller. Observed must not
// block. While the shard is down or stopping, Fail gets the error instead
// (on the sender's goroutine).
type ObserveStep interface {
	actors.Failer
	ObserveReq() *Prepared
	Observed(Facts, error)
}

// ObserveThen is Observe as a step of a chained call, for an observation
// made ready with Prepare: it sends st to the customer's shard and returns
// at once; the shard calls st.Observed.
func (c *Client) ObserveThen(st ObserveStep) {
	if c.stopped.Load() {
		st.Fail(ErrStopped)
		return
	}
	c.shards.Send(st.ObserveReq().hash, st)
}

// accountHash is HMAC-SHA256(derived key, customer ‖ 0 ‖ accountId), cut to
// 16 bytes: keyed, and scoped to the customer, so two customers' equal ids
// never link.
func (c *Client) accountHash(q *obsReq) storage.AccountHash {
	m := c.macs.Get().(hash.Hash)
	m.Reset()
	m.Write(q.cust[:q.nCust])
	m.Write(sep[:])
	m.Write(q.acctID[:q.nAcct])
	sum := m.Sum(q.sum[:0])
	c.macs.Put(m)
	return storage.AccountHash(sum[:16])
}

// Devices lists the customer's most recently seen devices (at most limit,
// DevicesLimit when limit ≤ 0), newest first, as of now. With a store it
// first waits until everything the customer's shard wrote before is stored.
func (c *Client) Devices(customer string, limit int, now time.Time) ([]DeviceView, error) {
	if c.stopped.Load() {
		return nil, ErrStopped
	}
	if customer == "" || len(customer) > storage.MaxHistCustomer {
		return nil, ErrInvalid
	}
	if limit <= 0 {
		limit = DevicesLimit
	}
	h := actors.HashString(customer)
	if c.store == nil {
		call := c.lists.Get(devicesReq{customer: customer, limit: limit, now: now.Unix()})
		c.shards.Send(h, call)
		return c.lists.Wait(call)
	}
	if err := c.barrier(h); err != nil {
		return nil, err
	}
	recs, err := c.store.RecentHistDevices(customer, limit)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	out := make([]DeviceView, 0, len(recs))
	for _, r := range recs {
		if trimDevice(r, now.Unix()) {
			out = append(out, viewOf(r))
		}
	}
	return out, nil
}

// barrier returns once every change the shard owning h made before it is
// stored (or failed).
func (c *Client) barrier(h uint64) error {
	ch := newBarrier()
	c.shards.Send(h, ch)
	t := time.NewTimer(c.timeout)
	defer t.Stop()
	select {
	case err := <-ch:
		return err // nil, or ErrStopped
	case <-t.C:
		return fmt.Errorf("devicehist: %w", actors.ErrTimeout)
	}
}

// barrierAll is barrier for every shard, waiting at most wait.
func (c *Client) barrierAll(wait time.Duration) error {
	chans := make([]barrier, c.shards.Len())
	for i := range chans {
		chans[i] = newBarrier()
	}
	// Broadcast cannot carry one channel per shard; route by index instead.
	for i, ch := range chans {
		c.shards.Send(uint64(i), ch)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	for _, ch := range chans {
		select {
		case err := <-ch:
			if err != nil {
				return err // ErrStopped
			}
		case <-t.C:
			return fmt.Errorf("devicehist: %w", actors.ErrTimeout)
		}
	}
	return nil
}

// pruneBatch is how many expired records Prune hands to the shards before it
// waits (at most pruneWait) for them and their writes.
const (
	pruneBatch = 1024
	pruneWait  = 30 * time.Second
)

// Prune removes what fell out of the 90-day window as of now: it walks the
// expiry index of the days before the window (storage.ExpiredHist) and has
// each record's owning shard trim or delete it. It returns once all of that
// is stored. The client runs it once per day of the service clock.
func (c *Client) Prune(now time.Time) error {
	if c.store == nil || c.stopped.Load() {
		return nil
	}
	return c.daily.Run(now, c.prune)
}

func (c *Client) prune(now time.Time) error {
	batch := make([]storage.HistRef, 0, pruneBatch)
	var ferr error
	flush := func() {
		for i := range batch {
			c.shards.Send(actors.HashString(batch[i].Customer), &expire{ref: batch[i], now: now.Unix()})
		}
		batch = batch[:0]
		if err := c.barrierAll(max(c.timeout, pruneWait)); err != nil && ferr == nil {
			ferr = err
		}
	}
	err := c.store.ExpiredHist(windowStart(now.Unix()), func(ref storage.HistRef) bool {
		batch = append(batch, ref)
		if len(batch) == pruneBatch {
			flush()
		}
		return ferr == nil
	})
	if ferr == nil {
		flush()
	}
	if err == nil {
		err = ferr
	}
	if err != nil {
		return fmt.Errorf("devicehist: prune: %w", err)
	}
	return nil
}

// Sweep asks every shard to evict idle and expired entries as of now (the
// tick does it by itself when Config.Clock is set).
func (c *Client) Sweep(now time.Time) {
	if !c.stopped.Load() {
		c.shards.Broadcast(actors.Tick{Now: now})
	}
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
		c.log.Warn("devicehist: shards did not store their changes in time; the sync goes on without them")
	}
}

// Stats reports the group committer's work: batches and writes (one per
// shard flush or expiry).
func (c *Client) Stats() (groups, writes uint64) {
	if c.commit == nil {
		return 0, 0
	}
	return c.commit.Stats()
}

// resident counts the entries held in memory (tests).
func (c *Client) resident() int {
	ch := make(lenProbe, c.shards.Len())
	c.shards.Broadcast(ch)
	n := 0
	for range c.shards.Len() {
		n += <-ch
	}
	return n
}

// Stop refuses new calls, lets the shards finish their mailboxes, then
// stores everything they changed. Call it after the HTTP server stopped
// sending. A shard stuck in a handler past actors.StopTimeout keeps its
// changes (logged, and named in the error): it still runs, and they are
// its own.
func (c *Client) Stop() error { return c.StopBy(time.Time{}) }

// StopBy is Stop waiting for the shards only until by (actors.StopWait);
// what the shards that stopped changed is stored before it returns.
func (c *Client) StopBy(by time.Time) error {
	if c.stopped.Swap(true) {
		return nil
	}
	c.flushMu.Lock() // a flush under way finishes while the shards still run
	c.flushMu.Unlock()
	c.builder.close() // before the caller may close the store they scan
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
				c.log.Error("devicehist: a shard did not stop; the history it changed since its last flush is not stored", "shard", i)
				continue
			}
			shard{st}.flush(nil)
		}
		c.commit.Close()
	}
	if err != nil {
		return fmt.Errorf("devicehist: %w", err)
	}
	return nil
}

func fmtUnavailable(err error) error { return fmt.Errorf("%w: %w", ErrUnavailable, err) }
