package storage

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/maphash"
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

// histLatest is a key changed in the window: written in place (clean), or
// journalled with its newest value (a slice of the journal entry it came
// in) or delete.
type histLatest struct {
	val   []byte
	del   bool
	clean bool
}

// histWindow is the overlay of one window. Its keys and entries come from
// chunks it drops as a whole at the fold, so a change allocates nothing of
// its own.
type histWindow struct {
	keys    map[string]*histLatest
	arena   []byte       // the current chunk of key bytes
	entries []histLatest // the current chunk of entries
}

const histChunk = 1024

func newHistWindow(size int) *histWindow {
	return &histWindow{keys: make(map[string]*histLatest, size)}
}

// add names k in the window, with a new clean entry.
func (w *histWindow) add(k []byte) *histLatest {
	if len(w.arena)+len(k) > cap(w.arena) {
		w.arena = make([]byte, 0, max(histChunk*64, len(k)))
	}
	off := len(w.arena)
	w.arena = append(w.arena, k...)
	if len(w.entries) == cap(w.entries) {
		w.entries = make([]histLatest, 0, histChunk)
	}
	w.entries = append(w.entries, histLatest{clean: true})
	e := &w.entries[len(w.entries)-1]
	w.keys[unsafe.String(&w.arena[off], len(k))] = e
	return e
}

// histJournal is the DB's journal state.
type histJournal struct {
	// writeMu orders WriteHist's writes and their overlay updates, and the
	// replay of a reopen.
	writeMu sync.Mutex
	seq     uint64 // the last journal entry written (under writeMu)
	// Scratch of WriteHist (under writeMu).
	seed   maphash.Seed
	inCall map[uint64]struct{} // hashes of the keys of the call so far
	plan   []histPlanned

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

	changes, foldedKeys atomic.Uint64 // WriteStats
}

