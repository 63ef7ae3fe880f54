package iplimit

import (
	"net/netip"
	"slices"
	"time"

	"github.com/fraudd/fraudd/actors"
)

// Verdict is the answer to a Take.
type Verdict struct {
	Allowed bool
	// Kind is the limiter that refused (meaningful when !Allowed).
	Kind Kind
	// RetryAfter is set on a refusal: whole seconds (≥ 1) until every window
	// that refused has ended, or until the lockout ends.
	RetryAfter int64
}

const (
	scopeAddr uint8 = iota
	scope64
)

// lockSlot is the window index of a lockout's key (in limiter.locks).
const lockSlot = 0xff

// slotKey names one counter: an address (or /64), a limiter and one of its windows.
type slotKey struct {
	hi, lo uint64
	kind   Kind
	win    uint8
	scope  uint8
}

// slot is one fixed window: it began at start (Unix ns) and has n requests
// counted here and, in cluster mode, others counted by the other nodes (as
// of the owner's last answer). For a lock slot, start is when the lock ends.
type slot struct {
	start  int64
	n      int64
	others int64
}

// pend is what a shared limiter counted under one key since its last report.
type pend struct {
	start int64
	n     int64
}

// addrKeys returns the address key and, for IPv6, the /64 key.
func addrKeys(a netip.Addr) (addr slotKey, p64 slotKey, v6 bool) {
	a = a.Unmap()
	b := a.As16()
	hi := be64(b[:8])
	lo := be64(b[8:])
	addr = slotKey{hi: hi, lo: lo, scope: scopeAddr}
	if a.Is6() {
		return addr, slotKey{hi: hi, scope: scope64}, true
	}
	return addr, slotKey{}, false
}

func be64(b []byte) uint64 {
	_ = b[7]
	return uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
		uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
}

// shardHash routes an address so that it and its /64 meet in one shard.
func shardHash(a netip.Addr) uint64 {
	k, _, v6 := addrKeys(a)
	if v6 {
		return actors.Mix64(k.hi)
	}
	return actors.Mix64(k.lo)
}

// limiter is one shard's counters. Plain struct, explicit now, no locks: the
// shard actor owns it.
type limiter struct {
	t *actors.Table[slotKey, slot]
	// locks are the running lockouts (start: when each ends), apart from
	// the counters: nearly always empty, so the check every Take makes
	// costs no hash-table probe (an empty map answers before hashing).
	locks *actors.Table[slotKey, slot]
	max   int // most counters and lockouts held; 0 = no bound
	// relieved counts counters dropped early because the table was full.
	relieved int
	// pending is what was counted since the last export (cluster mode
	// only; nil on a single node).
	pending map[slotKey]pend
}

func newLimiter(max int, shared bool) *limiter {
	l := &limiter{t: actors.NewTable[slotKey, slot](1024), locks: actors.NewTable[slotKey, slot](0), max: max}
	if shared {
		l.pending = make(map[slotKey]pend)
	}
	return l
}

// relieve makes room when the table is full (many distinct addresses inside
// the longest window, e.g. an IPv6 sweep): first ended windows go, then the
// least-used counters (1 request, then up to 16, then every counter). A
// running lockout goes only when lockouts alone hold more than half of what
// may remain (dropLocks). Dropping a counter only gives that address a fresh
// window, so heavy hitters, which have high counts, are the last to lose
// theirs. Invalid-credential counts go only after every other counter: they
// are what a lockout is built from, and a guesser who could flush them by
// filling the table with cheap requests would never be locked out. Each call
// frees at least a quarter of the table, so the cost is amortised over the
// inserts that filled it.
func (l *limiter) relieve(ns int64) {
	target := l.max * 3 / 4
	before := l.held()
	l.sweepNS(ns)
	if keep := target / 2; l.locks.Len() > keep {
		l.dropLocks(keep)
	}
	for _, most := range []int64{1, 16, 1 << 62} {
		if l.held() <= target {
			break
		}
		l.t.Sweep(func(k slotKey, s slot) bool { return Rules[k.kind].LockFor == 0 && s.n+s.others <= most })
	}
	if l.held() > target {
		l.t.Sweep(func(slotKey, slot) bool { return true })
	}
	l.relieved += before - l.held()
}

// dropLocks keeps the keep lockouts that end last. Lockouts alone may
// fill the table (a guesser spread over many addresses or /64s, 20 invalid
// keys each): left, they would take every counter with them at each
// relieve — every other limit off for the shard until they end — and
// their memory would have no bound. Those ending soonest go: they are
// closest to letting their address in anyway.
func (l *limiter) dropLocks(keep int) {
	ends := make([]int64, 0, l.locks.Len())
	l.locks.Range(func(_ slotKey, s slot) bool {
		ends = append(ends, s.start)
		return true
	})
	slices.Sort(ends)
	cut := ends[len(ends)-keep-1] // the latest end that goes
	dropped := 0
	over := len(ends) - keep
	l.locks.Sweep(func(_ slotKey, s slot) bool {
		if dropped < over && s.start <= cut {
			dropped++
			return true
		}
		return false
	})
}

