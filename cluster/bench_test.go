package cluster

// The measured inputs of the capacity model in docs/cluster.md:
//
//	go test ./cluster/ -run '^$' -bench . -benchmem -benchtime 2s -count 3
//
// etcd runs in the benchmark's process (a member of its own, fsync on, as in
// production), so each figure includes the server's CPU on the same cores:
// on a separate etcd machine the client's share is smaller. Besides ns/op
// (wall time, which on a shared machine mostly measures the other tenants)
// each reports cpu-µs/op: the process's user+system CPU per operation, both
// ends of the call included — the figure the capacity model uses.

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fraudd/fraudd/cluster/embedetcd"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measureCPU reports the process CPU per operation from now to the end of b.
func measureCPU(b *testing.B) {
	start := cpuTime()
	b.Cleanup(func() {
		if b.N > 0 {
			b.ReportMetric(float64(cpuTime()-start)/float64(b.N)/1e3, "cpu-µs/op")
		}
	})
}

// fsyncEtcd starts a member that syncs its WAL, unlike the tests' member.
func fsyncEtcd(b *testing.B) *clientv3.Client {
	b.Helper()
	dir := b.TempDir()
	srv, err := embedetcd.Start(context.Background(), embedetcd.Config{Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Close)
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cli.Close() })
	return cli
}

// BenchmarkEtcdPutRevisionCheck: one admin-style write, a transaction
// comparing the record's mod revision (Store.Update), with fsync. parallel
// shows how etcd batches concurrent writers into one sync.
func BenchmarkEtcdPutRevisionCheck(b *testing.B) {
	cli := fsyncEtcd(b)
	s, err := NewStore(StoreConfig[plan]{Client: cli, Prefix: "/bench/config/", Codec: planCodec})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var next atomic.Int64 // keys stay unique across the runs of each sub-benchmark
	b.Run("serial", func(b *testing.B) {
		key := fmt.Sprintf("acct/s%d", next.Add(1))
		rev, err := s.Create(ctx, key, plan{"pro", 0})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		measureCPU(b)
		for i := 0; i < b.N; i++ {
			if rev, err = s.Update(ctx, key, plan{"pro", i}, rev); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel-16", func(b *testing.B) {
		b.ReportAllocs()
		measureCPU(b)
		b.SetParallelism(8) // × GOMAXPROCS = 16 writers on 2 cores
		b.RunParallel(func(pb *testing.PB) {
			key := fmt.Sprintf("acct/p%d", next.Add(1))
			rev, err := s.Create(ctx, key, plan{"pro", 0})
			if err != nil {
				b.Error(err)
				return
			}
			for i := 0; pb.Next(); i++ {
				if rev, err = s.Update(ctx, key, plan{"pro", i}, rev); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkLeaseKeepAlive: one membership renewal (KeepAliveOnce), what
// every node sends every TTL/3.
func BenchmarkLeaseKeepAlive(b *testing.B) {
	cli := fsyncEtcd(b)
	ctx := context.Background()
	g, err := cli.Grant(ctx, 10)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	measureCPU(b)
	for range b.N {
		if _, err := cli.KeepAliveOnce(ctx, g.ID); err != nil {
			b.Fatal(err)
		}
	}
}

// The gRPC hop. protoc is not installed here, so the message is a
// well-known protobuf type (wrapperspb.BytesValue, 64 bytes: the size of an
// Evaluate request's account id, token, device id and counts) through
// grpc's standard protobuf codec, on a hand-written service descriptor.
var echoDesc = grpc.ServiceDesc{
	ServiceName: "fraudd.cluster.bench.v1.Node",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Evaluate",
		Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.BytesValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			return wrapperspb.Int64(int64(len(in.Value))), nil
		},
	}},
}

// BenchmarkGRPCUnary: one non-owner → owner round trip on loopback, with a
// per-call deadline as the cluster client will set.
func BenchmarkGRPCUnary(b *testing.B) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer()
	srv.RegisterService(&echoDesc, struct{}{})
	go srv.Serve(l)
	b.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	req := wrapperspb.Bytes(make([]byte, 64))
	call := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var out wrapperspb.Int64Value
		if err := conn.Invoke(ctx, "/fraudd.cluster.bench.v1.Node/Evaluate", req, &out); err != nil {
			return err
		}
		if out.Value != 64 {
			return fmt.Errorf("reply %d, want 64", out.Value)
		}
		return nil
	}
	if err := call(); err != nil {
		b.Fatal(err)
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		measureCPU(b)
		for range b.N {
			if err := call(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel-16", func(b *testing.B) {
		b.ReportAllocs()
		measureCPU(b)
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := call(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkWatchFanout: one configuration write delivered to 10 watching
// nodes (each its own client connection); an operation ends when all ten
// have the event. cpu-µs/op covers the write, etcd's sends and the ten
// receivers; divide by 10 for one delivery.
func BenchmarkWatchFanout(b *testing.B) {
	cli := fsyncEtcd(b)
	const watchers = 10
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan struct{}, 1024)
	for range watchers {
		w, err := clientv3.New(clientv3.Config{Endpoints: cli.Endpoints(), DialTimeout: 5 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { w.Close() })
		wch := w.Watch(ctx, "/bench/fanout/", clientv3.WithPrefix())
		go func() {
			for resp := range wch {
				for range resp.Events {
					got <- struct{}{}
				}
			}
		}()
	}
	// Let every watch register before the first write.
	time.Sleep(200 * time.Millisecond)
	b.ReportAllocs()
	measureCPU(b)
	for i := range b.N {
		if _, err := cli.Put(ctx, "/bench/fanout/acct", fmt.Sprint(i)); err != nil {
			b.Fatal(err)
		}
		for range watchers {
			<-got
		}
	}
}
