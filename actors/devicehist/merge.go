package devicehist

import (
	"cmp"
	"slices"

	"github.com/fraudd/fraudd/storage"
)

// Merging two copies of one record. In cluster mode a customer's history
// lives at the owner of its account shard; records another node wrote (the
// shard's previous owner handing it over, a returning node after a failover,
// a lease holder's local observations) travel there and are merged into
// what the owner holds. Each observation is recorded at one node, once, and
// a record travels only after it left the node that holds it (Client.Take),
// so counts add: the merge of two disjoint records is the record that seeing
// both sets of observations at one node would have made — exactly for the
// visit counts and links; the event-id list keeps the most recent maxEvents
// of the union, and an event resubmitted to two nodes was counted at each.
// The bounded lists keep their most recently seen entries, as on one node.

// mergeDevice adds src's visits and links into dst (same identity).
func mergeDevice(dst, src *storage.HistCustomerDevice) {
	srcNewer := src.LastSeen > dst.LastSeen
	dst.LastSeen = max(dst.LastSeen, src.LastSeen)
	dst.Days = mergeSorted(dst.Days, src.Days, func(d storage.DayVisits) storage.Day { return d.Day },
		func(a, b storage.DayVisits) storage.DayVisits {
			first := a.First
			if first == 0 || b.First != 0 && b.First < first {
				first = b.First
			}
			return storage.DayVisits{Day: a.Day, N: a.N + b.N, First: first}
		})
	dst.Hours = mergeSorted(dst.Hours, src.Hours, func(h storage.HourCount) uint32 { return h.Hour },
		func(a, b storage.HourCount) storage.HourCount { return storage.HourCount{Hour: a.Hour, N: a.N + b.N} })
	// Event ids carry no time: the record seen last holds the most recent
	// ones, so the other's go before them and the oldest make room.
	var add []uint64
	for _, ev := range src.Events {
		if !slices.Contains(dst.Events, ev) && !slices.Contains(add, ev) {
			add = append(add, ev)
		}
	}
	if srcNewer {
		dst.Events = append(dst.Events, add...)
	} else {
		dst.Events = append(add, dst.Events...)
	}
	if n := len(dst.Events); n > maxEvents {
		dst.Events = append(dst.Events[:0], dst.Events[n-maxEvents:]...)
	}
	dst.Accounts = mergeLinks(dst.Accounts, src.Accounts, maxLinks,
		func(l storage.SeenAccount) storage.AccountHash { return l.Hash }, func(l storage.SeenAccount) int64 { return l.Last },
		func(l *storage.SeenAccount, last int64) { l.Last = last })
}

// mergeAccount adds src's checks and links into dst (same identity).
func mergeAccount(dst, src *storage.HistAccount) {
	if len(dst.Sealed) == 0 {
		dst.Sealed = src.Sealed
	}
	if dst.FirstCheck == 0 || src.FirstCheck != 0 && src.FirstCheck < dst.FirstCheck {
		dst.FirstCheck = src.FirstCheck
	}
	dst.LastCheck = max(dst.LastCheck, src.LastCheck)
	dst.Devices = mergeLinks(dst.Devices, src.Devices, maxAccountDevices,
		func(d storage.SeenDevice) string { return d.ID }, func(d storage.SeenDevice) int64 { return d.Last },
		func(d *storage.SeenDevice, last int64) { d.Last = last })
	dst.Addrs = mergeLinks(dst.Addrs, src.Addrs, maxAccountAddrs,
		func(a storage.SeenAddr) [16]byte { return a.Addr.As16() }, func(a storage.SeenAddr) int64 { return a.Last },
		func(a *storage.SeenAddr, last int64) { a.Last = last })
}

// mergeAddress adds src's links into dst (same identity).
func mergeAddress(dst, src *storage.HistAddress) {
	dst.Accounts = mergeLinks(dst.Accounts, src.Accounts, maxLinks,
		func(l storage.SeenAccount) storage.AccountHash { return l.Hash }, func(l storage.SeenAccount) int64 { return l.Last },
		func(l *storage.SeenAccount, last int64) { l.Last = last })
}

// mergeSorted merges two lists ordered by key into one, combining the
// entries of equal keys with both. A list out of order (a clock set back
// on one node) is sorted first, so the result is always ordered.
func mergeSorted[T any, K cmp.Ordered](a, b []T, key func(T) K, both func(T, T) T) []T {
	byKey := func(x, y T) int { return cmp.Compare(key(x), key(y)) }
	if !slices.IsSortedFunc(a, byKey) {
		slices.SortStableFunc(a, byKey)
	}
	if len(b) == 0 {
		return a
	}
	if !slices.IsSortedFunc(b, byKey) {
		b = slices.Clone(b)
		slices.SortStableFunc(b, byKey)
	}
	out := make([]T, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || i < len(a) && key(a[i]) < key(b[j]):
			out = append(out, a[i])
			i++
		case i == len(a) || key(b[j]) < key(a[i]):
			out = append(out, b[j])
			j++
		default:
			out = append(out, both(a[i], b[j]))
			i++
			j++
		}
	}
	return out
}

// mergeLinks unions two link lists by identity, keeping the later time of
// each; past limit the least recently seen go, as linkAccount would have
// dropped them.
func mergeLinks[T any, K comparable](dst, src []T, limit int, id func(T) K, last func(T) int64, set func(*T, int64)) []T {
	for _, s := range src {
		i := slices.IndexFunc(dst, func(d T) bool { return id(d) == id(s) })
		if i >= 0 {
			set(&dst[i], max(last(dst[i]), last(s)))
			continue
		}
		dst = append(dst, s)
	}
	if len(dst) > limit {
		slices.SortStableFunc(dst, func(a, b T) int { return cmp.Compare(last(b), last(a)) })
		clear(dst[limit:])
		dst = dst[:limit]
	}
	return dst
}
