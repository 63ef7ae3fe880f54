package rpc

import (
	"context"
	"log/slog"
	"runtime/debug"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The node-to-node connections' flow-control windows are set, not
// estimated: with a window of its own gRPC turns off its bandwidth-delay
// estimator, which otherwise sends a PING (and gets its ack) for a large
// share of the small frames this service exchanges. Measured with
// BenchmarkRemoteCharge (unary calls, one at a time): 108–124 → 84–97 µs
// of CPU per call over both ends. A megabyte is far above any frame here
// (a Pipe frame of 256 calls is about 100 KiB) and costs memory only when
// a reader falls behind.
const transportWindow = 1 << 20

// ServerOptions are the options of the node-to-node gRPC server. A panic
// in a handler answers its call with codes.Internal and is logged with its
// stack on log: gRPC itself does not recover handlers, so one peer's
// message that reaches a defect would otherwise end the member and leave
// every shard it owns unserved until its lease expires.
func ServerOptions(log *slog.Logger) []grpc.ServerOption {
	recovered := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		method, _ := grpc.Method(ctx)
		log.Error("cluster: node-to-node handler panicked; the call failed, the node goes on",
			"method", method, "panic", p, "stack", string(debug.Stack()))
		return status.Error(codes.Internal, "the member failed to handle the call")
	})
	return []grpc.ServerOption{
		grpc.InitialWindowSize(transportWindow),
		grpc.InitialConnWindowSize(transportWindow),
		grpc.ChainUnaryInterceptor(recovery.UnaryServerInterceptor(recovered)),
		grpc.ChainStreamInterceptor(recovery.StreamServerInterceptor(recovered)),
	}
}

// transportDialOptions are the matching options of the connections to
// the other members.
func transportDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithInitialWindowSize(transportWindow),
		grpc.WithInitialConnWindowSize(transportWindow),
	}
}
