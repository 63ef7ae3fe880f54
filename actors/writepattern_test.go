package actors_test

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/actors/devicehist"
	"github.com/fraudd/fraudd/actors/events"
	"github.com/fraudd/fraudd/actors/quota"
	"github.com/fraudd/fraudd/internal/secrets"
	"github.com/fraudd/fraudd/storage"
)

// BenchmarkLiveWrites drives the store writes of live evaluations — the
// quota charge, the device event's use and the device-history observation —
// through the real actors into Pebble on disk, from 16 concurrent callers,
// with the default group sync: one customer, Zipf-distributed devices,
// end-user accounts and addresses (a long tail, a few hot ones). It reports
// Pebble commits and keys per evaluation and Pebble's write amplification
// (WAL, flushes and compactions over the bytes written to the WAL). Run it
// with a fixed count to compare store options:
//
//	go test ./actors -run X -bench LiveWrites -benchtime 400000x
//
// cpu-µs/eval is the process's CPU time (user + system, every goroutine:
// the actors, the commits, Pebble's flushes and compactions) per
// evaluation. FRAUDD_BENCH_MEMTABLE_MB sets Pebble's memtable size to
// compare its cost in CPU as well as in write amplification.
func BenchmarkLiveWrites(b *testing.B) {
	log := slog.New(slog.DiscardHandler)
	var mem int64
	if v := os.Getenv("FRAUDD_BENCH_MEMTABLE_MB"); v != "" {
		mb, err := strconv.Atoi(v)
		if err != nil || mb <= 0 {
			b.Fatalf("FRAUDD_BENCH_MEMTABLE_MB=%q: want a positive number of MiB", v)
		}
		mem = int64(mb) << 20
	}
	db, err := storage.Open(b.TempDir(), storage.Options{Logger: log, MemTableBytes: mem})
	if err != nil {
		b.Fatal(err)
	}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return log }))
	defer sys.Shutdown()
	q := quota.New(sys.Root, quota.Config{Store: db, Logger: log})
	dev := events.New(sys.Root, events.Config{Store: db, Logger: log})
	hist, err := devicehist.New(sys.Root, devicehist.Config{Store: db, Secret: secrets.FromBytes([]byte("bench")), Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	const (
		customer = "acc_00000000000000001"
		visitors = 50000
		accounts = 100000
		addrs    = 50000
	)
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	// Every visitor collected one event before the run.
	ids := make([]events.EventID, visitors)
	for i := range ids {
		v := fmt.Sprintf("%032x", i)
		ids[i] = events.NewEventID(v, t0)
		dev.Record(&storage.DeviceEvent{ID: ids[i], Account: customer, Created: t0, VisitorID: v, Signals: make([]byte, 600)})
	}
	if err := db.Sync(); err != nil {
		b.Fatal(err)
	}
	limits := quota.LimitsFor(quota.PlanCustom, nil, nil, t0, t0)
	var next atomic.Int64
	before := db.WriteStats()
	cpu0 := processCPU()
	b.ResetTimer()
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			zv := rand.NewZipf(r, 1.1, 8, visitors-1)
			za := rand.NewZipf(r, 1.1, 8, accounts-1)
			zi := rand.NewZipf(r, 1.1, 8, addrs-1)
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				now := t0.Add(time.Duration(i) * 200 * time.Microsecond) // 5,000 evaluations a second
				if _, err := q.Charge(quota.Charge{Account: customer, Limits: limits, Hourly: true, Monthly: true, Total: true, Now: now}); err != nil {
					b.Error(err)
					return
				}
				o := devicehist.Observation{Customer: customer, EventID: fmt.Sprintf("n%d", i), Now: now}
				if r.Float64() < 0.7 {
					v := zv.Uint64()
					res, err := dev.Resolve(events.Resolve{ID: ids[v], Account: customer, Now: now})
					if err != nil || !res.Found {
						b.Error(err)
						return
					}
					o.EventID = events.FormatEventID(ids[v])
					o.DeviceID = res.Event.VisitorID
				}
				if r.Float64() < 0.6 {
					o.AccountID = fmt.Sprintf("u_%06d", za.Uint64())
					a := zi.Uint64()
					o.IP = netip.AddrFrom4([4]byte{73, byte(a >> 16), byte(a >> 8), byte(a)})
				}
				if _, err := hist.Observe(o); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	_ = hist.Stop()
	_ = dev.Stop()
	_ = q.Stop()
	after := db.WriteStats()
	n := float64(b.N)
	b.ReportMetric(float64(processCPU()-cpu0)/1e3/n, "cpu-µs/eval")
	b.ReportMetric(float64(after.Commits-before.Commits)/n, "commits/eval")
	b.ReportMetric(float64(after.Keys-before.Keys)/n, "keys/eval")
	b.ReportMetric(float64(after.HistJournalled-before.HistJournalled)/float64(max(after.HistChanges-before.HistChanges, 1)), "hist-journalled/change")
	if f := after.HistFolded - before.HistFolded; f > 0 {
		b.ReportMetric(float64(after.HistJournalled-before.HistJournalled)/float64(f), "hist-journalled/folded")
	}
	b.ReportMetric(float64(after.Syncs-before.Syncs)/n, "syncs/eval")
	m := db.PebbleMetrics()
	tot := m.Total()
	b.ReportMetric(tot.WriteAmp(), "write-amp")
	b.ReportMetric(float64(m.Flush.Count), "flushes")
	b.ReportMetric(float64(m.Compact.Count), "compactions")
	b.ReportMetric(float64(m.WAL.BytesWritten)/n, "wal-B/eval")
	b.ReportMetric(float64(tot.TableBytesFlushed+tot.TableBytesCompacted-m.WAL.BytesWritten)/n, "sst-B/eval")
	if testing.Verbose() {
		b.Log("\n" + m.String())
	}
	if err := db.Close(); err != nil {
		b.Fatal(err)
	}
}

// processCPU is the process's user + system CPU time so far, in ns.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
