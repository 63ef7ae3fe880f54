package actors

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
