package rpc

import "google.golang.org/grpc"

// The node-to-node connections' flow-control windows are set, not
// estimated: with a window of its own gRPC turns off its bandwidth-delay
// estimator, which otherwise sends a PING (and gets its ack) for a large
// share of the small frames this service exchanges. Measured with
// BenchmarkRemoteCharge (unary calls, one at a time): 108–124 → 84–97 µs
// of CPU per call over both ends. A megabyte is far above any frame here
// (a Pipe frame of 256 calls is about 100 KiB) and costs memory only when
// a reader falls behind.
const transportWindow = 1 << 20

// ServerOptions are the options of the node-to-node gRPC server.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.InitialWindowSize(transportWindow),
		grpc.InitialConnWindowSize(transportWindow),
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
