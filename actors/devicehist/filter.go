package devicehist

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	// A Bloom filter library rather than our own: it is well kept, its
	// hashing (murmur3, fixed seeds) is the same on every machine, and it
	// exposes its bits and parameters, so the filter travels as our own
	// bounded encoding (encodeFilter) and is rebuilt without trusting a
	// length read from another machine.
	"github.com/bits-and-blooms/bloom/v3"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/storage"
)

// Existence filters (cluster mode). A holder's mirror answers only for
// records it holds; a record it never saw misses and costs a round trip to
// the owner, even when the owner holds none either (a brand-new device,
// account or address). So on a watcher's first watch of a customer the
// owner sends it, once, a Bloom filter over the identities of every record
// of the customer it holds; a record the mirror lacks and the filter
// surely lacks is one the owner surely does not hold, and the holder
// answers it as new (empty) with no round trip.
//
// Why the filter plus the feed covers everything the owner holds: every
// record created or changed after the watcher's registration is pushed by
// the shard anyway (and the shard adds the present ones it pushes while
// the build runs to the filter before sending it); every record that
// existed before the registration is in the store after the build's
// barrier (which flushes the shard and waits for the write) and so in the
// scan, or, when its write failed, still in the shard's memory, which the
// shard adds when the filter is sent. The filter is sent by the shard, in
// its order, after every push it made before; the holder adds to it every
// present record a later push brings, so it stays a superset of what the
// owner holds even once the mirror sweeps an idle entry. A record created
// after the filter was sent reaches the holder with its push, within the
// same in-flight window as any push.

const (
	// filterFP is the false-positive rate a filter is sized for (a false
	// positive only costs the round trip a miss costs today).
	filterFP = 0.01
	// maxFilterRecords: a customer with more records gets no filter (the
	// holder misses as without one).
	maxFilterRecords = 4_000_000
	// maxFilterBytes caps an encoded filter: it travels in one gRPC frame
	// (≤ 4 MiB). A customer whose 1% filter would be larger gets a filter
	// of this size with a higher false-positive rate (4M records: 5–7%).
	maxFilterBytes = 3 << 20
	// The holder refuses a filter declaring more bits or hash functions
	// (it comes from another machine): checked before anything is
	// allocated.
	maxFilterBits = 32 << 20
	maxFilterK    = 32
	// maxFilterPushed bounds the keys an owner's shard notes while a
	// customer's filter is built (pushed meanwhile); past it no filter
	// is sent.
	maxFilterPushed = 1 << 20
	// filterBuilds bounds the builds running at once (first watches are
	// rare; a build scans one customer's keys).
	filterBuilds = 2
	// filterFormat is an encoded filter's first byte: a holder refuses a
	// format it does not know rather than read absences wrongly.
	filterFormat      = 1
	filterHeader      = 1 + 8 + 8 // format, m, k
	maxFilterBitsSent = (maxFilterBytes - filterHeader) / 8 * 64
)

var errTooManyRecords = fmt.Errorf("devicehist: the customer has more than %d records", maxFilterRecords)

// filterSize is the filter's bits and hash functions for n records: sized
// for filterFP, at most maxFilterBitsSent bits.
func filterSize(n int) (m, k uint) {
	n = max(n, 1)
	m, k = bloom.EstimateParameters(uint(n), filterFP)
	if m > maxFilterBitsSent {
		m = maxFilterBitsSent
		k = uint(math.Round(math.Ln2 * float64(m) / float64(n)))
	}
	return m, min(max(k, 1), maxFilterK)
}

// filterRoom is how many records a filter of a customer with n is sized
// for: room for those the owner adds when it sends it (pushed meanwhile,
// or whose write failed) and those the holder adds as pushes come (a
// filter sized for n alone would soon fill: a new customer's, at once).
func filterRoom(n int) int { return n + n/8 + 1024 }

// encodeFilter is format | m (uint64 BE) | k (uint64 BE) | the ⌈m/64⌉
// words of the bit set (uint64 BE each).
func encodeFilter(f *bloom.BloomFilter) []byte {
	words := f.BitSet().Words()
	n := (int(f.Cap()) + 63) / 64
	b := make([]byte, filterHeader, filterHeader+8*n)
	b[0] = filterFormat
	binary.BigEndian.PutUint64(b[1:], uint64(f.Cap()))
	binary.BigEndian.PutUint64(b[9:], uint64(f.K()))
	for i := range n {
		var w uint64
		if i < len(words) {
			w = words[i]
		}
		b = binary.BigEndian.AppendUint64(b, w)
	}
	return b
}

