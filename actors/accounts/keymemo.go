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
// the HMAC's bookkeeping: Authenticate takes about 60 ns instead of 220).
//
// It maps a key to its own HMAC, which never changes while the process runs
// (the pepper is fixed at start), so a stale entry can never authenticate
// anything: Authenticate still finds the binding by hash and compares the
// hash in constant time. It is emptied whenever a binding changes, so a
// revoked key does not stay in it past that change. Only keys that resolved
// are remembered, so a caller trying random keys cannot fill it.
//
// The trade-off: the process keeps the clear keys of recently used
// accounts in memory until the next change of any binding, where before it
// kept only their hashes (and, in its connection buffers, the keys of the
// requests it is serving). Anyone who can read the process's memory also
// reads the master secret, from which every stored secret is unsealed.
//
// Reads are a lock-free sync.Map lookup, so busy keys on many cores share
// no written cache line. Writes (a remember, once per key and per change
// of any binding, and forget) are serialised by a mutex. A generation
// number, raised by every forget, keeps a key that resolved while a
// binding changed from being remembered: it may be the key revoked.
type keyMemo struct {
	m   sync.Map // string → [32]byte
	gen atomic.Uint64
	mu  sync.Mutex // remember against forget; n
	n   int
}

// get returns the remembered hash of key, and the memo's generation (read
// first) to hand to remember after a miss.
func (k *keyMemo) get(key string) (h [32]byte, ok bool, gen uint64) {
	gen = k.gen.Load()
	v, ok := k.m.Load(key)
	if ok {
		h = v.([32]byte)
	}
	return h, ok, gen
}

// remember records key's hash (a key that just resolved). gen is what get
// returned before the key was hashed and resolved: when a binding changed
// since (forget ran), nothing is recorded.
func (k *keyMemo) remember(gen uint64, key string, h [32]byte) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if gen != k.gen.Load() || k.n >= keyMemoCap {
		return
	}
	if _, loaded := k.m.LoadOrStore(string([]byte(key)), h); !loaded { // a copy: key may point into a request buffer
		k.n++
	}
}

// forget empties the memo (a binding changed).
func (k *keyMemo) forget() {
	k.mu.Lock()
	k.gen.Add(1)
	k.m.Clear()
	k.n = 0
	k.mu.Unlock()
}

// len is the number of keys held (tests).
func (k *keyMemo) len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.n
}
