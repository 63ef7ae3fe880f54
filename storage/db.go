package storage

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// ErrUnavailable is returned (wrapped) by every operation once the store has
// seen an I/O failure it cannot vouch for. Authenticated endpoints answer 503
// storage_unavailable while Available reports false.
var ErrUnavailable = errors.New("storage unavailable")

// ErrNotFound is returned when a record does not exist.
var ErrNotFound = errors.New("not found")

// ErrManifestMissing is returned by Open when the directory holds a store
// whose manifest marker (marker.manifest.*) is gone. Pebble would take such a
// directory for an empty one, start a fresh store over it and delete the old
// tables as obsolete; refusing keeps them for a restore.
var ErrManifestMissing = errors.New("store has data files but no manifest marker")

// ErrKeyCheckMismatch is returned by VerifyKeyCheck when the store was
// written under another master secret.
var ErrKeyCheckMismatch = errors.New("master secret does not match the one the store was written with")

// ErrLocked is returned by Open when another process holds the store's
// directory lock (a server running on the same data dir).
var ErrLocked = errors.New("store is in use by another process")

// ErrNoStore is returned by Open with MustExist for a directory that holds
// no store.
var ErrNoStore = errors.New("no store")

// Durability says when a counted call's increment (storage.DB.ApplyUsage)
// is durable, that is, survives kill -9 and power loss.
type Durability uint8

const (
	// Interval (the default): ApplyUsage commits without a sync, and one
	// background group sync every SyncInterval makes everything committed so
	// far durable, as InnoDB's innodb_flush_log_at_trx_commit=2 and Redis's
	// appendfsync everysec do. A crash loses at most what was committed since
	// the last group sync began: one interval, plus the time a sync takes.
	Interval Durability = iota
	// Strict: ApplyUsage syncs before it returns, so nothing acknowledged is
	// ever lost, at about one fdatasync per group of concurrent calls.
	Strict
)

// memTableSize is Pebble's memtable size. The live path rewrites the same
// records all day (usage counters, event uses, device and account history:
// a hot record once per sync interval), and a flush keeps only the newest
// version of each key in its memtable, so a larger memtable writes far fewer
// bytes into L0 and leaves compactions less to do. Measured with
// actors.BenchmarkLiveWrites (400k live evaluations, Zipf-distributed
// devices, accounts and addresses), Pebble's write amplification (WAL +
// flushes + compactions over WAL bytes) is 2.70 with Pebble's 4 MiB, 1.48
// with 16 MiB, 1.26 with 32 MiB and 1.14 with 64 MiB; table bytes written per
// evaluation fall from 6.7 KB to 1.0 KB at 32 MiB. 32 MiB takes most of the
// gain at a bounded memory cost (Options.CacheBytes accounts for it). The
// L0 thresholds stay at Pebble's defaults: raising the compaction threshold
// to 8 saved a little more (1.17) for more read amplification on the
// first-touch reads of the same records. Smaller memtables cost CPU as well
// (the same benchmark's cpu-µs/eval, every goroutine of the process: 200 at
// 32 MiB, 226 at 8 MiB, 266 at 4 MiB; FRAUDD_BENCH_MEMTABLE_MB=8): the
// skiplist searches get cheaper, but flushes and compactions cost more.
const memTableSize = 32 << 20

// DefaultSyncInterval is the group sync period when Options leaves it 0.
const DefaultSyncInterval = 10 * time.Millisecond

// ParseDurability reads "interval" or "strict".
func ParseDurability(s string) (Durability, error) {
	switch s {
	case "interval":
		return Interval, nil
	case "strict":
		return Strict, nil
	}
	return Interval, fmt.Errorf("durability %q: want interval or strict", s)
}

func (m Durability) String() string {
	if m == Strict {
		return "strict"
	}
	return "interval"
}

