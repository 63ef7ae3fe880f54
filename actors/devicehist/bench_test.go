package devicehist

import (
	"fmt"
	"log/slog"
	"net/netip"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fraudd/fraudd/storage"
)

// benchObs is a fixed population: 64 customers, 256 devices, 512 accounts,
// 128 addresses, so the bench measures the steady state (entries resident).
var benchObs = func() []Observation {
	out := make([]Observation, 4096)
	for i := range out {
		out[i] = Observation{
			Customer:  fmt.Sprintf("acc_%017d", i%64),
			EventID:   fmt.Sprintf("ev_%032d", i),
			DeviceID:  fmt.Sprintf("%020x", i%256),
			AccountID: fmt.Sprintf("user-%d", i%512),
			IP:        netip.AddrFrom4([4]byte{73, 0, byte(i % 128), 1}),
		}
	}
	return out
}()

// BenchmarkObserve measures the Observe hop: one Send to the customer's shard,
// the state update, and the reply on a pooled channel.
//
//	device+account: a full observation (device, account, address)
//	device-only / account-only: the partial ones
//	parallel: 64 callers
//	store-memfs: with the store (dirty marking; a flush per sync interval, in-memory FS)
//	store-disk: the same on the real filesystem (the caller never waits for a write)
func BenchmarkObserve(b *testing.B) {
	run := func(b *testing.B, c *Client, edit func(*Observation), par int) {
		var n atomic.Int64
		obs := append([]Observation(nil), benchObs...)
		if edit != nil {
			for i := range obs {
				edit(&obs[i])
			}
		}
		one := func(i int64) {
			o := obs[i&4095]
			o.Now = t0.Add(time.Duration(i) * time.Millisecond)
			if _, err := c.Observe(o); err != nil {
				b.Fatal(err)
			}
		}
		for i := range 4096 { // warm: every entry resident
			one(int64(i))
		}
		b.ReportAllocs()
		b.ResetTimer()
		if par == 0 {
			for i := range b.N {
				one(int64(4096 + i))
			}
		} else {
			b.SetParallelism(par)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					one(4096 + n.Add(1))
				}
			})
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "obs/s")
	}
	b.Run("device+account", func(b *testing.B) { run(b, newClient(b, Config{Shards: 4}), nil, 0) })
	b.Run("device-only", func(b *testing.B) {
		run(b, newClient(b, Config{Shards: 4}), func(o *Observation) { o.AccountID = "" }, 0)
	})
	b.Run("account-only", func(b *testing.B) {
		run(b, newClient(b, Config{Shards: 4}), func(o *Observation) { o.DeviceID, o.EventID = "", "" }, 0)
	})
	b.Run("parallel", func(b *testing.B) {
		run(b, newClient(b, Config{Shards: 4}), nil, 64/runtime.GOMAXPROCS(0))
	})
	// With a store, report what reaches Pebble per observation (warm-up
	// included): records changed within one sync interval are written once.
	withStore := func(b *testing.B, db *storage.DB) {
		c := newClient(b, Config{Shards: 4, Store: db})
		before := db.WriteStats()
		run(b, c, nil, 0)
		_ = c.Stop()
		after := db.WriteStats()
		n := float64(b.N + 4096)
		b.ReportMetric(float64(after.Commits-before.Commits)/n, "commits/obs")
		b.ReportMetric(float64(after.Keys-before.Keys)/n, "keys/obs")
		_ = db.Close()
	}
	b.Run("store-memfs", func(b *testing.B) { withStore(b, openDB(b, vfs.NewMem())) })
	b.Run("store-disk", func(b *testing.B) {
		db, err := storage.Open(b.TempDir(), storage.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		withStore(b, db)
	})
}

// TestObserveAllocs pins the hop's allocations in the steady state: ours are
// zero; protoactor allocates its mailbox node per message.
func TestObserveAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race")
	}
	c := newClient(t, Config{Shards: 2})
	o := benchObs[0]
	i := 0
	obs := func() {
		i++
		o.Now = t0.Add(time.Duration(i) * time.Second)
		if _, err := c.Observe(o); err != nil {
			t.Fatal(err)
		}
	}
	obs()
	if n := testing.AllocsPerRun(2000, obs); n > 1 {
		t.Fatalf("%.1f allocations per observation, want ≤ 1", n)
	}
}
