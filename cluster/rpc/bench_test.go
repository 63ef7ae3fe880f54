package rpc

import (
	"log/slog"
	"syscall"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/actors/quota"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measureCPU reports the process CPU per operation from now to the end of
// b: both ends of a hop, as they share the process.
func measureCPU(b *testing.B) {
	start := cpuTime()
	b.Cleanup(func() {
		if b.N > 0 {
			b.ReportMetric(float64(cpuTime()-start)/float64(b.N)/1e3, "cpu-µs/op")
		}
	})
}

// uncapped never refuses, so every operation is a full charge.
var uncapped = quota.Charge{Account: "acct_bench", Kind: quota.Evaluate, Hourly: true, Now: testNow,
	Limits: quota.LimitsFor(quota.PlanPublicInterest, nil, nil, testNow, testNow)}

// BenchmarkRemoteCharge: one Charge from a non-owner through the routing
// client to the owner's Node service on loopback, whose memory-only quota
// actors charge it: the hop of docs/cluster.md's capacity model with the
// real messages. chained is the pipeline's ChargeThen (a worker makes the
// call and answers the step).
func BenchmarkRemoteCharge(b *testing.B) {
	addr, _ := serve(b, &fakeOwners{self: "a", owner: "a", token: 7})
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quietLog }))
	local := quota.New(sys.Root, quota.Config{Shards: 2, Logger: quietLog})
	b.Cleanup(func() { local.Stop() })
	q, err := NewQuota(QuotaConfig{Local: local, Owners: &fakeOwners{self: "b", owner: "a", token: 7, addrs: map[string]string{"a": addr}}, Logger: quietLog})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(q.Close)
	benchCharges(b, q, 1)
}

// BenchmarkLocalCharge: a charge on the owner, through the plain quota
// client and through the routing client (which must add next to nothing:
// the ownership lookup, no hop).
func BenchmarkLocalCharge(b *testing.B) {
	root := testRoot(b)
	n := startNode(b, root, "a", nil)
	settle(b, []*node{n}, []string{"a"})
	b.Run("plain", func(b *testing.B) { benchCharges(b, n.local, 0) })
	b.Run("routed", func(b *testing.B) { benchCharges(b, n.q, 0) })
	if n.q.RemoteCalls() != 0 {
		b.Fatalf("%d remote calls on the owner", n.q.RemoteCalls())
	}
}

type chargeThener interface {
	Charge(quota.Charge) (quota.ChargeResult, error)
	ChargeThen(quota.ChargeStep)
}

// benchCharges runs blocking and chained charges, serial and 16 at a time,
// and checks the hops per charge.
func benchCharges(b *testing.B, q chargeThener, hops int64) {
	rq, _ := q.(*Quota)
	run := func(name string, parallel bool, charge func() error) {
		b.Run(name, func(b *testing.B) {
			var before int64
			if rq != nil {
				before = rq.RemoteCalls()
			}
			b.ReportAllocs()
			measureCPU(b)
			if parallel {
				b.SetParallelism(8)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := charge(); err != nil {
							b.Error(err)
							return
						}
					}
				})
			} else {
				for range b.N {
					if err := charge(); err != nil {
						b.Fatal(err)
					}
				}
			}
			if rq != nil {
				if got := rq.RemoteCalls() - before; got != hops*int64(b.N) {
					b.Fatalf("%d remote calls for %d charges", got, b.N)
				}
			}
		})
	}
	blocking := func() error {
		res, err := q.Charge(uncapped)
		if err == nil && !res.Allowed {
			b.Fatalf("refused: %+v", res)
		}
		return err
	}
	chained := func() error {
		st := &step{c: uncapped, done: make(chan struct{})}
		q.ChargeThen(st)
		<-st.done
		return st.err
	}
	run("blocking/serial", false, blocking)
	run("blocking/parallel-16", true, blocking)
	run("chained/serial", false, chained)
	run("chained/parallel-16", true, chained)
}
