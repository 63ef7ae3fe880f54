package rpc

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// panickyNode panics in a unary handler and in the Pipe stream handler, as
// a defect reached by a peer's message would.
type panickyNode struct{ UnimplementedNodeServer }

func (panickyNode) Health(context.Context, *HealthRequest) (*HealthReply, error) {
	var m map[string]int
	m["boom"]++ // a nil map write: a runtime panic, as an indexing defect is
	return nil, nil
}

func (panickyNode) Pipe(Node_PipeServer) error { panic("pipe boom") }

// TestHandlerPanicIsAnError: a panic in a handler of the node-to-node
// service answers that call with codes.Internal and is logged with its
// stack, instead of ending the node (gRPC does not recover handlers' panics:
// one peer's bad message would take down the member and every shard it owns).
func TestHandlerPanicIsAnError(t *testing.T) {
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(ServerOptions(log)...)
	RegisterNodeServer(g, panickyNode{})
	go g.Serve(l)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	cli := NewNodeClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 2 { // the server is still there for the second call
		if _, err := cli.Health(ctx, &HealthRequest{}); status.Code(err) != codes.Internal {
			t.Fatalf("call %d: %v, want Internal", i, err)
		}
	}
	st, err := cli.Pipe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); status.Code(err) != codes.Internal {
		t.Fatalf("pipe: %v, want Internal", err)
	}
	out := logged.String()
	if !strings.Contains(out, "assignment to entry in nil map") || !strings.Contains(out, "pipe boom") || !strings.Contains(out, "recover_test.go") {
		t.Fatalf("the panics were not logged with their stacks: %s", out)
	}
}