// decodeFilter reads an encoded filter from another machine: its declared
// size is checked (m ≤ maxFilterBits, 1 ≤ k ≤ maxFilterK, exactly ⌈m/64⌉
// words follow) before its bits are allocated.
func decodeFilter(b []byte) (*bloom.BloomFilter, error) {
	if len(b) < filterHeader {
		return nil, fmt.Errorf("devicehist: filter of %d bytes", len(b))
	}
	if b[0] != filterFormat {
		return nil, fmt.Errorf("devicehist: filter format %d", b[0])
	}
	m, k := binary.BigEndian.Uint64(b[1:]), binary.BigEndian.Uint64(b[9:])
	if m == 0 || m > maxFilterBits || k == 0 || k > maxFilterK {
		return nil, fmt.Errorf("devicehist: filter of %d bits and %d hash functions refused", m, k)
	}
	n := int((m + 63) / 64)
	if len(b)-filterHeader != 8*n {
		return nil, fmt.Errorf("devicehist: filter of %d bits in %d bytes", m, len(b))
	}
	words := make([]uint64, n)
	for i := range words {
		words[i] = binary.BigEndian.Uint64(b[filterHeader+8*i:])
	}
	return bloom.FromWithM(words, uint(m), uint(k)), nil
}

// Filter keys: a record's kind byte and its identity within the customer
// (the device id, the account hash, the address as 16 bytes), as
// storage.HistIdentitiesOf names it. The filter is per customer.

func filterKeyOf(dst []byte, r storage.HistRecord) []byte {
	switch r := r.(type) {
	case *storage.HistCustomerDevice:
		return filterDeviceKey(dst, r.Device)
	case *storage.HistAccount:
		return filterAccountKey(dst, r.Hash)
	case *storage.HistAddress:
		return filterAddrKey(dst, r.Addr)
	}
	return dst[:0]
}

func filterDeviceKey(dst []byte, id string) []byte {
	return append(append(dst[:0], byte(storage.HistKindCustomerDevice)), id...)
}

func filterAccountKey(dst []byte, h storage.AccountHash) []byte {
	return append(append(dst[:0], byte(storage.HistKindAccount)), h[:]...)
}

func filterAddrKey(dst []byte, a netip.Addr) []byte {
	a16 := a.Unmap().As16()
	return append(append(dst[:0], byte(storage.HistKindAddress)), a16[:]...)
}

// Owner side.

// filterBuild is one filter on its way to a watcher: the builder fills f
// (nil when it failed) and hands it back to the customer's shard.
type filterBuild struct {
	customer string
	watcher  uint64
	f        *bloom.BloomFilter
}

// filterReady returns a build to its shard.
type filterReady struct{ b *filterBuild }

// filterBuilder runs the builds off the shards: a barrier on the
// customer's shard, then two scans of the customer's stored keys (count,
// then add), at most filterBuilds at once.
type filterBuilder struct {
	c      *Client
	sem    chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
	// running counts the builds not yet handed back (tests wait on it).
	running atomic.Int64
}

func newFilterBuilder(c *Client) *filterBuilder {
	ctx, cancel := context.WithCancel(context.Background())
	return &filterBuilder{c: c, sem: make(chan struct{}, filterBuilds), ctx: ctx, cancel: cancel}
}

// start runs b, unless the builder closed.
func (fb *filterBuilder) start(b *filterBuild) bool {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	if fb.closed {
		return false
	}
	fb.wg.Add(1)
	fb.running.Add(1)
	go fb.run(b)
	return true
}

// close stops the builds under way and waits for them (Stop, before the
// store may close).
func (fb *filterBuilder) close() {
	fb.mu.Lock()
	fb.closed = true
	fb.mu.Unlock()
	fb.cancel()
	fb.wg.Wait()
}

func (fb *filterBuilder) run(b *filterBuild) {
	defer fb.wg.Done()
	defer fb.running.Add(-1)
	h := actors.HashString(b.customer)
	select {
	case fb.sem <- struct{}{}:
	case <-fb.ctx.Done():
		return
	}
	start := time.Now()
	f, n, err := fb.build(b.customer, h)
	<-fb.sem
	if err != nil {
		if fb.ctx.Err() == nil {
			fb.c.log.Warn("devicehist: no existence filter for a watcher: its mirror misses records it lacks", "customer", b.customer, "err", err)
		}
	} else {
		b.f = f
		fb.c.log.Debug("devicehist: existence filter built", "customer", b.customer, "records", n, "bits", f.Cap(), "took", time.Since(start))
	}
	if fb.ctx.Err() == nil {
		fb.c.shards.Send(h, filterReady{b: b}) // the shard forgets the build either way
	}
}

