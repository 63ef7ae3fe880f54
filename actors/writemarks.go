package actors

import "sync/atomic"

// WriteMarks is how far a shard's numbered writes to the store have gone,
// for a shard that keeps entries in memory and writes them behind (events,
// devicehist): the sequence of the last write the group committer settled,
// and of the last one that did not reach the store. An entry remembers the
// sequence of the write that last carried it; the marks tell whether the
// store holds it as memory does, so that dropping it (idle eviction, a
// restart's reload) loses nothing.
type WriteMarks struct {
	stored atomic.Uint64 // the last write settled, stored or not
	// failed is the last write that did not reach the store (refused, or
	// Stop had closed the committer): entries last carried by it or an
	// earlier write may exist only in memory, until a later write of them
	// is stored.
	failed atomic.Uint64
}

// Settle records that write seq is done, failed or not. The failure is
// recorded first: a reader that sees seq settled sees it failed too.
func (m *WriteMarks) Settle(seq uint64, failed bool) {
	if failed {
		m.failed.Store(seq)
	}
	m.stored.Store(seq)
}

// Stored is the sequence of the last write settled.
func (m *WriteMarks) Stored() uint64 { return m.stored.Load() }

// Failed is the sequence of the last write that did not reach the store.
func (m *WriteMarks) Failed() uint64 { return m.failed.Load() }

// InStore returns whether an entry (dirty, last carried by write wseq) is
// what the store holds: unchanged since, and that write stored. wseq 0:
// loaded from the store and never written since. The marks are read once,
// for a sweep over many entries.
func (m *WriteMarks) InStore() func(dirty bool, wseq uint64) bool {
	stored, failed := m.stored.Load(), m.failed.Load()
	return func(dirty bool, wseq uint64) bool {
		return !dirty && wseq <= stored && (wseq == 0 || wseq > failed)
	}
}
