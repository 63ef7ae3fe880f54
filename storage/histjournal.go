package storage

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// The device-history journal. A live evaluation changes a few history
// records (the device, the end-user account, the address, and their index
// entries), and the devicehist shards flush what changed once per sync
// interval. Written in place, every flush puts each changed key into
// Pebble's memtable at a random place in a skiplist of some hundred
// thousand entries, a cache miss per level: the largest item of the live
// path's CPU profile when the same devices and accounts come back within
// seconds (a session's several checks, a bot's many).
//
// So WriteHist writes a key in place only the first time it changes in a
// window of a few seconds. A key that changes again within the window goes
// into the journal instead: one entry per WriteHist, a single key at the
// end of the key space whose value holds every such change. The overlay, in
// memory, names every key changed in the window, with the newest value of
// those the journal holds (LoadHist reads them there). At the end of the
// window a fold writes each journalled key in place once, however often it
// changed, and deletes the journal entries in the same batch. A key that
// changes once per window costs what it cost before; one that changes n
// times costs two writes instead of n. (A key named in the overlay always
// goes to the journal: written in place, it could be overwritten by the
// fold of an older journalled value.)
//
// The crash bound is the one of every write-behind store: the writes are
// committed without a sync and made durable by the next group sync. Open
// (and a reopen after a fatal write error) folds whatever the journal still
// holds before anything reads the records, so a crash loses nothing the WAL
// kept. Journal values are full records, never deltas, and every journal
// entry is newer than the in-place write of its keys, so replaying in order
// leaves the newest.
//
// Readers that iterate over the records or their indexes (ExpiredHist,
// RecentHistDevices, HistOf, HistKeys) fold first, so they see every
// change WriteHist returned for.
//
// Key: prefixHistLog | sequence (uint64 BE). Value: histLogVersion, then
// per change: histLogSet | uvarint key length | key | uvarint value length |
// value, or histLogDelete | uvarint key length | key.

const (
	histLogVersion byte = 1
	histLogSet     byte = 1
	histLogDelete  byte = 2

	// maxHistLogKey bounds a journalled key: prefix, kind, day, customer
	// (length-prefixed) and the longest identity, with room to spare.
	maxHistLogKey = 256
	// maxHistLogValue bounds a journalled value (a record holds bounded
	// lists; the largest is a few KB).
	maxHistLogValue = 1 << 20
)

// When a window ends (and its fold runs): whichever comes first.
const (
	histFoldEvery = 2 * time.Second
	histFoldKeys  = 64 << 10 // distinct keys changed in the window
	histFoldBytes = 8 << 20  // journal bytes in the window
)

// histLatest is the newest value of a journalled key (a slice of the
// journal entry it came in), or its delete.
type histLatest struct {
	val []byte
	del bool
}

// histWindow is the overlay of one window: a Bloom filter of the keys
// changed in it (a false positive only sends a key to the journal, which is
// always safe) and the newest version of the journalled ones. Its keys and
// entries come from chunks it drops as a whole at the fold, so a change
// allocates nothing of its own.
type histWindow struct {
	seen     []uint64 // histBloomBits bits
	distinct int      // changes that set a new bit: about the keys changed
	keys     map[string]*histLatest
	arena    []byte       // the current chunk of key bytes
	entries  []histLatest // the current chunk of entries
}

// histBloomBits sizes each window's filter: 128 KiB, two bits per key, so
// at histFoldKeys keys about 1.3% of first changes go to the journal.
const (
	histBloomBits = 1 << 20
	histChunk     = 1024
)

func newHistWindow() *histWindow {
	return &histWindow{seen: make([]uint64, histBloomBits/64), keys: make(map[string]*histLatest)}
}

func bloomBits(h uint64) (uint64, uint64) {
	return h & (histBloomBits - 1), (h >> 32) & (histBloomBits - 1)
}

// has reports whether the key of hash h may have changed in the window.
func (w *histWindow) has(h uint64) bool {
	a, b := bloomBits(h)
	return w.seen[a/64]&(1<<(a%64)) != 0 && w.seen[b/64]&(1<<(b%64)) != 0
}

// mark notes that the key of hash h changed in the window.
func (w *histWindow) mark(h uint64) {
	a, b := bloomBits(h)
	if w.seen[a/64]&(1<<(a%64)) == 0 || w.seen[b/64]&(1<<(b%64)) == 0 {
		w.distinct++
	}
	w.seen[a/64] |= 1 << (a % 64)
	w.seen[b/64] |= 1 << (b % 64)
}

