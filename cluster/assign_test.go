package cluster

import (
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"testing"
)

func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("node-%02d", i)
	}
	return out
}

// TestAssignMovesFewShards: a join moves about 1/(N+1) of the shards, all to
// the newcomer; a leave moves exactly the leaver's shards; the order of the
// member list does not matter; no member gets far more than its share.
func TestAssignMovesFewShards(t *testing.T) {
	for _, k := range []Kind{KindAccount, KindAddr} {
		for _, n := range []int{1, 2, 3, 10, 50} {
			ms := names(n)
			before := Assign(k, ms)
			rev := slices.Clone(ms)
			slices.Reverse(rev)
			if !slices.Equal(before, Assign(k, rev)) {
				t.Fatalf("%s n=%d: assignment depends on member order", k, n)
			}
			load := map[string]int{}
			for _, o := range before {
				load[o]++
			}
			mean := float64(Shards(k)) / float64(n)
			for m, l := range load {
				if n <= 10 && float64(l) > 1.6*mean {
					t.Errorf("%s n=%d: %s owns %d shards, mean %.0f", k, n, m, l, mean)
				}
			}

			after := Assign(k, append(slices.Clone(ms), "newcomer"))
			moved := 0
			for s := range before {
				if before[s] != after[s] {
					moved++
					if after[s] != "newcomer" {
						t.Fatalf("%s n=%d: shard %d moved %s → %s on a join", k, n, s, before[s], after[s])
					}
				}
			}
			frac, want := float64(moved)/float64(Shards(k)), 1/float64(n+1)
			// Binomial spread: allow four standard deviations.
			sd := math.Sqrt(want * (1 - want) / float64(Shards(k)))
			if math.Abs(frac-want) > 4*sd+1e-9 {
				t.Errorf("%s n=%d: a join moved %.3f of the shards, want ≈ %.3f", k, n, frac, want)
			}

			if n == 1 {
				continue
			}
			leaver := ms[n/2]
			left := Assign(k, slices.Delete(slices.Clone(ms), n/2, n/2+1))
			for s := range before {
				if (before[s] != left[s]) != (before[s] == leaver) {
					t.Fatalf("%s n=%d: shard %d went %s → %s when %s left", k, n, s, before[s], left[s], leaver)
				}
			}
		}
	}
	if Owner(KindAccount, 0, nil) != "" {
		t.Fatal("an owner among no members")
	}
}

func TestPlanFor(t *testing.T) {
	ms := names(3)
	want := Assign(KindAddr, ms)
	owners := map[int]string{}
	for s, o := range want {
		owners[s] = o
	}
	if p := PlanFor(KindAddr, "node-01", ms, owners); len(p.Claim)+len(p.Release) != 0 {
		t.Fatalf("settled assignment, plan %+v", p)
	}

	// node-03 joins: the others release what it should own; it claims
	// nothing until they have.
	joined := append(slices.Clone(ms), "node-03")
	next := Assign(KindAddr, joined)
	released := 0
	for _, m := range ms {
		p := PlanFor(KindAddr, m, joined, owners)
		if len(p.Claim) != 0 {
			t.Fatalf("%s claims %v on a join", m, p.Claim)
		}
		for _, s := range p.Release {
			if owners[s] != m || next[s] != "node-03" {
				t.Fatalf("%s releases shard %d (owner %s, next %s)", m, s, owners[s], next[s])
			}
			delete(owners, s)
			released++
		}
	}
	p := PlanFor(KindAddr, "node-03", joined, owners)
	if len(p.Claim) != released || len(p.Release) != 0 || released == 0 {
		t.Fatalf("newcomer plan %d claims, %d releases; %d were released", len(p.Claim), len(p.Release), released)
	}
}

func TestShardOfAndRoot(t *testing.T) {
	if ShardOf(KindAccount, "acct_1") != ShardOf(KindAccount, "acct_1") {
		t.Fatal("ShardOf not stable")
	}
	seen := map[int]bool{}
	for i := range 10000 {
		a := fmt.Sprintf("acct_%d", i)
		s := ShardOf(KindAccount, a)
		h := fnv.New32a()
		h.Write([]byte(a))
		if want := int(h.Sum32() % AccountShards); s != want {
			t.Fatalf("ShardOf(%q) = %d, FNV-1a gives %d", a, s, want)
		}
		if s < 0 || s >= AccountShards {
			t.Fatalf("shard %d out of range", s)
		}
		seen[s] = true
	}
	if len(seen) < AccountShards*9/10 {
		t.Fatalf("10,000 accounts reach only %d shards", len(seen))
	}
	for _, bad := range []string{"", "a/b", "a b"} {
		if _, err := Root(bad); err == nil {
			t.Errorf("Root(%q) accepted", bad)
		}
	}
	if r, err := Root("prod"); err != nil || r != "/fraudd/prod/" {
		t.Fatalf("Root(prod) = %q, %v", r, err)
	}
	for _, c := range []struct {
		in string
		ok bool
	}{{"0000", true}, {"1023", true}, {"1024", false}, {"12", false}, {"12a4", false}} {
		if _, err := parseShard(c.in, KindAccount); (err == nil) != c.ok {
			t.Errorf("parseShard(%q): %v", c.in, err)
		}
	}
}
