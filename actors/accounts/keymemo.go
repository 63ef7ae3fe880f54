package accounts

import (
	"sync"
	"sync/atomic"
)

// keyMemoCap bounds the keys the memo holds. Each account has at most four
// (live, previous live, test, publishable), so this covers the keys of a
// thousand busy accounts; past it, further keys are hashed every time.
const keyMemoCap = 4096

// keyMemo remembers the keyed hash of API keys that resolved to an account,
// so that a busy key's request skips the HMAC (two SHA-256 compressions and
// the HMAC's bookkeeping: about 1.5% of a test-token evaluation's CPU).
//
// It maps a key to its own HMAC, which never changes while the process runs
// (the pepper is fixed at start), so a stale entry can never authenticate
// anything: Authenticate still finds the binding by hash and compares the
// hash in constant time. It is emptied whenever a binding changes, so a
// revoked key does not stay in memory longer than the next change. Only keys
// that resolved are remembered, so a caller trying random keys cannot fill
// it.
//
// Reads load one pointer and look up an immutable map: no lock, no shared
// write. A remember copies the map, which is cheap at this size and rare
// (once per key and per change of any binding).
type keyMemo struct {
	m  atomic.Pointer[map[string][32]byte]
	mu sync.Mutex // serialises copies
}

// get returns the remembered hash of key, and the memo's current map to
// hand to remember after a miss.
func (k *keyMemo) get(key string) (h [32]byte, ok bool, seen *map[string][32]byte) {
	m := k.m.Load()
	if m == nil {
		return h, false, nil
	}
	h, ok = (*m)[key]
	return h, ok, m
}

// remember records key's hash (a key that just resolved). seen is the map
// get returned before the key was hashed and resolved: when the memo
// changed since (above all, when a binding changed and forget replaced it),
// nothing is recorded, so a key revoked in between is never kept. Every
// change stores a new map, so the pointer tells one state from any other.
func (k *keyMemo) remember(seen *map[string][32]byte, key string, h [32]byte) {
	k.mu.Lock()
	defer k.mu.Unlock()
	cur := k.m.Load()
	if cur == nil || cur != seen || len(*cur) >= keyMemoCap {
		return
	}
	next := make(map[string][32]byte, len(*cur)+1)
	for kk, v := range *cur {
		next[kk] = v
	}
	next[string([]byte(key))] = h // a copy: key may point into a request buffer
	k.m.Store(&next)
}

// forget empties the memo (a binding changed, or the service starts).
func (k *keyMemo) forget() {
	empty := map[string][32]byte{}
	k.mu.Lock()
	k.m.Store(&empty)
	k.mu.Unlock()
}