// histPlanned is one change of a WriteHist call: written in place, or
// journalled with its value at val0:val1 of the entry.
type histPlanned struct {
	key        []byte
	direct     bool
	del        bool
	val0, val1 int
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
		if w <= 0 || n > limit || n > uint64(len(b)-w) {
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

// journalHist commits ws's changes, each in place or in the journal, as
// one batch, and notes them in the overlay. See WriteHist.
func (d *DB) journalHist(ws []*HistWrite) error {
	j := &d.hist
	j.writeMu.Lock()
	defer j.writeMu.Unlock()
	if j.inCall == nil {
		j.seed, j.inCall = maphash.MakeSeed(), map[uint64]struct{}{}
	}
	// Plan: a key goes in place when neither the window nor this call has
	// changed it yet. A hash collision within the call only sends a key to
	// the journal, which is always safe.
	clear(j.inCall)
	plan := j.plan[:0]
	j.mu.Lock()
	for _, w := range ws {
		for _, op := range w.ops {
			k := w.buf[op.k0:op.k1]
			h := maphash.Bytes(j.seed, k)
			_, again := j.inCall[h]
			j.inCall[h] = struct{}{}
			p := histPlanned{key: k, del: op.del, direct: !again && !j.inWindow(k)}
			if !op.del {
				p.val0, p.val1 = op.v0, op.v1 // for now, offsets into w.buf
			}
			plan = append(plan, p)
		}
	}
	j.mu.Unlock()

	b := d.newBatch()
	var val []byte
	i := 0
	for _, w := range ws {
		for _, op := range w.ops {
			p := &plan[i]
			i++
			var v []byte
			if !op.del {
				v = w.buf[op.v0:op.v1]
			}
			switch {
			case p.direct && op.del:
				_ = b.Delete(p.key, nil)
			case p.direct:
				_ = b.Set(p.key, v, nil)
			default:
				if val == nil {
					val = append(make([]byte, 0, 4096), histLogVersion)
				}
				val = appendHistChange(val, p.key, v, op.del)
				p.val0, p.val1 = len(val)-len(v), len(val)
			}
		}
	}
	if val != nil {
		_ = b.Set(histLogKey(j.seq+1), val, nil)
	}
	err := d.commitBehind(b)
	j.plan = plan[:0]
	if err != nil {
		clear(plan)
		return err
	}
	if val != nil {
		j.seq++
	}

	j.mu.Lock()
	for i := range plan {
		p := &plan[i]
		e, ok := j.overlay.keys[string(p.key)]
		if !ok {
			e = j.overlay.add(p.key)
		}
		if !p.direct {
			e.clean, e.del, e.val = false, p.del, nil
			if !p.del {
				e.val = val[p.val0:p.val1:p.val1]
			}
		}
	}
	j.applied = j.seq
	j.bytes += len(val)
	due := len(j.overlay.keys) >= histFoldKeys || j.bytes >= histFoldBytes || time.Since(j.windowStart) >= histFoldEvery
	j.mu.Unlock()
	clear(plan)
	j.changes.Add(uint64(len(plan)))
	if due && j.foldMu.TryLock() {
		go func() {
			defer j.foldMu.Unlock()
			if err := d.foldOverlay(); err != nil {
				d.log.Log(context.Background(), d.failLevel(), "storage: device history fold failed; the journal keeps the changes", "err", err)
			}
		}()
	}
	return nil
}

// inWindow reports whether the window (or the one being folded) changed k
// (j.mu held).
func (j *histJournal) inWindow(k []byte) bool {
	if _, ok := j.overlay.keys[string(k)]; ok {
		return true
	}
	if j.folding != nil {
		_, ok := j.folding.keys[string(k)]
		return ok
	}
	return false
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
	if !ok || e.clean {
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
	if len(old.keys) == 0 {
		j.mu.Unlock()
		return nil
	}
	j.overlay, j.folding, j.bytes = newHistWindow(len(old.keys)), old, 0
	j.mu.Unlock()

	n := 0
	var err error
	if upto > from {
		b := d.newBatch()
		for k, e := range old.keys {
			switch {
			case e.clean:
				continue
			case e.del:
				_ = b.Delete(unsafe.Slice(unsafe.StringData(k), len(k)), nil)
			default:
				_ = b.Set(unsafe.Slice(unsafe.StringData(k), len(k)), e.val, nil)
			}
			n++
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
		return fmt.Errorf("fold device history journal: %w", err)
	}
	j.folded = upto
	j.foldedKeys.Add(uint64(n))
	return nil
}

// replayHistJournal folds what the journal of a newly opened instance holds
// (a crash or a fatal write error cut the last folds short) into the
// records, synced, and empties the overlay: after it, the records hold
// everything the WAL kept. A journal entry that does not parse stops it:
// the store cannot vouch for the records it would have changed.
func (d *DB) replayHistJournal() error {
	j := &d.hist
	j.writeMu.Lock()
	defer j.writeMu.Unlock()
	j.foldMu.Lock()
	defer j.foldMu.Unlock()

	latest, last, entries, err := d.readHistJournal()
	if err != nil {
		return err
	}
	j.mu.Lock()
	j.overlay, j.folding, j.bytes, j.windowStart = newHistWindow(0), nil, 0, time.Now()
	j.seq = max(j.seq, last)
	j.applied, j.folded = j.seq, j.seq
	j.mu.Unlock()
	if entries == 0 {
		return nil
	}
	b := d.newBatch()
	for k, e := range latest {
		if e.del {
			_ = b.Delete([]byte(k), nil)
		} else {
			_ = b.Set([]byte(k), e.val, nil)
		}
	}
	_ = b.DeleteRange(histLogKey(0), histLogKey(last+1), nil)
	if err := d.commit(b); err != nil {
		return fmt.Errorf("fold device history journal: %w", err)
	}
	return nil
}

// readHistJournal reads the journal: the newest version of every key it
// changes, its last entry and how many entries it holds.
func (d *DB) readHistJournal() (latest map[string]histLatest, last uint64, entries int, err error) {
	latest = map[string]histLatest{}
	it, err := d.newIter([]byte{prefixHistLog}, []byte{prefixHistLog + 1})
	if err != nil {
		return nil, 0, 0, err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) != 9 {
			return nil, 0, 0, fmt.Errorf("%w: device history journal key %x", ErrCorrupt, k)
		}
		seq := binary.BigEndian.Uint64(k[1:])
		v, err := it.Value()
		if err != nil {
			return nil, 0, 0, fmt.Errorf("read device history journal entry %d: %w", seq, err)
		}
		if err := parseHistLog(v, func(k, v []byte, del bool) {
			latest[string(k)] = histLatest{val: append([]byte(nil), v...), del: del}
		}); err != nil {
			return nil, 0, 0, fmt.Errorf("%w: device history journal entry %d: %w", ErrCorrupt, seq, err)
		}
		last, entries = seq, entries+1
	}
	return latest, last, entries, it.Err("iterate device history journal")
}