// entry returns k's journalled entry, making one.
func (w *histWindow) entry(k []byte) *histLatest {
	if e, ok := w.keys[string(k)]; ok {
		return e
	}
	if len(w.arena)+len(k) > cap(w.arena) {
		w.arena = make([]byte, 0, max(histChunk*64, len(k)))
	}
	off := len(w.arena)
	w.arena = append(w.arena, k...)
	if len(w.entries) == cap(w.entries) {
		w.entries = make([]histLatest, 0, histChunk)
	}
	w.entries = append(w.entries, histLatest{})
	e := &w.entries[len(w.entries)-1]
	w.keys[unsafe.String(&w.arena[off], len(k))] = e
	return e
}

// histPlanned is one change of a WriteHist call: its key's hash, and
// whether it goes in place.
type histPlanned struct {
	hash   uint64
	direct bool
}

// histJournal is the DB's journal state.
type histJournal struct {
	// writeMu orders WriteHist's writes and their overlay updates, and the
	// replay of a reopen.
	writeMu sync.Mutex
	seq     uint64 // the last journal entry written (under writeMu)
	seed    maphash.Seed
	plan    []histPlanned // scratch of WriteHist (under writeMu)

	// foldMu runs one fold at a time.
	foldMu sync.Mutex

	mu      sync.Mutex
	overlay *histWindow
	// folding is the window a running fold is writing, read after overlay.
	folding *histWindow
	// applied is the last journal entry whose changes are in the overlay
	// (or folding, or the records); folded the last one a fold deleted.
	applied, folded uint64
	bytes           int       // journal bytes in the window
	windowStart     time.Time // when the window began

	changes, journalled, foldedKeys atomic.Uint64 // WriteStats
}

func histLogKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{prefixHistLog}, seq)
}

// isHistKey reports whether k is a key WriteHist may write.
func isHistKey(k []byte) bool {
	return len(k) > 1 && (k[0] == prefixHist || k[0] == prefixHistExpiry || k[0] == prefixHistRecent)
}

// appendHistChange appends one change to a journal value.
func appendHistChange(dst, k, v []byte, del bool) []byte {
	if del {
		dst = append(dst, histLogDelete)
		dst = appendUvarint(dst, uint64(len(k)))
		return append(dst, k...)
	}
	dst = append(dst, histLogSet)
	dst = appendUvarint(dst, uint64(len(k)))
	dst = append(dst, k...)
	dst = appendUvarint(dst, uint64(len(v)))
	return append(dst, v...)
}

// appendHistLog encodes all of ws's changes as one journal value (tests).
func appendHistLog(dst []byte, ws []*HistWrite) []byte {
	dst = append(dst, histLogVersion)
	for _, w := range ws {
		for _, op := range w.ops {
			var v []byte
			if !op.del {
				v = w.buf[op.v0:op.v1]
			}
			dst = appendHistChange(dst, w.buf[op.k0:op.k1], v, op.del)
		}
	}
	return dst
}

// parseHistLog calls fn with each change of a journal value, in order; key
// and val are slices of b. It checks the version, every length and that
// every key is a device-history key.
func parseHistLog(b []byte, fn func(key, val []byte, del bool)) error {
	if len(b) == 0 || b[0] != histLogVersion {
		return fmt.Errorf("%w: device history journal entry of version %v", errCorrupt, b[:min(len(b), 1)])
	}
	b = b[1:]
	field := func(limit uint64) ([]byte, bool) {
		n, w := binary.Uvarint(b)
		// A length in its shortest form only, as appendHistChange writes it.
		if w <= 0 || w != uvarintLen(n) || n > limit || n > uint64(len(b)-w) {
			return nil, false
		}
		f := b[w : w+int(n)]
		b = b[w+int(n):]
		return f, true
	}
	for len(b) > 0 {
		op := b[0]
		b = b[1:]
		if op != histLogSet && op != histLogDelete {
			return fmt.Errorf("%w: device history journal change of kind %d", errCorrupt, op)
		}
		k, ok := field(maxHistLogKey)
		if !ok || !isHistKey(k) {
			return fmt.Errorf("%w: device history journal key", errCorrupt)
		}
		var v []byte
		if op == histLogSet {
			if v, ok = field(maxHistLogValue); !ok {
				return fmt.Errorf("%w: device history journal value", errCorrupt)
			}
		}
		fn(k, v, op == histLogDelete)
	}
	return nil
}

// uvarintLen is the length of x's shortest uvarint.
func uvarintLen(x uint64) int { return max(1, (bits.Len64(x)+6)/7) }

