package storage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// ErrCorrupt is returned (wrapped, with the file's path) when Pebble finds a
// store file corrupt: a checksum that does not match, a table it cannot
// read. The store stays unavailable until the data directory is restored.
var ErrCorrupt = errors.New("store file is corrupt")

// CorruptFile returns the path of the store file err reports corrupt.
func CorruptFile(err error) (string, bool) {
	if info := pebble.ExtractDataCorruptionInfo(err); info != nil {
		return info.Path, true
	}
	var ce *corruptError
	if errors.As(err, &ce) {
		return ce.path, true
	}
	return "", false
}

// corruptError carries the path of a corrupt file through error wrapping
// where Pebble's own detail is lost.
type corruptError struct {
	path string
	err  error
}

func (e *corruptError) Error() string {
	return fmt.Sprintf("store file %s is corrupt: %s", e.path, cleanPebbleMessage(e.err.Error()))
}

func (e *corruptError) Unwrap() error { return e.err }

// cleanPebbleMessage drops the marker Pebble joins to a corruption error, so
// a log line or a start-up failure stays one readable line.
func cleanPebbleMessage(s string) string {
	return strings.ReplaceAll(s, "\n<corruption detail carrier>", "")
}

func (d *DB) markCorrupt(path string) {
	if d.corrupt.CompareAndSwap(nil, &path) {
		d.log.Log(context.Background(), d.failLevel(), "storage: a store file is corrupt; the store stays unavailable until the data directory is restored from a backup", "file", path)
	}
}

// handle is one Pebble instance over the store's directory.
type handle struct {
	db  *pebble.DB
	gen int
	// broken is set when Pebble hit a fatal error (its Fatalf, or a panic in
	// a write): its commit pipeline may be unusable ("horked", in its own
	// words), so nothing is written to it any more.
	broken atomic.Bool
	dead   chan struct{} // closed when broken is set
	once   sync.Once
	// fenced freezes the instance's file operations (writes park, reads
	// fail; see handleFS), as if its process had died: set before a
	// replacement opens the same files.
	fenced atomic.Bool
	// closing is closed when the instance's Close returned (under reopenMu).
	closing chan struct{}
	log     *slog.Logger
	store   *DB
	stalled atomic.Int32 // goroutines parked by a failed write (see handleFS)
	// cause is the first fatal error that broke the instance (a write that
	// failed, Pebble's Fatalf), set before broken: the errors the store
	// returns for a broken instance wrap it, so a start that fails on a
	// full disk says so in its one line.
	cause atomic.Pointer[error]
}

// setCause records err as the instance's fatal cause unless one was
// recorded first. Call before breakDown.
func (h *handle) setCause(err error) {
	if err != nil && !errors.Is(err, errFenced) {
		h.cause.CompareAndSwap(nil, &err)
	}
}

// fatalCause is the first fatal error recorded, nil when none was.
func (h *handle) fatalCause() error {
	if p := h.cause.Load(); p != nil {
		return *p
	}
	return nil
}

func (h *handle) breakDown() {
	h.broken.Store(true)
	h.once.Do(func() { close(h.dead) })
}

// run calls a Pebble operation and turns a panic in it (Pebble's Fatalf, or
// a panic on a stalled pipeline) into an error that breaks the instance.
func (h *handle) run(fn func() error) error {
	err, p := guarded(fn)
	if p != nil {
		err := fmt.Errorf("%w: %v", errFatal, p)
		h.setCause(err)
		h.breakDown()
		return err
	}
	return err
}

// errFatal marks an error that came from a panic in Pebble.
var errFatal = errors.New("pebble fatal error")

// guarded calls fn, recovering a panic. Its frame on the stack tells
// pebbleLogger.Fatalf that a panic will be caught.
//
//go:noinline
func guarded(fn func() error) (err error, p any) {
	defer func() { p = recover() }()
	return fn(), nil
}

// shielded calls fn, recovering a panic, for Pebble's Open and the Close of
// a failed instance: a Fatalf under them parks instead of panicking, since
// unwinding a half-built (or half-closed) instance would leave its
// background goroutines working on broken state.
//
//go:noinline
func shielded(fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", errFatal, p)
		}
	}()
	return fn()
}

var guardedName = runtime.FuncForPC(reflect.ValueOf(guarded).Pointer()).Name()

