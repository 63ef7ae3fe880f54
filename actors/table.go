package actors

import "slices"

// Table is a shard's map of its entities. It is owned by one shard actor and
// not safe for concurrent use. Sweep evicts entries and gives memory back:
// a Go map never shrinks after deletes, so when a sweep leaves the table much
// smaller than its high-water mark the map is rebuilt at the smaller size.
type Table[K comparable, V any] struct {
	m    map[K]V
	peak int
}

// shrinkFloor is the size below which a table is never rebuilt.
const shrinkFloor = 1024

// NewTable returns an empty table sized for hint entries.
func NewTable[K comparable, V any](hint int) *Table[K, V] {
	return &Table[K, V]{m: make(map[K]V, hint)}
}

// Get returns the entry for k.
func (t *Table[K, V]) Get(k K) (V, bool) {
	v, ok := t.m[k]
	return v, ok
}

// Put stores v under k.
func (t *Table[K, V]) Put(k K, v V) {
	t.m[k] = v
	if n := len(t.m); n > t.peak {
		t.peak = n
	}
}

// Delete removes k.
func (t *Table[K, V]) Delete(k K) { delete(t.m, k) }

// Len is the number of entries.
func (t *Table[K, V]) Len() int { return len(t.m) }

// Range calls fn for every entry until fn returns false.
func (t *Table[K, V]) Range(fn func(K, V) bool) {
	for k, v := range t.m {
		if !fn(k, v) {
			return
		}
	}
}

// Sweep deletes every entry for which evict returns true and reports how many
// it deleted. When what is left is under a quarter of the high-water mark,
// the map is rebuilt so the memory of the evicted entries can be collected.
func (t *Table[K, V]) Sweep(evict func(K, V) bool) int {
	n := 0
	for k, v := range t.m {
		if evict(k, v) {
			delete(t.m, k)
			n++
		}
	}
	if t.peak > shrinkFloor && len(t.m) < t.peak/4 {
		m := make(map[K]V, len(t.m))
		for k, v := range t.m {
			m[k] = v
		}
		t.m = m
		t.peak = len(m)
	}
	return n
}

// Trim evicts the least recently touched evictable entries until the table
// holds keep, or nothing evictable is left, and reports how many went.
// touched reports an entry's last touch and whether it may go (an entry
// that is the only copy of a change may not). It sorts the touches, so it
// is for a table that has reached its bound, not for every insert.
func (t *Table[K, V]) Trim(keep int, touched func(V) (int64, bool)) int {
	over := len(t.m) - keep
	if over <= 0 {
		return 0
	}
	ts := make([]int64, 0, len(t.m))
	for _, v := range t.m {
		if at, ok := touched(v); ok {
			ts = append(ts, at)
		}
	}
	if len(ts) == 0 {
		return 0
	}
	over = min(over, len(ts))
	slices.Sort(ts)
	cut := ts[over-1] // the latest touch that goes
	n := 0
	return t.Sweep(func(_ K, v V) bool {
		if at, ok := touched(v); n < over && ok && at <= cut {
			n++
			return true
		}
		return false
	})
}

// TrimOver trims t when b says it holds its bound (Bound.Over): down to
// b.Keep(), least recently touched first (Trim), then sets b's next check.
func TrimOver[K comparable, V any](t *Table[K, V], b *Bound, touched func(V) (int64, bool)) {
	if !b.Over(t.Len()) {
		return
	}
	t.Trim(b.Keep(), touched)
	b.Reset(t.Len())
}

// Bound is a table's entry bound (Max 0: none) and the size at which it is
// next checked: a trim that could not get under Max (entries that may not
// go yet) is not retried on every insert.
type Bound struct{ Max, at int }

// Over reports whether a table of n entries is due a trim.
func (b *Bound) Over(n int) bool { return b.Max > 0 && n >= max(b.at, b.Max) }

// Reset sets the next check after a trim or sweep left n entries.
func (b *Bound) Reset(n int) { b.at = max(b.Max, n+b.Max/4) }

// Keep is what a trim leaves: three quarters of Max, so that one trim's
// cost is spread over the inserts that fill the last quarter.
func (b *Bound) Keep() int { return b.Max * 3 / 4 }