// build waits until everything the customer's shard changed before is
// stored, then scans the customer's stored records into a filter.
func (fb *filterBuilder) build(customer string, h uint64) (*bloom.BloomFilter, int, error) {
	ch := newBarrier()
	fb.c.shards.Send(h, ch)
	t := time.NewTimer(fb.c.timeout)
	defer t.Stop()
	select {
	case err := <-ch:
		if err != nil {
			return nil, 0, err
		}
	case <-t.C:
		return nil, 0, fmt.Errorf("devicehist: filter barrier: %w", actors.ErrTimeout)
	case <-fb.ctx.Done():
		return nil, 0, fb.ctx.Err()
	}
	// Counted first: a filter sized for its records keeps its rate, and
	// holding the identities to count them would cost more than a second
	// walk of the keys.
	n := 0
	err := fb.c.store.HistIdentitiesOf(customer, func(storage.HistKind, []byte) bool {
		n++
		return n <= maxFilterRecords && fb.ctx.Err() == nil
	})
	switch {
	case err != nil:
		return nil, 0, fmtUnavailable(err)
	case fb.ctx.Err() != nil:
		return nil, 0, fb.ctx.Err()
	case n > maxFilterRecords:
		return nil, 0, errTooManyRecords
	}
	f := bloom.New(filterSize(filterRoom(n)))
	var key []byte
	err = fb.c.store.HistIdentitiesOf(customer, func(kind storage.HistKind, id []byte) bool {
		key = append(append(key[:0], byte(kind)), id...)
		f.Add(key)
		return fb.ctx.Err() == nil
	})
	if err != nil {
		return nil, 0, fmtUnavailable(err)
	}
	if fb.ctx.Err() != nil {
		return nil, 0, fb.ctx.Err()
	}
	return f, n, nil
}

// startFilter begins the filter of a watcher's first watch of ws's
// customer. Without a store every record is in memory: the filter is
// built and sent at once.
func (s shard) startFilter(ws *watchSet, watcher uint64) {
	if s.sink.Load() == nil || s.builder == nil {
		return
	}
	if s.store == nil {
		n := 0
		s.rangeCustomer(ws.customer, func(storage.HistRecord, int64) { n++ })
		s.sendFilter(ws, watcher, bloom.New(filterSize(filterRoom(n))), nil)
		return
	}
	b := &filterBuild{customer: ws.customer, watcher: watcher}
	if s.builder.start(b) {
		ws.builds = append(ws.builds, b)
	}
}

// filterReady runs filterReady: a build of a registration that still
// stands is completed and sent; one of a watcher that left, or of
// watchers a take or a restart reset, is dropped.
func (s shard) filterReady(b *filterBuild) {
	ws := s.watchers[b.customer]
	if ws == nil {
		return
	}
	i := slices.Index(ws.builds, b)
	if i < 0 {
		return
	}
	ws.builds = slices.Delete(ws.builds, i, i+1)
	pushed, lost := ws.pushed, ws.pushedLost
	if len(ws.builds) == 0 {
		ws.pushed, ws.pushedLost = nil, false
	}
	if b.f == nil {
		return // logged by the builder
	}
	if lost {
		s.log.Warn("devicehist: no existence filter for a watcher: too many records changed while it was built", "customer", ws.customer)
		return
	}
	s.sendFilter(ws, b.watcher, b.f, pushed)
}

// sendFilter adds the customer's records in memory (among them those whose
// write failed, which the store lacks) and pushed to f, and sends it to
// the watcher.
func (s shard) sendFilter(ws *watchSet, watcher uint64, f *bloom.BloomFilter, pushed []string) {
	sink := s.sink.Load()
	if sink == nil {
		return
	}
	s.rangeCustomer(ws.customer, func(r storage.HistRecord, _ int64) {
		f.Add(filterKeyOf(s.fkey[:0], r))
	})
	for _, k := range pushed {
		f.AddString(k)
	}
	b := encodeFilter(f)
	if len(b) > maxFilterBytes { // filterSize keeps it under; a guard
		s.log.Warn("devicehist: no existence filter for a watcher: too large", "customer", ws.customer, "bytes", len(b))
		return
	}
	(*sink)(MirrorPush{Watcher: watcher, Customer: ws.customer, Filter: b})
}

// rangeCustomer calls fn with each of the customer's records in the
// shard's memory and when it was last used. It walks every entry of the
// shard: first watches are rare.
func (s shard) rangeCustomer(customer string, fn func(r storage.HistRecord, touched int64)) {
	s.devices.Range(func(k deviceKey, e *deviceEntry) bool {
		if k.customer == customer {
			fn(&e.rec, e.touched)
		}
		return true
	})
	s.accounts.Range(func(k accountKey, e *accountEntry) bool {
		if k.customer == customer {
			fn(&e.rec, e.touched)
		}
		return true
	})
	s.addresses.Range(func(k addressKey, e *addressEntry) bool {
		if k.customer == customer {
			fn(&e.rec, e.touched)
		}
		return true
	})
}