// Options configure Open. The zero value works.
type Options struct {
	// FS overrides the filesystem (tests use vfs.NewMem or an error-injecting FS).
	FS vfs.FS
	// CacheBytes is the block cache size; 0 means 64 MiB for blocks plus room
	// for the two memtables Pebble may hold (2 × memTableSize), which it
	// reserves from the same cache: 128 MiB. Pebble's default (8 MiB) leaves
	// the cache effectively empty (the memtables take it), so it is always
	// explicit.
	CacheBytes int64
	// Logger receives Pebble's own log lines; nil means slog.Default().
	Logger *slog.Logger
	// Durability of counted calls; the zero value is Interval.
	Durability Durability
	// SyncInterval is the period of the one background loop that runs the
	// flush hooks (OnSync) and then syncs the WAL when anything was committed
	// without a sync since the last one: usage increments in Interval mode,
	// and the write-behind stores (device events and history, GPU samples)
	// in either mode. 0 means DefaultSyncInterval.
	SyncInterval time.Duration
	// MemTableBytes overrides Pebble's memtable size (memTableSize when 0);
	// benchmarks use it to compare sizes on the live write pattern.
	MemTableBytes int64
	// CloseWait bounds how long a Pebble instance that hit a fatal error may
	// take to close before the store gives up on it and opens a new one over
	// the same files (see Probe); 0 means 2 s.
	CloseWait time.Duration
	// StampFile, when set, is the store's stamp file (stamp.go): outside
	// the store's directory, in the same filesystem. Open then refuses a
	// store that is missing while the file is there (ErrStoreLost) or that
	// is behind it (ErrStoreBehind), and bumps the stamp at open and every
	// StampEvery (DefaultStampEvery when 0).
	StampFile  string
	StampEvery time.Duration
	// MustExist refuses a directory that holds no store (ErrNoStore)
	// instead of creating one: for tools that read an existing store.
	MustExist bool
}

// DB is the service's store. It is safe for concurrent use; Pebble serialises
// writes internally, and each entity's writes come from its one owning actor.
//
// A fatal write error (a full disk, a failed fsync) leaves a Pebble instance
// unusable: its commit pipeline stays stalled. The store then answers
// ErrUnavailable and the next Probe replaces the instance: the old one is
// fenced off the files (every file operation it tries fails, as after a
// crash), closed as far as it will close, and a new one is opened over the
// same directory, replaying the WAL. Everything a synced commit acknowledged
// is in the WAL, so it survives the swap like it survives a crash.
type DB struct {
	dir       string
	fs        vfs.FS    // the base filesystem
	lock      io.Closer // the directory lock, held across instance swaps
	cache     *pebble.Cache
	log       *slog.Logger
	closeWait time.Duration
	memTable  int64

	h        atomic.Pointer[handle]
	reopenMu sync.Mutex // one instance swap at a time
	gens     int        // instances opened so far (under reopenMu)

	// failed is set by an I/O error that did not break the instance (a read
	// error); the next successful Probe clears it.
	failed atomic.Bool
	// corrupt holds the path of a store file Pebble found corrupt. Sticky: a
	// corrupt file does not heal, so the store stays unavailable until an
	// operator restores it.
	corrupt atomic.Pointer[string]

	// serving is set once start-up is over (Serving) and cleared when the
	// stop begins (Stopping). Outside, a failure is returned to the start-up
	// or stop code, which reports it in its one line, so the store logs it
	// at DEBUG only; inside, nobody else reports it. The
	// returned error carries the cause: a broken instance keeps its first
	// fatal error (handle.cause), and openHandle's and brokenErr's errors
	// wrap it.
	serving atomic.Bool

	durability Durability
	interval   time.Duration
	stamp      stamper // path empty: no stamp file

	// dirtySince is when the oldest commit not covered by a sync begun
	// since was made (d.clock), 0 when there is none. Set by commits without
	// a sync, cleared by syncWAL as its sync begins.
	dirtySince atomic.Int64
	// usageSince is when the ApplyUsage under way began (d.clock), 0 when
	// none runs: AnswerAhead's guard against a commit that hangs.
	usageSince atomic.Int64
	epoch      time.Time
	// Counters behind WriteStats.
	commits, keys, syncs, lateSyncs atomic.Uint64
	lastLateLog                     atomic.Int64

	hooksMu sync.Mutex
	hooks   map[int]func()
	hookSeq int

	stopSync chan struct{}
	syncDone chan struct{}
	// idle hands a write to a writer goroutine waiting for one (wait).
	idle chan *commitCall
	// usage caches the usage records ApplyUsage last committed.
	usage usageCache
	// hist is the device-history journal (histjournal.go).
	hist histJournal
}

