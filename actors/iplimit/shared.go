package iplimit

import (
	"errors"
	"fmt"
	"time"
)

// What nodes exchange in cluster mode (docs/cluster.md, "Per-address limits
// across nodes"): each node counts the requests it admits as on one node and
// hands what it admitted since the last report to the address shard's
// owner (Export); the owner sums every node's and answers each node the
// others' part of each window, and the lockouts it set (Absorb). A Take
// then checks its own count plus the others' against the limit.

// Key names one counter as nodes exchange it: a limiter's window, for one
// address or, with P64, for the IPv6 /64 in Hi. Hi and Lo are the address's
// 16 bytes, an IPv4 address mapped into IPv6.
type Key struct {
	Hi, Lo uint64
	Kind   Kind
	Win    uint8
	P64    bool
}

// Count is what this node admitted under Key since its last report, in its
// window that began at Start (Unix ns).
type Count struct {
	Key   Key
	Start int64
	N     int64
}

// Sum is the owner's answer for a Key: the other nodes' requests (Others)
// in the owner's window that began at Start.
type Sum struct {
	Key    Key
	Start  int64
	Others int64
}

// Lock is a lockout the owner set for an address (or, with P64, a /64)
// once the nodes' invalid credentials together reached the limit; it ends
// at Until (Unix ns).
type Lock struct {
	Hi, Lo uint64
	P64    bool
	Until  int64
}

// ErrBadKey is a Key no limiter has (a peer of another version, or garbage).
var ErrBadKey = errors.New("iplimit: no such limiter window")

// Limit is the key's window, its figure (per address or per /64), and the
// lockout the limiter sets on reaching it (0 for a plain limit).
func (k Key) Limit() (length time.Duration, limit int64, lockFor time.Duration, err error) {
	if k.Kind >= NumKinds || int(k.Win) >= len(Rules[k.Kind].Windows) {
		return 0, 0, 0, fmt.Errorf("%w: kind %d window %d", ErrBadKey, k.Kind, k.Win)
	}
	r := &Rules[k.Kind]
	w := r.Windows[k.Win]
	switch {
	case !k.P64:
		return w.Len, w.PerAddr, r.LockFor, nil
	case w.Per64 == 0 || k.Lo != 0 || k.v4():
		return 0, 0, 0, fmt.Errorf("%w: %s has no /64 limit here", ErrBadKey, r.Name)
	}
	return w.Len, w.Per64, r.LockFor, nil
}

// Local reports whether k's limiter is each member's own (Rule.Local): an
// owner leaves such a count out of its sums, also from a member of an
// older build that reported it.
func (k Key) Local() bool { return k.Kind < NumKinds && Rules[k.Kind].Local }

func (k Key) v4() bool { return k.Hi == 0 && k.Lo>>32 == 0xffff }

// Route is the value that places the key's address: the address for IPv4,
// the /64 for IPv6, so that an address and its /64 always meet in one shard
// (of this node's actors, and of the cluster's address shards).
func (k Key) Route() uint64 {
	if k.v4() {
		return k.Lo
	}
	return k.Hi
}

// Route is Key.Route of the lock's address.
func (l Lock) Route() uint64 { return Key{Hi: l.Hi, Lo: l.Lo, P64: l.P64}.Route() }

// Live reports whether a window of length that began at start still runs at
// now (Unix ns), as a Take sees it: an owner summing windows uses the same
// rule.
func Live(start int64, length time.Duration, now int64) bool { return live(start, length, now) }

func keyOf(k slotKey) Key {
	return Key{Hi: k.hi, Lo: k.lo, Kind: k.kind, Win: k.win, P64: k.scope == scope64}
}

func (k Key) slot() slotKey {
	s := slotKey{hi: k.Hi, lo: k.Lo, kind: k.Kind, win: k.Win, scope: scopeAddr}
	if k.P64 {
		s.scope = scope64
	}
	return s
}

// maxPending bounds the counts a shard keeps between two reports: past it
// (an address sweep faster than the reports) further counters stay this
// node's alone until the next report.
const maxPending = 1 << 16

// note records n requests counted under k (window start) for the next
// report; a no-op unless the limiter is shared.
func (l *limiter) note(k slotKey, start, n int64) {
	if l.pending == nil || Rules[k.kind].Local {
		return
	}
	p, ok := l.pending[k]
	if !ok && len(l.pending) >= maxPending {
		return
	}
	if p.start != start {
		// The window started again since the last report: what was noted
		// belongs to the old one, which the owner counts on its own.
		p = pend{start: start}
	}
	p.n += n
	l.pending[k] = p
}

// export hands over what was counted since the last export.
func (l *limiter) export(out []Count) []Count {
	for k, p := range l.pending {
		out = append(out, Count{Key: keyOf(k), Start: p.start, N: p.n})
	}
	clear(l.pending)
	return out
}

// absorb takes the owner's sums and lockouts as of now (Unix ns).
func (l *limiter) absorb(sums []Sum, locks []Lock, ns int64) {
	for _, s := range sums {
		length, _, _, err := s.Key.Limit()
		if err != nil || s.Others < 0 {
			continue
		}
		k := s.Key.slot()
		cur, ok := l.t.Get(k)
		if !ok || !live(cur.start, length, ns) {
			if !live(s.Start, length, ns) || s.Others == 0 {
				continue
			}
			// No count here in a live window: the others' requests start
			// one, at the owner's start.
			if l.max > 0 && l.held()+1 > l.max {
				l.relieve(ns)
			}
			cur = slot{start: s.Start}
		}
		cur.others = s.Others
		l.t.Put(k, cur)
	}
	for _, lk := range locks {
		if lk.Until <= ns {
			continue
		}
		k := Key{Hi: lk.Hi, Lo: lk.Lo, Kind: AuthFail, P64: lk.P64}.slot()
		k.win = lockSlot
		if cur, ok := l.locks.Get(k); ok && cur.start >= lk.Until {
			continue
		}
		l.locks.Put(k, slot{start: lk.Until, n: 1})
	}
}
