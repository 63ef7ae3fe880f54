package cluster

import (
	"hash/fnv"
	"sort"
)

// Owner is the desired owner of a shard among the live members: the member
// with the highest rendezvous (highest random weight) score. Every node
// computes the same answer from the same member set, and a change of the set
// moves only the shards whose top member came or went: about 1/N of them on
// a join, exactly the leaver's on a leave. "" when there are no members.
func Owner(k Kind, shard int, members []string) string {
	best, bestScore := "", uint64(0)
	for _, m := range members {
		s := score(k, shard, m)
		if best == "" || s > bestScore || (s == bestScore && m < best) {
			best, bestScore = m, s
		}
	}
	return best
}

// Assign gives the desired owner of every shard of kind k.
func Assign(k Kind, members []string) []string {
	out := make([]string, Shards(k))
	for s := range out {
		out[s] = Owner(k, s, members)
	}
	return out
}

// score hashes (kind, shard, member) and mixes the result (splitmix64's
// finalizer): FNV alone leaves nearby shard numbers with correlated scores.
func score(k Kind, shard int, member string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(k))
	h.Write([]byte{0, byte(shard >> 8), byte(shard), 0})
	h.Write([]byte(member))
	z := h.Sum64()
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Plan is what one member must do to reach the desired assignment.
type Plan struct {
	// Claim lists shards the member should own and nobody owns.
	Claim []int
	// Release lists shards the member owns and should hand over (after
	// flushing them).
	Release []int
}

// PlanFor compares the desired assignment over members with owners (shard →
// current owner, "" or absent when unowned) for member self. A shard owned
// by another member is left alone: its owner releases it, and self claims it
// once the release shows in the owner view.
func PlanFor(k Kind, self string, members []string, owners map[int]string) Plan {
	ms := append([]string(nil), members...)
	sort.Strings(ms)
	var p Plan
	for s := 0; s < Shards(k); s++ {
		want, cur := Owner(k, s, ms), owners[s]
		switch {
		case want == self && cur == "":
			p.Claim = append(p.Claim, s)
		case cur == self && want != self:
			p.Release = append(p.Release, s)
		}
	}
	return p
}