// Open opens (or creates) the store in dir.
func Open(dir string, o Options) (*DB, error) {
	if o.MemTableBytes <= 0 {
		o.MemTableBytes = memTableSize
	}
	if o.CacheBytes == 0 {
		o.CacheBytes = 64<<20 + 2*o.MemTableBytes
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.SyncInterval <= 0 {
		o.SyncInterval = DefaultSyncInterval
	}
	if o.CloseWait <= 0 {
		o.CloseWait = 2 * time.Second
	}
	initialised, err := hasStoreFiles(o.FS, dir)
	if err != nil {
		return nil, err
	}
	if o.MustExist && !initialised {
		return nil, fmt.Errorf("%w in %s", ErrNoStore, dir)
	}
	var fileStamp uint64
	if o.StampFile != "" {
		st, ok, err := readStamp(o.FS, o.StampFile)
		if err != nil {
			return nil, fmt.Errorf("%w (remove it to accept the store as it is)", err)
		}
		if ok && !initialised {
			return nil, fmt.Errorf("%w: the store %s is missing or empty but %s says it was written (stamp %d): restore the data directory from a backup, or move it aside to start an empty store", ErrStoreLost, dir, o.StampFile, st.n)
		}
		if err := checkClosed(o.FS, dir, o.StampFile, st); err != nil {
			return nil, err
		}
		if len(st.files) > 0 {
			// The listing is used up before Pebble changes any file (its
			// open removes and writes some): a crash from here on must not
			// find a listing of files that are gone for good reasons.
			if err := WriteStampFile(o.FS, o.StampFile, st.n); err != nil {
				return nil, err
			}
		}
		fileStamp = st.n
	}
	if err := o.FS.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create store dir %s: %w", dir, err)
	}
	// The store takes Pebble's directory lock itself and keeps it while it
	// swaps Pebble instances, so no other process can open the directory in
	// between; the instances see a lock that is already theirs.
	lock, err := o.FS.Lock(o.FS.PathJoin(dir, "LOCK"))
	if err != nil {
		return nil, fmt.Errorf("%w: cannot lock %s (is a fraudd server running on this data dir?): %w", ErrLocked, dir, err)
	}
	d := &DB{dir: dir, fs: o.FS, lock: lock, cache: pebble.NewCache(o.CacheBytes), log: o.Logger,
		closeWait: o.CloseWait, memTable: o.MemTableBytes, durability: o.Durability, interval: o.SyncInterval, epoch: time.Now(),
		hooks: map[int]func(){}, stopSync: make(chan struct{}), syncDone: make(chan struct{}), idle: make(chan *commitCall)}
	d.hist.seed = maphash.MakeSeed()
	if initialised {
		// Before Pebble replays the WAL: its open deletes what it replayed.
		if err := d.checkWALTail(); err != nil {
			d.cache.Unref()
			_ = lock.Close()
			return nil, err
		}
	}
	// Only a first start may create the store; see ErrManifestMissing.
	h, err := d.openHandle(initialised)
	if err != nil {
		d.cache.Unref()
		_ = lock.Close()
		if initialised && errors.Is(err, pebble.ErrDBDoesNotExist) {
			return nil, fmt.Errorf("%w in %s: restore the marker.manifest.* files (0 bytes) from a backup or the original copy, or move the directory aside to start an empty store", ErrManifestMissing, dir)
		}
		if path, ok := CorruptFile(err); ok {
			return nil, fmt.Errorf("%w: %w", ErrCorrupt, &corruptError{path: path, err: err})
		}
		return nil, fmt.Errorf("open pebble at %s: %w", dir, err)
	}
	d.h.Store(h)
	// Before the journal's replay writes: a newer build's store is left as
	// it is.
	format, err := d.checkFormat()
	if err != nil {
		close(d.stopSync)
		_ = d.closeHealthy(h)
		d.cache.Unref()
		_ = lock.Close()
		return nil, err
	}
	if err := d.replayHistJournal(h); err != nil {
		close(d.stopSync) // the writer goroutines the replay started end
		_ = d.closeHealthy(h)
		d.cache.Unref()
		_ = lock.Close()
		return nil, fmt.Errorf("replay the device history journal in %s: %w", dir, err)
	}
	go d.syncLoop()
	if format < StoreFormat {
		if err := d.putFormat(); err != nil {
			_ = d.Close()
			return nil, err
		}
	}
	if o.StampFile != "" {
		d.stamp.path = o.StampFile
		if err := d.checkStamp(fileStamp); err != nil {
			// Closed without stamping: a close that moved the stamp on
			// would accept at the next start the store refused now.
			d.stamp.path = ""
			_ = d.Close()
			return nil, err
		}
		every := o.StampEvery
		if every <= 0 {
			every = DefaultStampEvery
		}
		d.stamp.stop, d.stamp.done = make(chan struct{}), make(chan struct{})
		go d.stampLoop(every)
	}
	return d, nil
}