// underGuard reports whether the calling goroutine runs inside guarded.
func underGuard() bool {
	pcs := make([]uintptr, 256)
	n := runtime.Callers(3, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		if f.Function == guardedName {
			return true
		}
		if !more {
			return false
		}
	}
}

// openHandle opens a Pebble instance over the store's directory.
func (d *DB) openHandle(errorIfNotExists bool) (*handle, error) {
	h := &handle{dead: make(chan struct{}), log: d.log, store: d}
	d.gens++
	h.gen = d.gens
	opts := &pebble.Options{
		Cache:            d.cache,
		MemTableSize:     uint64(d.memTable),
		FS:               handleFS{FS: d.fs, h: h, dir: d.dir},
		Logger:           pebbleLogger{l: d.log.With("component", "pebble"), h: h},
		ErrorIfNotExists: errorIfNotExists,
		EventListener: &pebble.EventListener{
			// Pebble's default calls Fatalf, which would end the process
			// from whichever goroutine read the block; the read gets an
			// error instead and the store is marked corrupt.
			DataCorruption: func(info pebble.DataCorruptionInfo) { d.markCorrupt(info.Path) },
		},
	}
	// Opened on its own goroutine: a fatal error in Open parks it (see
	// shielded), and this call returns when the instance breaks.
	res := make(chan error, 1)
	go func() {
		res <- shielded(func() error {
			db, err := pebble.Open(d.dir, opts)
			h.db = db
			return err
		})
	}()
	var err error
	select {
	case err = <-res:
	case <-h.dead:
		err = errors.New("pebble hit a fatal error while opening")
		if cause := h.fatalCause(); cause != nil {
			err = fmt.Errorf("pebble hit a fatal error while opening: %w", cause)
		}
	}
	if err == nil && h.db == nil {
		err = errors.New("pebble open returned no instance")
	}
	if err != nil {
		// Whatever the failed open started must not touch the files of the
		// next attempt.
		h.fenced.Store(true)
		h.breakDown()
		return nil, err
	}
	return h, nil
}

// reopen replaces old, a broken instance, with a new one over the same files.
func (d *DB) reopen(old *handle) error {
	d.reopenMu.Lock()
	defer d.reopenMu.Unlock()
	if d.h.Load() != old {
		return nil // replaced meanwhile
	}
	// No device-history write or fold may run from the moment the new
	// instance is current until its journal is replayed: they would act on
	// an overlay that no longer matches the store (histjournal.go).
	d.hist.writeMu.Lock()
	defer d.hist.writeMu.Unlock()
	d.hist.foldMu.Lock()
	defer d.hist.foldMu.Unlock()
	d.retire(old)
	h, err := d.openHandle(true)
	if err != nil {
		return err
	}
	// The overlay may hold changes whose journal entries the WAL lost:
	// it starts over from what the journal kept, before anyone reads.
	replay, err := d.readHistJournal(h)
	if err != nil {
		// Broken, the instance is replaced again at the next probe, which
		// reads the journal again; until then the store is unavailable.
		h.breakDown()
		d.h.Store(h)
		return err
	}
	d.hist.startReplay(replay)
	d.h.Store(h)
	d.log.Warn("storage reopened after a fatal write error; synced writes were replayed from the WAL", "instance", h.gen)
	return d.finishReplay(replay)
}

// retire fences a broken instance off the files and closes it as far as it
// closes within closeWait. An instance whose Close does not return (a
// stalled commit pipeline holds its lock) is left behind: fenced, it can no
// longer change the files the next instance opens.
func (d *DB) retire(h *handle) {
	h.breakDown()
	h.fenced.Store(true)
	if h.closing != nil {
		return // waited for once already
	}
	h.closing = make(chan struct{})
	go func() {
		defer close(h.closing)
		_ = shielded(h.db.Close) // errors expected: it is fenced
	}()
	select {
	case <-h.closing:
	case <-time.After(d.closeWait):
		d.log.Warn("storage: a failed Pebble instance did not close in time; left behind, fenced off the files", "instance", h.gen)
	}
}

// pebbleLogger routes Pebble's printf-style logging into slog.
type pebbleLogger struct {
	l *slog.Logger
	h *handle
}

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug(cleanPebbleMessage(fmt.Sprintf(format, args...)))
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	msg := cleanPebbleMessage(fmt.Sprintf(format, args...))
	if p.h.fenced.Load() {
		p.l.Debug(msg, "instance", p.h.gen, "retired", true)
		return
	}
	p.l.Log(context.Background(), p.level(), msg)
}

