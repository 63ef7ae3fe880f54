package netlists

import "sync/atomic"

// Store holds the current Snapshot. Readers call Current once per request
// and use that snapshot throughout, so one request never mixes two feed
// versions; a refresh calls Swap and never waits for readers.
type Store struct {
	p atomic.Pointer[Snapshot]
}

// NewStore returns a Store holding s (which may be nil until feeds load).
func NewStore(s *Snapshot) *Store {
	st := &Store{}
	st.p.Store(s)
	return st
}

// Current returns the snapshot in use. A nil result answers every question
// with "nothing known".
func (st *Store) Current() *Snapshot { return st.p.Load() }

// Swap installs s and returns the snapshot it replaces.
func (st *Store) Swap(s *Snapshot) *Snapshot { return st.p.Swap(s) }