// hasStoreFiles reports whether dir already holds a store: any file but
// Pebble's LOCK, which an interrupted first open may leave alone.
func hasStoreFiles(fs vfs.FS, dir string) (bool, error) {
	names, err := fs.List(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return false, fmt.Errorf("list store dir %s: %w", dir, err)
	}
	for _, n := range names {
		if n != "LOCK" {
			return true, nil
		}
	}
	return false, nil
}

// Durability is the mode the store was opened with.
func (d *DB) Durability() Durability { return d.durability }

// SyncInterval is the period of the group sync.
func (d *DB) SyncInterval() time.Duration { return d.interval }

// OnSync registers fn to run on the sync loop before each group sync (and
// in Sync). Write-behind owners use it to hand over what they gathered in
// memory during the interval: fn returns once that is committed, so the
// sync that follows covers it and their crash bound is the interval's. fn
// must not call Sync. The returned func unregisters fn.
func (d *DB) OnSync(fn func()) (remove func()) {
	d.hooksMu.Lock()
	defer d.hooksMu.Unlock()
	d.hookSeq++
	id := d.hookSeq
	d.hooks[id] = fn
	return func() {
		d.hooksMu.Lock()
		delete(d.hooks, id)
		d.hooksMu.Unlock()
	}
}

func (d *DB) runHooks() {
	d.hooksMu.Lock()
	fns := make([]func(), 0, len(d.hooks))
	for id := 1; id <= d.hookSeq; id++ { // registration order
		if fn, ok := d.hooks[id]; ok {
			fns = append(fns, fn)
		}
	}
	d.hooksMu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// syncLoop is the one group sync. The WAL is one sequential log, so a
// single sync covers every commit before it (a synced commit in between
// already did). An idle store costs one atomic load per tick.
func (d *DB) syncLoop() {
	defer close(d.syncDone)
	t := time.NewTicker(d.interval)
	defer t.Stop()
	for {
		select {
		case <-d.stopSync:
			d.syncWAL()
			return
		case <-t.C:
			d.runHooks()
			d.syncWAL()
		}
	}
}

// Sync runs the flush hooks and makes every commit so far durable now
// instead of at the next tick of the sync loop (shutdown paths and tests).
func (d *DB) Sync() error {
	d.runHooks()
	d.markDirty()
	d.syncWAL()
	if !d.Available() {
		return fmt.Errorf("%w: sync failed", ErrUnavailable)
	}
	return nil
}

// clock is the time since Open in nanoseconds, never 0.
func (d *DB) clock() int64 { return int64(time.Since(d.epoch)) + 1 }

func (d *DB) markDirty() {
	if d.dirtySince.Load() == 0 {
		d.dirtySince.CompareAndSwap(0, d.clock())
	}
}

// syncWAL syncs everything committed before it begins.
func (d *DB) syncWAL() {
	h := d.h.Load()
	if h.broken.Load() || d.dirtySince.Swap(0) == 0 {
		return
	}
	if err := d.write(h, func() error { return h.db.LogData(nil, pebble.Sync) }); err != nil {
		_ = d.fail(fmt.Errorf("sync the WAL: %w", err))
		return
	}
	d.syncs.Add(1)
}

// WriteStats counts the store's writes since Open.
type WriteStats struct {
	Commits uint64 // batches committed (each one WAL record and one memtable apply)
	Keys    uint64 // key operations in them (sets, deletes, range deletes)
	Syncs   uint64 // WAL syncs: synced commits and group syncs
	// LateSyncs counts the usage commits that synced themselves because
	// the group sync ran late (Interval mode; see catchUp).
	LateSyncs uint64
	// HistChanges counts the device-history key changes WriteHist was given,
	// HistJournalled those of them that went into the journal, HistFolded
	// the keys the journal's folds wrote in place (each journalled key once
	// per window): HistJournalled − HistFolded writes saved. See
	// histjournal.go.
	HistChanges, HistJournalled, HistFolded uint64
}

// WriteStats reports the writes so far: divide a difference of two readings
// by the calls made in between to get writes per call.
func (d *DB) WriteStats() WriteStats {
	return WriteStats{Commits: d.commits.Load(), Keys: d.keys.Load(), Syncs: d.syncs.Load(), LateSyncs: d.lateSyncs.Load(),
		HistChanges: d.hist.changes.Load(), HistJournalled: d.hist.journalled.Load(), HistFolded: d.hist.foldedKeys.Load()}
}

// Metrics is Pebble's own account of the store (levels, compactions, write
// amplification) as text, for the debug endpoint.
func (d *DB) Metrics() string { return d.h.Load().db.Metrics().String() }

// PebbleMetrics is Pebble's own account of the store, for benchmarks that
// tune its options.
func (d *DB) PebbleMetrics() *pebble.Metrics { return d.h.Load().db.Metrics() }

// counted records one committed batch in WriteStats.
func (d *DB) counted(b *pebble.Batch, synced bool) {
	d.commits.Add(1)
	d.keys.Add(uint64(b.Count()))
	if synced {
		d.syncs.Add(1)
	}
}

// batch is a Pebble batch with the instance it was made on.
type batch struct {
	*pebble.Batch
	h *handle
}

// newBatch starts a batch on the current instance.
func (d *DB) newBatch() batch {
	h := d.h.Load()
	return batch{h.db.NewBatch(), h}
}

// commit applies a batch durably (fsync) and closes it.
func (d *DB) commit(b batch) error { return d.apply(b, pebble.Sync) }

// commitBehind applies a batch without waiting for fsync; the sync loop
// makes it durable within Options.SyncInterval. For stores nobody waits on,
// and for usage increments in Interval mode, so that fsyncs do not multiply
// with commits.
func (d *DB) commitBehind(b batch) error {
	if err := d.apply(b, pebble.NoSync); err != nil {
		return err
	}
	d.markDirty()
	return nil
}

// maxLag is how old an unsynced commit may grow, in SyncIntervals, before
// usage increments stop being answered ahead of the sync.
const maxLag = 2

// catchUp keeps Interval mode's bound when the group sync runs late (a
// stalled disk, a starved goroutine): once the oldest unsynced commit is
// more than maxLag intervals old, it syncs before returning, so the quota
// committer's answers wait for the disk as in Strict mode until the loop
// has caught up. Without it a slow fsync would let the unsynced window grow
// with it. A failed sync marks the store unavailable (what was committed
// stays committed).
func (d *DB) catchUp() {
	ds := d.dirtySince.Load()
	if ds == 0 || d.clock()-ds <= int64(maxLag*d.interval) {
		return
	}
	d.lateSyncs.Add(1)
	if now, last := d.clock(), d.lastLateLog.Load(); last == 0 || now-last > int64(time.Minute) {
		if d.lastLateLog.CompareAndSwap(last, now) {
			d.log.Warn("storage: the group sync is late; counted calls wait for the disk until it catches up",
				"unsynced_for", time.Duration(d.clock()-ds).Round(time.Millisecond), "sync_interval", d.interval)
		}
	}
	d.syncWAL()
}

// AnsweredAhead tells the store that a write was acknowledged before its
// commit and waits in memory for the next group sync's hooks (OnSync): the
// lag checks (AnswerAhead, catchUp) then count from the oldest such write,
// as from an unsynced commit. Without it a write that lingers before its
// commit would start the clock only once committed, so a stalled sync
// would be noticed an interval later. One atomic load when already dirty.
func (d *DB) AnsweredAhead() { d.markDirty() }

// AnswerAhead reports whether a usage increment may be answered before
// ApplyUsage has committed it: in Interval mode, while the store is healthy
// and neither the group sync nor a usage commit under way is more than
// maxLag intervals late. A commit without a sync puts the increment only in
// Pebble's WAL buffer, in this process's memory, until the next group sync
// writes and syncs it, so waiting for that commit protects the answer
// against no crash, not even kill -9: the crash bound is the group sync's
// either way. The lag checks keep that bound when the disk or Pebble
// stalls: the increments then wait for their commit (and, through catchUp,
// for the sync) as in Strict mode, until the store has caught up. Strict
// mode never answers ahead.
func (d *DB) AnswerAhead() bool {
	if d.durability != Interval || !d.Available() {
		return false
	}
	now, lag := d.clock(), int64(maxLag*d.interval)
	if ds := d.dirtySince.Load(); ds != 0 && now-ds > lag {
		return false
	}
	us := d.usageSince.Load()
	return us == 0 || now-us <= lag
}

// apply commits b on its instance.
func (d *DB) apply(b batch, opts *pebble.WriteOptions) error {
	if err := d.writable(b.h); err != nil {
		_ = b.Close() // never handed to Pebble's pipeline
		return err
	}
	c := commits.Get().(*commitCall)
	c.b, c.opts = b.Batch, opts
	if err := d.wait(b.h, c); err != nil {
		// A batch whose commit failed is left unclosed: it may still be in
		// the stalled pipeline.
		return err
	}
	d.counted(b.Batch, opts == pebble.Sync)
	_ = b.Close()
	return nil
}

// writable refuses writes to an instance that is broken or was replaced.
func (d *DB) writable(h *handle) error {
	switch {
	case h.broken.Load():
		return d.brokenErr(h)
	case h != d.h.Load():
		return fmt.Errorf("%w: the store was reopened meanwhile; retry", ErrUnavailable)
	}
	return nil
}

// brokenErr is the error of an operation on h, an instance a fatal error
// broke: an ErrUnavailable that wraps the first fatal cause (a full disk's
// ENOSPC, so errors.Is finds it and the text names it). Only a serving
// store says it reopens at the next health probe: at start-up nobody
// probes, the start stops on it.
func (d *DB) brokenErr(h *handle) error {
	what := "a fatal write error stopped the store"
	if cause := h.fatalCause(); cause != nil {
		if d.serving.Load() {
			return fmt.Errorf("%w: %s (%w); it reopens at the next health probe", ErrUnavailable, what, cause)
		}
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, what, cause)
	}
	if d.serving.Load() {
		return fmt.Errorf("%w: %s; it reopens at the next health probe", ErrUnavailable, what)
	}
	return fmt.Errorf("%w: %s", ErrUnavailable, what)
}

