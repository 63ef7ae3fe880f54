package storage

import (
	"errors"
	"fmt"
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
// first-touch reads of the same records.
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
}

// DB is the service's store. It is safe for concurrent use; Pebble serialises
// writes internally, and each entity's writes come from its one owning actor.
type DB struct {
	db     *pebble.DB
	cache  interface{ Unref() }
	failed atomic.Bool
	// broken is set when Pebble hit a fatal write error. Its commit pipeline is
	// unusable from then on ("horked", in its own words), so the store stays
	// unavailable until the process restarts instead of crashing it: the
	// service keeps answering 503 storage_unavailable and /api/status says why.
	broken     atomic.Bool
	log        *slog.Logger
	durability Durability
	interval   time.Duration

	// dirtySince is when the oldest commit not covered by a sync begun
	// since was made (d.clock), 0 when there is none. Set by commits without
	// a sync, cleared by syncWAL as its sync begins.
	dirtySince atomic.Int64
	epoch      time.Time
	// Counters behind WriteStats.
	commits, keys, syncs, lateSyncs atomic.Uint64
	lastLateLog                     atomic.Int64

	hooksMu sync.Mutex
	hooks   map[int]func()
	hookSeq int

	stopSync chan struct{}
	syncDone chan struct{}
}

// Open opens (or creates) the store in dir.
func Open(dir string, o Options) (*DB, error) {
	if o.CacheBytes == 0 {
		o.CacheBytes = 64<<20 + 2*memTableSize
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.SyncInterval <= 0 {
		o.SyncInterval = DefaultSyncInterval
	}
	cache := pebble.NewCache(o.CacheBytes)
	opts := &pebble.Options{
		Cache:        cache,
		FS:           o.FS,
		Logger:       pebbleLogger{o.Logger.With("component", "pebble")},
		MemTableSize: memTableSize,
	}
	fs := o.FS
	if fs == nil {
		fs = vfs.Default
	}
	initialised, err := hasStoreFiles(fs, dir)
	if err != nil {
		cache.Unref()
		return nil, err
	}
	// Only a first start may create the store; see ErrManifestMissing.
	opts.ErrorIfNotExists = initialised
	pdb, err := pebble.Open(dir, opts)
	if err != nil {
		cache.Unref()
		if initialised && errors.Is(err, pebble.ErrDBDoesNotExist) {
			return nil, fmt.Errorf("%w in %s: restore the marker.manifest.* files (0 bytes) from a backup or the original copy, or move the directory aside to start an empty store", ErrManifestMissing, dir)
		}
		return nil, fmt.Errorf("open pebble at %s: %w", dir, err)
	}
	d := &DB{db: pdb, cache: cache, log: o.Logger, durability: o.Durability, interval: o.SyncInterval, epoch: time.Now(),
		hooks: map[int]func(){}, stopSync: make(chan struct{}), syncDone: make(chan struct{})}
	go d.syncLoop()
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
	if d.broken.Load() || d.dirtySince.Swap(0) == 0 {
		return
	}
	if err := d.guard(func() error { return d.db.LogData(nil, pebble.Sync) }); err != nil {
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
}

// WriteStats reports the writes so far: divide a difference of two readings
// by the calls made in between to get writes per call.
func (d *DB) WriteStats() WriteStats {
	return WriteStats{Commits: d.commits.Load(), Keys: d.keys.Load(), Syncs: d.syncs.Load(), LateSyncs: d.lateSyncs.Load()}
}

// Metrics is Pebble's own account of the store (levels, compactions, write
// amplification) as text, for the debug endpoint.
func (d *DB) Metrics() string { return d.db.Metrics().String() }

// PebbleMetrics is Pebble's own account of the store, for benchmarks that
// tune its options.
func (d *DB) PebbleMetrics() *pebble.Metrics { return d.db.Metrics() }

// counted records one committed batch in WriteStats.
func (d *DB) counted(b *pebble.Batch, synced bool) {
	d.commits.Add(1)
	d.keys.Add(uint64(b.Count()))
	if synced {
		d.syncs.Add(1)
	}
}

// commitBehind applies a batch without waiting for fsync; the sync loop
// makes it durable within Options.SyncInterval. For stores nobody waits on,
// and for usage increments in Interval mode, so that fsyncs do not multiply
// with commits.
func (d *DB) commitBehind(b *pebble.Batch) error {
	if d.broken.Load() {
		return fmt.Errorf("%w: broken", ErrUnavailable)
	}
	if err := d.guard(func() error { return b.Commit(pebble.NoSync) }); err != nil {
		return d.fail(fmt.Errorf("commit: %w", err))
	}
	d.counted(b, false)
	d.markDirty()
	_ = b.Close()
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

// Close flushes and closes the store. The DB must not be used afterwards. A
// broken store is left to the process exit: closing it could wait forever on
// its stalled commit pipeline.
func (d *DB) Close() error {
	close(d.stopSync)
	<-d.syncDone
	if d.broken.Load() {
		return errors.New("storage was broken by a fatal write error; not flushed")
	}
	err := d.db.Close()
	d.cache.Unref()
	if err != nil {
		return fmt.Errorf("close pebble: %w", err)
	}
	return nil
}

// Available reports whether the store is readable and writable as far as the
// last operations could tell.
func (d *DB) Available() bool { return !d.failed.Load() && !d.broken.Load() }

// Probe writes and reads back a marker record with Sync, and records the
// outcome in Available. Start-up code runs it periodically, so an unreadable
// store is noticed even when no request has touched it yet.
func (d *DB) Probe() error {
	if d.broken.Load() {
		return fmt.Errorf("%w: broken by an earlier fatal write error; restart required", ErrUnavailable)
	}
	k := []byte{prefixMeta, 'p', 'r', 'o', 'b', 'e'}
	if err := d.guard(func() error { return d.db.Set(k, []byte{1}, pebble.Sync) }); err != nil {
		return d.fail(fmt.Errorf("probe write: %w", err))
	}
	d.commits.Add(1)
	d.keys.Add(1)
	d.syncs.Add(1)
	v, closer, err := d.db.Get(k)
	if err != nil {
		return d.fail(fmt.Errorf("probe read: %w", err))
	}
	ok := len(v) == 1 && v[0] == 1
	closer.Close()
	if !ok {
		return d.fail(errors.New("probe read back a different value"))
	}
	d.failed.Store(false)
	return nil
}

// fail marks the store unavailable and wraps err with ErrUnavailable.
func (d *DB) fail(err error) error {
	if !d.failed.Swap(true) {
		d.log.Error("storage marked unavailable", "err", err)
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// errFatal marks an error that came from Pebble's Fatalf.
var errFatal = errors.New("pebble fatal error")

// guard runs a Pebble write and turns its Fatalf panic into an error that
// breaks the store for good (see DB.broken).
func (d *DB) guard(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			d.broken.Store(true)
			err = fmt.Errorf("%w: %v", errFatal, r)
		}
	}()
	return fn()
}

// get reads one value, copied out of Pebble's buffer.
func (d *DB) get(key []byte) ([]byte, error) {
	if d.broken.Load() {
		return nil, fmt.Errorf("%w: broken", ErrUnavailable)
	}
	v, closer, err := d.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, d.fail(fmt.Errorf("get: %w", err))
	}
	out := append([]byte(nil), v...)
	closer.Close()
	return out, nil
}

// commit applies a batch durably (fsync) and closes it.
func (d *DB) commit(b *pebble.Batch) error {
	if d.broken.Load() {
		return fmt.Errorf("%w: broken", ErrUnavailable)
	}
	if err := d.guard(func() error { return b.Commit(pebble.Sync) }); err != nil {
		return d.fail(fmt.Errorf("commit: %w", err))
	}
	d.counted(b, true)
	// A batch whose commit panicked is left unclosed: it may still be in the
	// stalled pipeline.
	_ = b.Close()
	return nil
}

// pebbleLogger routes Pebble's printf-style logging into slog.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any)  { p.l.Debug(fmt.Sprintf(format, args...)) }
func (p pebbleLogger) Errorf(format string, args ...any) { p.l.Error(fmt.Sprintf(format, args...)) }
func (p pebbleLogger) Fatalf(format string, args ...any) {
	// Pebble calls Fatalf on invariant violations; it expects the process to end.
	p.l.Error(fmt.Sprintf(format, args...), "fatal", true)
	panic(fmt.Sprintf(format, args...))
}
