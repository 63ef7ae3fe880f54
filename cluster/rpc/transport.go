package rpc

import (
	"os"
	"runtime"

	"google.golang.org/grpc"
)

// EXPERIMENT toggle (not to be committed as is).
var tuned = os.Getenv("FRAUDD_GRPC_PLAIN") == ""

// ServerOptions are the node-to-node server's options.
func ServerOptions() []grpc.ServerOption {
	if !tuned {
		return nil
	}
	return []grpc.ServerOption{
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
		grpc.InitialWindowSize(transportWindow),
		grpc.InitialConnWindowSize(transportWindow),
	}
}

const transportWindow = 1 << 20

func transportDialOptions() []grpc.DialOption {
	if !tuned {
		return nil
	}
	return []grpc.DialOption{
		grpc.WithInitialWindowSize(transportWindow),
		grpc.WithInitialConnWindowSize(transportWindow),
	}
}