// write runs a Pebble write on its own goroutine and waits for it unless
// the instance breaks first: after a fatal WAL error Pebble can leave later
// commits waiting forever on its stalled pipeline, and the caller (an actor)
// must not wait with them. Any error marks the store unavailable.
func (d *DB) write(h *handle, fn func() error) error {
	c := commits.Get().(*commitCall)
	c.fn = fn
	return d.wait(h, c)
}

// commitCall is one write handed to a goroutine (pooled: commits are
// frequent, and the goroutine hop should cost no more than it must).
type commitCall struct {
	h    *handle
	b    *pebble.Batch
	opts *pebble.WriteOptions
	fn   func() error
	done chan error
}

var commits = sync.Pool{New: func() any { return &commitCall{done: make(chan error, 1)} }}

func (c *commitCall) run() {
	if c.b != nil {
		c.done <- c.h.run(c.commit)
		return
	}
	c.done <- c.h.run(c.fn)
}

func (c *commitCall) commit() error { return c.b.Commit(c.opts) }

// writer runs c, then the writes handed to it while it waits idle, until the
// store closes. Writers outlive their writes so that a commit does not pay
// for a new goroutine and its stack's growth (Pebble's commit path is deep);
// one that a stalled pipeline keeps is simply not idle, and the next write
// starts another.
func (d *DB) writer(c *commitCall) {
	for {
		c.run() // c belongs to its waiter again once answered
		select {
		case c = <-d.idle:
		case <-d.stopSync:
			return
		}
	}
}