// journalHist commits ws's changes, each in place or in the journal, as
// one batch, and notes them in the overlay. See WriteHist.
func (d *DB) journalHist(ws []*HistWrite) error {
	j := &d.hist
	j.writeMu.Lock()
	defer j.writeMu.Unlock()
	// Plan: a key goes in place when neither the window (nor the one being
	// folded) nor this call has changed it yet; marking it at once sends
	// its next change in the call to the journal. A change that fails to
	// commit leaves its mark, which only sends the key to the journal.
	plan := j.plan[:0]
	size := 1 // of the journal entry: its values stay in the overlay, so no spare room
	j.mu.Lock()
	for _, w := range ws {
		for _, op := range w.ops {
			k := w.buf[op.k0:op.k1]
			if len(k) > maxHistLogKey || !isHistKey(k) || !op.del && op.v1-op.v0 > maxHistLogValue {
				j.mu.Unlock()
				return fmt.Errorf("device history: a change of a %d-byte key and a %d-byte value", len(k), op.v1-op.v0)
			}
			h := maphash.Bytes(j.seed, k)
			in := j.overlay.has(h) || j.folding != nil && j.folding.has(h)
			j.overlay.mark(h)
			plan = append(plan, histPlanned{hash: h, direct: !in})
			if in {
				size += 1 + 2*binary.MaxVarintLen32 + len(k)
				if !op.del {
					size += op.v1 - op.v0
				}
			}
		}
	}
	j.mu.Unlock()
	j.plan = plan

	b := d.newBatch()
	var val []byte
	i := 0
	for _, w := range ws {
		for _, op := range w.ops {
			k := w.buf[op.k0:op.k1]
			var v []byte
			if !op.del {
				v = w.buf[op.v0:op.v1]
			}
			switch {
			case !plan[i].direct:
				if val == nil {
					val = append(make([]byte, 0, size), histLogVersion)
				}
				val = appendHistChange(val, k, v, op.del)
			case op.del:
				_ = b.Delete(k, nil)
			default:
				_ = b.Set(k, v, nil)
			}
			i++
		}
	}
	if val != nil {
		_ = b.Set(histLogKey(j.seq+1), val, nil)
	}
	if err := d.commitBehind(b); err != nil {
		return err
	}
	j.changes.Add(uint64(len(plan)))
	if val == nil {
		j.mu.Lock()
		due := j.dueLocked()
		j.mu.Unlock()
		d.foldIf(due)
		return nil
	}
	j.seq++
	journalled := 0

	// The journalled changes into the overlay, their values slices of val
	// (which was checked as it was built).
	j.mu.Lock()
	// (A fold may have begun a new window since the plan: its filter must
	// name the key too, or the key's next change would go in place and then
	// be overwritten by this one's fold.)
	i = 0
	_ = parseHistLog(val, func(k, v []byte, del bool) {
		for plan[i].direct {
			i++
		}
		j.overlay.mark(plan[i].hash)
		i++
		e := j.overlay.entry(k)
		e.val, e.del = v, del
		journalled++
	})
	j.journalled.Add(uint64(journalled))
	j.applied = j.seq
	j.bytes += len(val)
	due := j.dueLocked()
	j.mu.Unlock()
	d.foldIf(due)
	return nil
}

// dueLocked reports whether the window is over (j.mu held).
func (j *histJournal) dueLocked() bool {
	return j.overlay.distinct >= histFoldKeys || j.bytes >= histFoldBytes || time.Since(j.windowStart) >= histFoldEvery
}

// foldIf starts a fold in the background when due and none is running.
func (d *DB) foldIf(due bool) {
	j := &d.hist
	if !due || !j.foldMu.TryLock() {
		return
	}
	go func() {
		defer j.foldMu.Unlock()
		if err := d.foldOverlay(); err != nil {
			d.log.Log(context.Background(), d.failLevel(), "storage: device history fold failed; the journal keeps the changes", "err", err)
		}
	}()
}

// histLoad reads key from the overlay: found says whether the journal
// holds its newest version, val is a copy (nil for a delete).
func (d *DB) histLoad(key []byte) (val []byte, deleted, found bool) {
	j := &d.hist
	j.mu.Lock()
	defer j.mu.Unlock()
	e, ok := j.overlay.keys[string(key)]
	if !ok && j.folding != nil {
		e, ok = j.folding.keys[string(key)]
	}
	if !ok {
		return nil, false, false // the record's own key has the newest
	}
	if e.del {
		return nil, true, true
	}
	return append([]byte(nil), e.val...), false, true
}

// settleHist folds the overlay into the records, so iterators over them see
// every change WriteHist returned for.
func (d *DB) settleHist() error {
	d.hist.foldMu.Lock()
	defer d.hist.foldMu.Unlock()
	return d.foldOverlay()
}