// level is ERROR once the store serves; at start-up WARN, since a failure
// then is reported by the start-up code in its own line.
func (p pebbleLogger) level() slog.Level {
	if p.h.store.serving.Load() {
		return slog.LevelError
	}
	return slog.LevelWarn
}

// Fatalf is called on invariant violations and on write errors Pebble cannot
// recover from; Pebble expects it not to return. Under guarded it panics and
// the caller gets an error. On one of Pebble's own goroutines a panic would
// end the process, so that goroutine is parked for good instead: its
// instance is broken, and the next Probe replaces it.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := cleanPebbleMessage(fmt.Sprintf(format, args...))
	if !p.h.fenced.Load() {
		p.l.Log(context.Background(), p.level(), msg, "fatal", true, "instance", p.h.gen)
		p.h.setCause(errors.New(msg))
	}
	p.h.breakDown()
	if underGuard() {
		panic(msg)
	}
	if !p.h.fenced.Load() {
		if p.h.store.serving.Load() {
			p.l.Warn("storage: a Pebble goroutine stopped after a fatal error; the store reopens at the next health probe", "instance", p.h.gen)
		} else {
			p.l.Warn("storage: a Pebble goroutine stopped after a fatal error", "instance", p.h.gen)
		}
	}
	select {}
}

// iter is a Pebble iterator whose calls cannot panic: a panic in Pebble
// (a corrupt block, a fatal error) ends the iteration with an error.
type iter struct {
	d   *DB
	h   *handle
	it  *pebble.Iterator
	err error
}

// newIter opens an iterator over [lo, hi) on the current instance.
func (d *DB) newIter(lo, hi []byte) (*iter, error) { return d.newIterOn(d.h.Load(), lo, hi) }

// newIterOn opens an iterator over [lo, hi) on instance h (one not yet
// current, during a reopen).
func (d *DB) newIterOn(h *handle, lo, hi []byte) (*iter, error) {
	if h.broken.Load() {
		return nil, d.brokenErr(h)
	}
	i := &iter{d: d, h: h}
	err := h.run(func() error {
		var err error
		i.it, err = h.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		return err
	})
	if err != nil {
		return nil, d.fail(fmt.Errorf("iterate: %w", err))
	}
	return i, nil
}

func (i *iter) step(ok *bool) {
	if p := recover(); p != nil {
		i.err = fmt.Errorf("%w: %v", errFatal, p)
		i.h.setCause(i.err)
		i.h.breakDown()
		*ok = false
	}
}

func (i *iter) First() (ok bool) {
	defer i.step(&ok)
	return i.err == nil && i.it.First()
}

func (i *iter) Last() (ok bool) {
	defer i.step(&ok)
	return i.err == nil && i.it.Last()
}

func (i *iter) Next() (ok bool) {
	defer i.step(&ok)
	return i.err == nil && i.it.Next()
}

func (i *iter) Prev() (ok bool) {
	defer i.step(&ok)
	return i.err == nil && i.it.Prev()
}

func (i *iter) SeekGE(k []byte) (ok bool) {
	defer i.step(&ok)
	return i.err == nil && i.it.SeekGE(k)
}

// Key is the current key; valid until the next move.
func (i *iter) Key() []byte { return i.it.Key() }

// Value is the current value; valid until the next move. An error (a block
// that cannot be read) ends the iteration: return it.Err.
func (i *iter) Value() (v []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			i.err = fmt.Errorf("%w: %v", errFatal, p)
			i.h.setCause(i.err)
			i.h.breakDown()
			v, err = nil, i.err
		}
	}()
	v, err = i.it.ValueAndErr()
	if err != nil {
		i.err = err
	}
	return v, err
}

// Err is the iteration's failure, as an ErrUnavailable that marks the store
// unavailable; nil when it only ran out of keys.
func (i *iter) Err(what string) error {
	if i.err == nil {
		ok := true
		func() {
			defer i.step(&ok)
			if err := i.it.Error(); err != nil {
				i.err = err
			}
		}()
	}
	if i.err == nil {
		return nil
	}
	return i.d.fail(fmt.Errorf("%s: %w", what, i.err))
}

// Close releases the iterator.
func (i *iter) Close() {
	ok := true
	defer i.step(&ok)
	_ = i.it.Close()
}