// wait runs c on a writer goroutine and waits for it or for h to break.
func (d *DB) wait(h *handle, c *commitCall) error {
	c.h = h
	select {
	case d.idle <- c: // a writer that finished its last write takes it
	default:
		go d.writer(c)
	}
	var err error
	select {
	case err = <-c.done:
	case <-h.dead:
		select {
		case err = <-c.done:
		default:
			// c stays with its goroutine, never back in the pool.
			return d.brokenErr(h)
		}
	}
	c.h, c.b, c.opts, c.fn = nil, nil, nil, nil
	commits.Put(c)
	if err != nil {
		return d.fail(fmt.Errorf("commit: %w", err))
	}
	return nil
}

// Close flushes and closes the store. The DB must not be used afterwards. An
// instance broken by a fatal error is fenced off the files and closed as far
// as it will within Options.CloseWait.
func (d *DB) Close() error {
	// Fold the journal so the next start has nothing to replay (it would
	// replay what is left, so a failure here loses nothing).
	d.stopStamp()
	_ = d.settleHist()
	if d.stamp.path != "" && !d.h.Load().broken.Load() {
		// The last write before the closing flush: the newest table then
		// holds the newest stamp, so a copy whose MANIFEST lost that
		// flush's edit is behind its stamp file.
		if err := d.bumpStamp(); err != nil {
			d.log.Warn("storage: store stamp not bumped at close", "err", err)
		}
	}
	close(d.stopSync)
	<-d.syncDone
	d.reopenMu.Lock()
	defer d.reopenMu.Unlock()
	h := d.h.Load()
	var err error
	if h.broken.Load() {
		d.retire(h)
		err = errors.New("storage was broken by a fatal write error; its last unsynced writes were not flushed")
		if cause := h.fatalCause(); cause != nil {
			err = fmt.Errorf("storage was broken by a fatal write error (%w); its last unsynced writes were not flushed", cause)
		}
	} else if cerr := d.closeHealthy(h); cerr != nil {
		err = fmt.Errorf("close pebble: %w", cerr)
	} else if d.stamp.path != "" {
		if serr := d.stampClosed(); serr != nil {
			d.log.Warn("storage: the closed store's files not listed in its stamp file", "err", serr)
		}
	}
	d.cache.Unref()
	if lerr := d.lock.Close(); lerr != nil && err == nil {
		err = fmt.Errorf("unlock store: %w", lerr)
	}
	return err
}