// foldOverlay ends the window: it writes the window's journalled keys in
// place and deletes the journal entries they came in, in one batch (the
// caller holds foldMu). On failure the journal keeps its entries and the
// overlay the changes.
func (d *DB) foldOverlay() error {
	j := &d.hist
	j.mu.Lock()
	old, upto, from := j.overlay, j.applied, j.folded
	j.windowStart = time.Now()
	if old.distinct == 0 && len(old.keys) == 0 && upto <= from {
		j.mu.Unlock()
		return nil
	}
	oldBytes := j.bytes
	j.overlay, j.folding, j.bytes = newHistWindow(), old, 0
	j.mu.Unlock()

	var err error
	if upto > from {
		b := d.newBatch()
		for k, e := range old.keys {
			if e.del {
				_ = b.Delete(unsafe.Slice(unsafe.StringData(k), len(k)), nil)
			} else {
				_ = b.Set(unsafe.Slice(unsafe.StringData(k), len(k)), e.val, nil)
			}
		}
		_ = b.DeleteRange(histLogKey(0), histLogKey(upto+1), nil)
		err = d.commitBehind(b)
	}

	j.mu.Lock()
	defer j.mu.Unlock()
	j.folding = nil
	if err != nil {
		// Back into the window, under what changed since.
		for k, e := range old.keys {
			if _, newer := j.overlay.keys[k]; !newer {
				j.overlay.keys[k] = e
			}
		}
		for i, w := range old.seen {
			j.overlay.seen[i] |= w
		}
		j.overlay.distinct += old.distinct
		j.bytes += oldBytes
		return fmt.Errorf("fold device history journal: %w", err)
	}
	j.folded = upto
	j.foldedKeys.Add(uint64(len(old.keys)))
	return nil
}

// histReplay is what a journal holds, as the window a replay folds: the
// newest version of every key it changes; and its last entry.
type histReplay struct {
	window  *histWindow
	last    uint64
	entries int
}

// replayHistJournal folds what the journal of a newly opened instance h
// holds (a crash or a fatal write error cut the last folds short) into the
// records: after it, the records hold everything the WAL kept. A journal
// entry that does not parse stops it: the store cannot vouch for the
// records it would have changed.
func (d *DB) replayHistJournal(h *handle) error {
	d.hist.writeMu.Lock()
	defer d.hist.writeMu.Unlock()
	d.hist.foldMu.Lock()
	defer d.hist.foldMu.Unlock()
	r, err := d.readHistJournal(h)
	if err != nil {
		return err
	}
	d.hist.startReplay(r)
	return d.finishReplay(r)
}

// startReplay makes the journal's content the window, so that LoadHist
// reads it until its fold has written it in place (the caller holds
// writeMu and foldMu).
func (j *histJournal) startReplay(r histReplay) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.overlay, j.folding, j.bytes, j.windowStart = r.window, nil, 0, time.Now()
	j.seq = max(j.seq, r.last)
	j.applied, j.folded = j.seq, j.seq
	if r.entries > 0 {
		j.folded = 0 // the fold deletes every entry
	}
}

// finishReplay folds the window startReplay made, as any window is folded:
// without a sync, since a crash before the next one leaves the journal,
// which the next start replays again. On failure the window keeps it for
// the next fold (the caller holds writeMu and foldMu).
func (d *DB) finishReplay(r histReplay) error {
	if r.entries == 0 {
		return nil
	}
	if err := d.foldOverlay(); err != nil {
		return err
	}
	d.log.Info("storage: folded the device history journal left by the last run", "entries", r.entries, "keys", len(r.window.keys))
	return nil
}

// readHistJournal reads the journal of instance h.
func (d *DB) readHistJournal(h *handle) (histReplay, error) {
	r := histReplay{window: newHistWindow()}
	it, err := d.newIterOn(h, []byte{prefixHistLog}, []byte{prefixHistLog + 1})
	if err != nil {
		return r, err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) != 9 {
			return r, fmt.Errorf("%w: device history journal key %x", ErrCorrupt, k)
		}
		seq := binary.BigEndian.Uint64(k[1:])
		v, err := it.Value()
		if err != nil {
			return r, fmt.Errorf("read device history journal entry %d: %w", seq, err)
		}
		v = append([]byte(nil), v...) // the window's values are slices of it
		if err := parseHistLog(v, func(k, v []byte, del bool) {
			r.window.mark(maphash.Bytes(d.hist.seed, k))
			e := r.window.entry(k)
			e.val, e.del = v, del
		}); err != nil {
			return r, fmt.Errorf("%w: device history journal entry %d: %w", ErrCorrupt, seq, err)
		}
		r.last, r.entries = seq, r.entries+1
	}
	return r, it.Err("iterate device history journal")
}
