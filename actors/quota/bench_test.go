package quota

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/storage"
)

var benchAccounts = func() []string {
	a := make([]string, 1024)
	for i := range a {
		a[i] = fmt.Sprintf("acc_%04d", i)
	}
	return a
}()

// BenchmarkCharge measures the quota hop: one Charge from the caller to the
// account's shard and back on a pooled channel.
//
//	hop: an hourly-only charge (answered from memory at once)
//	durable-memfs: a counted charge whose answer waits for the group commit (in-memory FS: no fsync cost)
//	durable-disk/strict: the same on the real filesystem, one caller (every charge waits for its own fsync)
//	durable-disk-256/strict: 256 concurrent callers (group commit: many charges per fsync)
//	durable-disk…/interval: the default mode (the answer waits for the commit; the group sync is off the answer path)
func BenchmarkCharge(b *testing.B) {
	l := custom(1<<40, 1<<40)
	run := func(b *testing.B, c *Client, monthly bool, par int) {
		var i atomic.Int64
		b.ReportAllocs()
		b.ResetTimer()
		charge := func(n int64) {
			r, err := c.Charge(Charge{Account: benchAccounts[n&1023], Limits: l, Hourly: true, Monthly: monthly, Total: monthly, Now: t0})
			if err != nil || !r.Allowed {
				b.Fatal(r, err)
			}
		}
		if par == 0 {
			for n := range b.N {
				charge(int64(n))
			}
		} else {
			b.SetParallelism(par)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					charge(i.Add(1))
				}
			})
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "charges/s")
		if g, d := c.Stats(); g > 0 {
			b.ReportMetric(float64(d)/float64(g), "deltas/commit")
		}
	}
	b.Run("hop", func(b *testing.B) {
		c := New(quietSystem().Root, Config{Shards: 4})
		defer c.Stop()
		run(b, c, false, 0)
	})
	b.Run("hop-parallel", func(b *testing.B) {
		c := New(quietSystem().Root, Config{Shards: 4})
		defer c.Stop()
		run(b, c, false, 64/runtime.GOMAXPROCS(0))
	})
	b.Run("durable-memfs", func(b *testing.B) {
		db, _ := storage.Open("q", storage.Options{FS: vfs.NewMem()})
		defer db.Close()
		c := New(quietSystem().Root, Config{Shards: 4, Store: db})
		defer c.Stop()
		run(b, c, true, 0)
	})
	for _, par := range []int{1, 256} {
		for _, mode := range []storage.Durability{storage.Strict, storage.Interval} {
			name := "durable-disk"
			if par > 1 {
				name = fmt.Sprintf("durable-disk-%d", par)
			}
			b.Run(name+"/"+mode.String(), func(b *testing.B) {
				db, err := storage.Open(b.TempDir(), storage.Options{Durability: mode})
				if err != nil {
					b.Fatal(err)
				}
				defer db.Close()
				c := New(quietSystem().Root, Config{Shards: 4, Store: db})
				defer c.Stop()
				if par == 1 {
					run(b, c, true, 0)
				} else {
					run(b, c, true, par/runtime.GOMAXPROCS(0))
				}
			})
		}
	}
}

// TestChargeAllocs pins the hop's allocations: ours are zero; protoactor
// allocates one goroutine closure when it wakes an idle mailbox.
func TestChargeAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race")
	}
	c := New(quietSystem().Root, Config{Shards: 2})
	defer c.Stop()
	l := custom(1<<40, 1<<40)
	ch := Charge{Account: "acc_1", Limits: l, Hourly: true, Now: t0}
	c.Charge(ch)
	if n := testing.AllocsPerRun(2000, func() { c.Charge(ch) }); n > 1 {
		t.Fatalf("%.1f allocations per charge, want ≤ 1", n)
	}
}