// closeHealthy flushes the memtables (so the next start replays no WAL and
// every record sits in a table) and closes the instance, giving up if a
// write fails (the instance then breaks and is fenced off).
func (d *DB) closeHealthy(h *handle) error {
	done := make(chan error, 1)
	go func() {
		done <- shielded(func() error {
			ferr := h.db.Flush()
			if err := h.db.Close(); err != nil {
				return err
			}
			return ferr
		})
	}()
	select {
	case err := <-done:
		return err
	case <-h.dead:
		d.retire(h)
		if cause := h.fatalCause(); cause != nil {
			return fmt.Errorf("a write failed while closing: %w", cause)
		}
		return errors.New("a write failed while closing")
	}
}

// Serving tells the store that start-up is over: from now on it logs its
// failures at ERROR itself, since no start-up code reports them.
func (d *DB) Serving() { d.serving.Store(true) }

// Stopping tells the store that its stop has begun and nothing probes it
// any more: as at start-up, a failure from now on is reported by the stop
// (Close returns it, with the first fatal cause), so the store logs it at
// DEBUG only, and does not say it reopens at the next probe.
func (d *DB) Stopping() { d.serving.Store(false) }

// failLevel is the level of a failure the store logs: DEBUG while start-up
// code still reports failures itself, ERROR afterwards.
func (d *DB) failLevel() slog.Level {
	if d.serving.Load() {
		return slog.LevelError
	}
	return slog.LevelDebug
}