// trackPushed notes a present record pushed while a filter of its
// customer is being built: the filter is sent with it.
func (s shard) trackPushed(r storage.HistRecord) {
	ws := s.watchers[storage.HistCustomerOf(r)]
	if ws == nil || len(ws.builds) == 0 || ws.pushedLost {
		return
	}
	if len(ws.pushed) >= maxFilterPushed {
		ws.pushed, ws.pushedLost = nil, true
		return
	}
	ws.pushed = append(ws.pushed, string(filterKeyOf(s.fkey[:0], r)))
}

// Holder side.

// applyFilter keeps a pushed filter as the customer's (replacing any
// before), with every record the mirror holds added.
func (s shard) applyFilter(p *MirrorPush) {
	f, err := decodeFilter(p.Filter)
	if err != nil {
		s.log.Warn("devicehist: mirror filter dropped", "customer", p.Customer, "err", err)
		return
	}
	set := s.mirrorSetOf(p.Customer)
	e := newExistence(f)
	for _, m := range set.devices {
		e.add(filterKeyOf(s.fkey[:0], &m.rec))
	}
	for _, m := range set.accounts {
		e.add(filterKeyOf(s.fkey[:0], &m.rec))
	}
	for _, m := range set.addrs {
		e.add(filterKeyOf(s.fkey[:0], &m.rec))
	}
	set.filter, set.filterTouched = e, s.clock
}

// existence is a holder's existence filter of one customer: the owner's
// filter, then, once the records pushed since have filled it to filterFP,
// layers of the holder's own for the records pushed after it (a scalable
// Bloom filter: each layer sized for twice the keys of the one before, the
// first at a quarter of filterFP and each next at half the rate of the one
// before, so the union stays near 1.5 filterFP: 1.53% measured with forty
// times the keys the owner sized for). The owner sizes its filter for the
// customer as it is at the first watch; a young customer's then fills as
// it grows, and at four times its keys it says "may exist" of two records
// in three that nobody holds, each of which sends its evaluation to the
// owner.
type existence struct {
	layers []*bloom.BloomFilter
	// room: the keys the newest layer takes before the next is made;
	// keys: what the newest was sized for; fp: the next one's rate;
	// bits: all layers'.
	room, keys int
	fp         float64
	bits       uint
}

// maxExistenceBits bounds one customer's layers on a holder (the size of
// the largest filter it accepts): past it the newest layer takes every
// key, its rate rising, as a single filter's would.
const maxExistenceBits = maxFilterBits

// minLayerKeys is the smallest layer a holder adds.
const minLayerKeys = 1024

// filterKeys is how many keys a filter of m bits holds at filterFP.
func filterKeys(m uint) int {
	return int(float64(m) * math.Ln2 * math.Ln2 / -math.Log(filterFP))
}

// filled estimates the keys in f from its bits set, as the library's
// ApproximatedSize does, but reads a filter with every bit set (which no
// owner sizes, but one could send) as full rather than as an overflowed
// count.
func filled(f *bloom.BloomFilter) int {
	m, x := float64(f.Cap()), float64(f.BitSet().Count())
	if x >= m {
		return math.MaxInt
	}
	return int(-m / float64(f.K()) * math.Log1p(-x/m))
}

func newExistence(f *bloom.BloomFilter) *existence {
	keys := filterKeys(f.Cap())
	return &existence{
		layers: []*bloom.BloomFilter{f},
		room:   keys - filled(f),
		keys:   keys,
		fp:     filterFP / 4,
		bits:   f.Cap(),
	}
}

// test reports whether some layer may hold key.
func (e *existence) test(key []byte) bool {
	for _, l := range e.layers {
		if l.Test(key) {
			return true
		}
	}
	return false
}

// add adds key (a key some layer may hold already is not added again, so
// room counts distinct keys), first adding a layer when the newest is full.
func (e *existence) add(key []byte) {
	if e.test(key) {
		return
	}
	if e.room <= 0 {
		keys := max(2*e.keys, minLayerKeys)
		m, k := bloom.EstimateParameters(uint(keys), e.fp)
		if e.bits+m <= maxExistenceBits {
			e.layers = append(e.layers, bloom.New(m, k))
			e.room, e.keys, e.fp, e.bits = keys, keys, e.fp/2, e.bits+m
		}
	}
	e.layers[len(e.layers)-1].Add(key)
	e.room--
}

// surelyAbsent reports whether the set's filter says the owner holds no
// record under key (no filter: it cannot say).
func (set *mirrorSet) surelyAbsent(key []byte, now int64) bool {
	if set.filter == nil || set.filter.test(key) {
		return false
	}
	set.filterTouched = now
	return true
}
