package storage

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"
)

// The device-history journal. A live evaluation changes a few history
// records (the device, the end-user account, the address, and their index
// entries), and the devicehist shards flush what changed once per sync
// interval. Written in place, each flush puts every changed key into
// Pebble's memtable at a random place in a skiplist of some hundred
// thousand entries, a cache miss per level: the largest item of the live
// path's CPU profile. So WriteHist writes one journal entry per flush
// instead, a single key at the end of the key space whose value holds every
// change of the flush, and keeps the newest version of each changed key in
// memory (the overlay) for LoadHist. Every few seconds a fold writes the
// overlay to the records' own keys, each key once however often it changed
// meanwhile, and deletes the journal entries it covers in the same batch.
//
// The crash bound is the one of every write-behind store: the journal
// entry is committed without a sync and made durable by the next group
// sync. Open (and a reopen after a fatal write error) folds whatever the
// journal still holds before anything reads the records, so a crash loses
// nothing the WAL kept. A fold writes full records, never deltas, so
// replaying an entry a fold already covered writes the same values again.
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

// When a fold runs: whichever comes first.
const (
	histFoldEvery = 5 * time.Second
	histFoldKeys  = 64 << 10 // distinct keys in the overlay
	histFoldBytes = 16 << 20 // journal bytes since the last fold
)

// histLatest is the newest version of a journalled key: its value (a slice
// of the journal entry it came in) or a delete.
type histLatest struct {
	val []byte
	del bool
}

// histJournal is the DB's journal state.
type histJournal struct {
	// writeMu orders journal entries and their overlay updates (WriteHist)
	// against the fold of a reopen.
	writeMu sync.Mutex
	seq     uint64 // the last journal entry written (under writeMu)

	// foldMu runs one fold at a time.
	foldMu sync.Mutex

	mu      sync.Mutex
	overlay map[string]*histLatest
	// folding is the overlay a running fold is writing, read after overlay.
	folding map[string]*histLatest
	// applied is the last journal entry whose changes are in overlay (or
	// in folding, or in the records).
	applied   uint64
	bytes     int       // journal bytes since the last fold
	lastFold  time.Time // when the last fold began
	foldError error     // the last background fold's failure, logged once
}

func histLogKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{prefixHistLog}, seq)
}

// isHistKey reports whether k is a key WriteHist may write.
func isHistKey(k []byte) bool {
	return len(k) > 1 && (k[0] == prefixHist || k[0] == prefixHistExpiry || k[0] == prefixHistRecent)
}

// appendHistLog encodes ws's changes as one journal value.
func appendHistLog(dst []byte, ws []*HistWrite) []byte {
	dst = append(dst, histLogVersion)
	for _, w := range ws {
		for _, op := range w.ops {
			k := w.buf[op.k0:op.k1]
			if op.del {
				dst = append(dst, histLogDelete)
				dst = appendUvarint(dst, uint64(len(k)))
				dst = append(dst, k...)
				continue
			}
			v := w.buf[op.v0:op.v1]
			dst = append(dst, histLogSet)
			dst = appendUvarint(dst, uint64(len(k)))
			dst = append(dst, k...)
			dst = appendUvarint(dst, uint64(len(v)))
			dst = append(dst, v...)
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

// journalHist commits ws's changes as one journal entry and adds them to
// the overlay. See WriteHist.
func (d *DB) journalHist(ws []*HistWrite) error {
	j := &d.hist
	j.writeMu.Lock()
	defer j.writeMu.Unlock()
	val := appendHistLog(nil, ws)
	b := d.newBatch()
	_ = b.Set(histLogKey(j.seq+1), val, nil)
	if err := d.commitBehind(b); err != nil {
		return err
	}
	j.seq++
	j.mu.Lock()
	if j.overlay == nil {
		j.overlay = make(map[string]*histLatest)
		j.lastFold = time.Now()
	}
	// val was checked as it was built; the values stay slices of it.
	_ = parseHistLog(val, func(k, v []byte, del bool) {
		if e, ok := j.overlay[string(k)]; ok {
			e.val, e.del = v, del
			return
		}
		j.overlay[string(k)] = &histLatest{val: v, del: del}
	})
	j.applied = j.seq
	j.bytes += len(val)
	due := len(j.overlay) >= histFoldKeys || j.bytes >= histFoldBytes || time.Since(j.lastFold) >= histFoldEvery
	j.mu.Unlock()
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

// histLoad reads key from the overlay: found says whether the journal
// holds its newest version, val is a copy (nil for a delete).
func (d *DB) histLoad(key []byte) (val []byte, deleted, found bool) {
	j := &d.hist
	j.mu.Lock()
	defer j.mu.Unlock()
	e, ok := j.overlay[string(key)]
	if !ok {
		e, ok = j.folding[string(key)]
	}
	if !ok {
		return nil, false, false
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

// foldOverlay writes the overlay to the records' keys and deletes the
// journal entries it covers, in one batch (the caller holds foldMu). On
// failure the overlay keeps the changes and the journal keeps its entries.
func (d *DB) foldOverlay() error {
	j := &d.hist
	j.mu.Lock()
	old, upto := j.overlay, j.applied
	j.lastFold = time.Now()
	if len(old) == 0 {
		j.mu.Unlock()
		return nil
	}
	j.overlay, j.folding, j.bytes = make(map[string]*histLatest, len(old)), old, 0
	j.mu.Unlock()

	b := d.newBatch()
	for k, e := range old {
		if e.del {
			_ = b.Delete([]byte(k), nil)
		} else {
			_ = b.Set([]byte(k), e.val, nil)
		}
	}
	_ = b.DeleteRange(histLogKey(0), histLogKey(upto+1), nil)
	err := d.commitBehind(b)

	j.mu.Lock()
	defer j.mu.Unlock()
	j.folding = nil
	if err != nil {
		for k, e := range old {
			if _, newer := j.overlay[k]; !newer {
				j.overlay[k] = e
			}
		}
		return fmt.Errorf("fold device history journal: %w", err)
	}
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
	j.overlay, j.folding, j.bytes, j.lastFold = nil, nil, 0, time.Now()
	j.seq = max(j.seq, last)
	j.applied = j.seq
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