// Available reports whether the store is readable and writable as far as the
// last operations could tell.
func (d *DB) Available() bool {
	return !d.failed.Load() && !d.h.Load().broken.Load() && d.corrupt.Load() == nil
}

var probeKey = []byte{prefixMeta, 'p', 'r', 'o', 'b', 'e'}

// Probe writes and reads back a marker record with Sync, and records the
// outcome in Available. Start-up code runs it periodically, so an unreadable
// store is noticed even when no request has touched it yet, and a store
// whose Pebble instance a fatal error stopped (a full disk) is reopened here
// once the disk takes writes again.
func (d *DB) Probe() error {
	if p := d.corrupt.Load(); p != nil {
		return fmt.Errorf("%w: %w: store file %s is corrupt; restore the data directory from a backup", ErrUnavailable, ErrCorrupt, *p)
	}
	if h := d.h.Load(); h.broken.Load() {
		if err := d.reopen(h); err != nil {
			return d.fail(fmt.Errorf("reopen after a fatal write error: %w", err))
		}
	}
	b := d.newBatch()
	_ = b.Set(probeKey, []byte{1}, nil)
	if err := d.commit(b); err != nil {
		return fmt.Errorf("probe write: %w", err)
	}
	v, err := d.get(probeKey)
	if err != nil {
		return fmt.Errorf("probe read: %w", err)
	}
	if len(v) != 1 || v[0] != 1 {
		return d.fail(errors.New("probe read back a different value"))
	}
	if d.failed.Swap(false) {
		d.log.Info("storage available again")
	}
	return nil
}

// fail marks the store unavailable and wraps err with ErrUnavailable. An
// error that names a corrupt file says which.
func (d *DB) fail(err error) error {
	if errors.Is(err, ErrUnavailable) {
		d.failed.Store(true)
		return err
	}
	if path, ok := CorruptFile(err); ok {
		d.markCorrupt(path)
		err = fmt.Errorf("%w: %w", ErrCorrupt, &corruptError{path: path, err: err})
	}
	if !d.failed.Swap(true) {
		d.log.Log(context.Background(), d.failLevel(), "storage marked unavailable", "err", err)
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// get reads one value, copied out of Pebble's buffer.
func (d *DB) get(key []byte) ([]byte, error) {
	h := d.h.Load()
	if h.broken.Load() {
		return nil, d.brokenErr(h)
	}
	var out []byte
	err := h.run(func() error {
		v, closer, err := h.db.Get(key)
		if err != nil {
			return err
		}
		out = append([]byte(nil), v...)
		return closer.Close()
	})
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, d.fail(fmt.Errorf("get: %w", err))
	}
	return out, nil
}

// VerifyTables reads every table's metadata (footer, index, properties), so
// a start finds a damaged table at once rather than at the first read that
// meets it. Data blocks are checked when they are read.
func (d *DB) VerifyTables() error {
	h := d.h.Load()
	if h.broken.Load() {
		return d.brokenErr(h)
	}
	if err := h.run(func() error { _, err := h.db.SSTables(pebble.WithProperties()); return err }); err != nil {
		return d.fail(fmt.Errorf("verify tables: %w", err))
	}
	return nil
}

// Checkpoint writes a consistent copy of the store into dir, which must not
// exist: every commit acknowledged before the call, with the WAL synced
// first, so write-behind commits up to now are in it too. Tables are hard
// links when dir is on the same filesystem (they are immutable), copies
// otherwise; Pebble syncs the copy before it returns. The copy opens as a
// store of its own.
func (d *DB) Checkpoint(dir string) error {
	// What write-behind owners gathered in memory is committed first, so
	// the copy holds everything acknowledged so far (see OnSync).
	d.runHooks()
	h := d.h.Load()
	if err := d.writable(h); err != nil {
		return err
	}
	// Not through write: a failure to write the copy (its disk is full)
	// says nothing about the store. A failure of the store's own WAL sync
	// breaks the instance as any write does.
	done := make(chan error, 1)
	go func() { done <- h.run(func() error { return h.db.Checkpoint(dir, pebble.WithFlushedWAL()) }) }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("checkpoint into %s: %w", dir, err)
		}
		return nil
	case <-h.dead:
		return d.brokenErr(h)
	}
}