// held counts the counters and lockouts held, what max bounds.
func (l *limiter) held() int { return l.t.Len() + l.locks.Len() }

func secondsUntil(end, now int64) int64 {
	d := end - now
	return max((d+int64(time.Second)-1)/int64(time.Second), 1)
}

// live reports whether a window of length that began at start still runs at
// now. A now a little before start is not a new window: requests are stamped
// before they queue for the shard, so one stamped earlier can arrive after
// one stamped later that opened the window (and a sweep tick is stamped the
// same way). Only a now a whole window before start — a test clock moved
// back — is outside it.
func live(start int64, length time.Duration, now int64) bool {
	return now < start+int64(length) && now > start-int64(length)
}

// current returns k's window as of now (empty when it is not live).
func (l *limiter) current(k slotKey, length time.Duration, now int64) slot {
	s, ok := l.t.Get(k)
	if !ok || !live(s.start, length, now) {
		return slot{}
	}
	return s
}

// maxProbes bounds the counters one Take touches (every window of every
// limiter, per address and per /64); a test checks the Rules table fits.
const maxProbes = 24

type probe struct {
	k slotKey
	s slot
}

// take checks every limiter in kinds for a; when all have room it counts the
// request in each of their windows, else it counts nothing.
func (l *limiter) take(kinds Kinds, a netip.Addr, now time.Time) Verdict {
	ns := now.UnixNano()
	ka, k64, v6 := addrKeys(a)
	var ps [24]probe
	np := 0
	for kind := Kind(0); kind < NumKinds; kind++ {
		if !kinds.Has(kind) {
			continue
		}
		r := &Rules[kind]
		var retry int64
		if r.LockFor > 0 {
			for _, k := range [2]slotKey{ka, k64} {
				if k == k64 && (!v6 || r.Windows[0].Per64 == 0) {
					continue
				}
				k.kind, k.win = kind, lockSlot
				if s, ok := l.locks.Get(k); ok && ns < s.start {
					retry = max(retry, secondsUntil(s.start, ns))
				}
			}
			if retry > 0 {
				return Verdict{Kind: kind, RetryAfter: retry}
			}
			continue
		}
		for wi, w := range r.Windows {
			for _, k := range [2]slotKey{ka, k64} {
				lim := w.PerAddr
				if k == k64 {
					if !v6 || w.Per64 == 0 {
						continue
					}
					lim = w.Per64
				}
				k.kind, k.win = kind, uint8(wi)
				s := l.current(k, w.Len, ns)
				if s.n+s.others >= lim {
					retry = max(retry, secondsUntil(s.start+int64(w.Len), ns))
				}
				if np < len(ps) {
					ps[np] = probe{k, s}
					np++
				}
			}
		}
		if retry > 0 {
			return Verdict{Kind: kind, RetryAfter: retry}
		}
	}
	if l.max > 0 && l.held()+np > l.max {
		l.relieve(ns)
	}
	for i := range ps[:np] {
		p := &ps[i]
		if p.s.n == 0 && p.s.others == 0 {
			p.s.start = ns
		}
		p.s.n++
		l.t.Put(p.k, p.s)
		l.note(p.k, p.s.start, 1)
	}
	return Verdict{Allowed: true}
}

// fail records an invalid credential from a against lockout kind and
// reports whether a is now locked out. Reaching the window's figure locks
// for LockFor.
func (l *limiter) fail(kind Kind, a netip.Addr, now time.Time) bool {
	ns := now.UnixNano()
	ka, k64, v6 := addrKeys(a)
	r := &Rules[kind]
	w := r.Windows[0]
	locked := false
	for _, k := range [2]slotKey{ka, k64} {
		lim := w.PerAddr
		if k == k64 {
			if !v6 || w.Per64 == 0 {
				continue
			}
			lim = w.Per64
		}
		k.kind = kind
		lk := k
		lk.win = lockSlot
		if s, ok := l.locks.Get(lk); ok && ns < s.start {
			locked = true // already locked: the lock is not extended
			continue
		}
		s := l.current(k, w.Len, ns)
		if s.n == 0 && s.others == 0 {
			s.start = ns
			if l.max > 0 && l.held()+2 > l.max {
				l.relieve(ns)
			}
		}
		s.n++
		l.note(k, s.start, 1)
		if s.n+s.others >= lim {
			l.t.Delete(k)
			l.locks.Put(lk, slot{start: ns + int64(r.LockFor), n: 1})
			locked = true
			continue
		}
		l.t.Put(k, s)
	}
	return locked
}

// sweep deletes every counter whose window is no longer live and every lock
// that has run out, and reports how many went. A counter that still carries
// requests of a live window stays, even when the tick was stamped before the
// window's first request (see live).
func (l *limiter) sweep(now time.Time) int { return l.sweepNS(now.UnixNano()) }

func (l *limiter) sweepNS(ns int64) int {
	n := l.locks.Sweep(func(_ slotKey, s slot) bool { return ns >= s.start })
	return n + l.t.Sweep(func(k slotKey, s slot) bool {
		return !live(s.start, Rules[k.kind].Windows[k.win].Len, ns)
	})
}
