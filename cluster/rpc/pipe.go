package rpc

import (
	"context"
	"errors"
	"io"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	spb "google.golang.org/genproto/googleapis/rpc/status"

	"github.com/fraudd/fraudd/cluster"
)

// The request path's calls to a member (Charge, Evaluate, EvaluateLeased,
// and a collection's Collect) travel on one long-lived stream per peer,
// the Pipe, as many to a frame as are waiting. A unary gRPC call costs
// each end a new HTTP/2 stream: its headers (HPACK both ways), a
// goroutine, a context and some 170 allocations, about 65 µs of CPU on
// both ends together on the 2-core VM (BenchmarkRemoteCharge), as much as
// the evaluation it carries. On the pipe a call is one entry in a frame,
// whether or not others share it.
//
// Nothing above the pipe changes: pipeClient is a NodeClient, so the
// routing (routeCalls: retries, fencing, settling a call that broke after
// it was sent) sees the same answers and the same errors as from unary
// calls. An answer carries the call's status whole (code, message,
// details), and a call is failed by the pipe only with a status that tells
// the truth about it:
//   - the stream could not be opened: the error gRPC gave, so a dial error
//     still reads as "never sent" (notSent);
//   - the stream broke, or the call's deadline passed, after the call was
//     handed to it: Unavailable or DeadlineExceeded, which the routing
//     treats as ambiguous and settles, as for a unary call.
//   - the call cannot be encoded (a string that is not UTF-8):
//     InvalidArgument, alone and never sent, where it would otherwise end
//     the stream for every call on it.
// A member of an older build answers the Pipe Unimplemented: its calls go
// unary, and the pipe asks again after pipeRetryPlain (a rolling deploy
// upgrades it).

// pipeRetryPlain is how long a peer that answered the Pipe Unimplemented
// gets unary calls before the pipe is tried again.
const pipeRetryPlain = 30 * time.Second

// pipeMaxCalls bounds the calls in one frame; the rest go in the next.
const pipeMaxCalls = 256

// pipeMaxFrameBytes bounds what is gathered into one frame: a Collect
// call and an Evaluate answer carry a device event (up to the API's 64 KiB
// body), and a frame must stay under gRPC's 4 MiB receive limit. One call
// or answer larger than this still goes, alone.
const pipeMaxFrameBytes = 1 << 20

// errPipePlain tells a waiting call that the peer has no Pipe: make the
// call unary.
var errPipePlain = errors.New("peer has no pipe")

// pipeClient is a peer's NodeClient with the request path's calls on its
// pipe.
type pipeClient struct {
	NodeClient
	p *pipe
}

// pipeStats counts what the pipes of one client carried (metrics: calls
// over frames is how many calls share a frame).
type pipeStats struct {
	frames, calls atomic.Int64
}

func newPipeClient(cli NodeClient, stats *pipeStats) *pipeClient {
	if stats == nil {
		stats = new(pipeStats)
	}
	return &pipeClient{NodeClient: cli, p: newPipe(cli, stats)}
}

// Close ends the pipe: calls waiting on it fail (Unavailable, ambiguous:
// they may have been sent).
func (c *pipeClient) Close() { c.p.close() }

// Charge implements NodeClient.
func (c *pipeClient) Charge(ctx context.Context, in *ChargeRequest, opts ...grpc.CallOption) (*ChargeReply, error) {
	return viaPipe(ctx, c, &PipeCall{Charge: in}, (*PipeAnswer).GetCharge,
		func() (*ChargeReply, error) { return c.NodeClient.Charge(ctx, in, opts...) })
}

// Evaluate implements NodeClient.
func (c *pipeClient) Evaluate(ctx context.Context, in *EvaluateRequest, opts ...grpc.CallOption) (*EvaluateReply, error) {
	return viaPipe(ctx, c, &PipeCall{Evaluate: in}, (*PipeAnswer).GetEvaluate,
		func() (*EvaluateReply, error) { return c.NodeClient.Evaluate(ctx, in, opts...) })
}

// EvaluateLeased implements NodeClient.
func (c *pipeClient) EvaluateLeased(ctx context.Context, in *EvaluateRequest, opts ...grpc.CallOption) (*EvaluateReply, error) {
	return viaPipe(ctx, c, &PipeCall{EvaluateLeased: in}, (*PipeAnswer).GetEvaluate,
		func() (*EvaluateReply, error) { return c.NodeClient.EvaluateLeased(ctx, in, opts...) })
}

// Collect implements NodeClient.
func (c *pipeClient) Collect(ctx context.Context, in *CollectRequest, opts ...grpc.CallOption) (*CollectReply, error) {
	return viaPipe(ctx, c, &PipeCall{Collect: in}, (*PipeAnswer).GetCollect,
		func() (*CollectReply, error) { return c.NodeClient.Collect(ctx, in, opts...) })
}

// viaPipe makes call on c's pipe and reads its reply with reply; plain
// makes it unary instead when the member has no Pipe.
func viaPipe[T proto.Message](ctx context.Context, c *pipeClient, call *PipeCall, reply func(*PipeAnswer) T, plain func() (T, error)) (T, error) {
	a, err := c.p.call(ctx, call)
	if err == errPipePlain {
		return plain()
	}
	if err != nil {
		var zero T
		return zero, err
	}
	return pipeReply(reply(a))
}

// pipeReply is an answer's reply, or an error when a member answered with
// neither a reply nor a status (a peer's bug): the call may have run, so
// the error is not one that says nothing was done.
func pipeReply[T proto.Message](rep T) (T, error) {
	if !rep.ProtoReflect().IsValid() {
		return rep, status.Error(codes.Internal, "pipe: an answer with neither a reply nor a status")
	}
	return rep, nil
}

// pipe is one peer's stream and the calls on their way.
type pipe struct {
	cli    NodeClient
	ctx    context.Context // the streams'; cancelled by close
	cancel context.CancelFunc
	wake   chan struct{} // the sender has queued calls to send

	mu     sync.Mutex
	closed bool
	nextID uint64
	queue  []pipeWait    // handed to the pipe, not yet sent
	cur    *pipeStream   // nil until opened, and after it broke or said bye
	byes   []*pipeStream // said bye: the sender closes their side
	ending []*pipeStream // said bye and not ended: calls may still await answers there
	plain  time.Time     // unary calls until then (the peer has no Pipe)
	done   chan struct{} // closed when the sender has returned

	stats *pipeStats
}

// pipeWait is a call on its way and where its answer goes.
type pipeWait struct {
	c        *PipeCall
	ans      chan pipeResult // one slot: the answer never blocks the pipe
	deadline time.Time       // the caller's (zero: none); sent as what is left of it
	size     int             // its encoded size, as queued (for the frame's bound)
}

// encodeBuf holds the buffers encodable marshals into.
var encodeBuf = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// encodable marshals c to see that it can be, and returns its size.
func encodable(c *PipeCall) (int, error) {
	bp := encodeBuf.Get().(*[]byte)
	b, err := proto.MarshalOptions{}.MarshalAppend((*bp)[:0], c)
	n := len(b)
	if cap(b) <= 64<<10 {
		*bp = b[:0]
		encodeBuf.Put(bp)
	}
	return n, err
}

type pipeResult struct {
	a   *PipeAnswer
	err error
}

// pipeStream is one opened stream and the calls sent on it that await an
// answer.
type pipeStream struct {
	s       Node_PipeClient
	pending map[uint64]chan pipeResult
	broken  bool
	bye     bool // the member said bye: no more calls go on it
}

func newPipe(cli NodeClient, stats *pipeStats) *pipe {
	ctx, cancel := context.WithCancel(context.Background())
	p := &pipe{cli: cli, stats: stats, ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go p.send()
	return p
}

// call hands c to the pipe and waits for its answer, or for ctx. The
// answer's error status becomes the returned error, as a unary call's.
func (p *pipe) call(ctx context.Context, c *PipeCall) (*PipeAnswer, error) {
	// A call that cannot be encoded (a string that is not UTF-8) would end
	// the whole stream, failing every call on it: it fails alone, here,
	// never sent.
	size, err := encodable(c)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "pipe: the call cannot be encoded: %v", err)
	}
	dl, _ := ctx.Deadline()
	ans := make(chan pipeResult, 1)
	p.mu.Lock()
	switch {
	case p.closed:
		p.mu.Unlock()
		return nil, status.Error(codes.Canceled, "pipe closed")
	case time.Now().Before(p.plain):
		p.mu.Unlock()
		return nil, errPipePlain
	}
	p.nextID++
	c.Id = p.nextID
	p.queue = append(p.queue, pipeWait{c: c, ans: ans, deadline: dl, size: size})
	p.mu.Unlock()
	p.signal()
	select {
	case r := <-ans:
		if r.err != nil {
			return nil, r.err
		}
		if len(r.a.GetStatus()) > 0 {
			return nil, statusOf(r.a.GetStatus())
		}
		return r.a, nil
	case <-ctx.Done():
		p.forget(c.Id)
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// signal wakes the sender, unless a wake is already pending.
func (p *pipe) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// statusOf is the error a marshalled google.rpc.Status stands for.
func statusOf(b []byte) error {
	var st spb.Status
	if err := proto.Unmarshal(b, &st); err != nil {
		return status.Errorf(codes.Internal, "pipe: unreadable status: %v", err)
	}
	if st.GetCode() == int32(codes.OK) {
		return status.Error(codes.Internal, "pipe: an error answer with status OK")
	}
	return status.FromProto(&st).Err()
}

// forget drops a call whose caller stopped waiting: still queued, it is
// never sent; sent, its answer is dropped when it comes.
func (p *pipe) forget(id uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, w := range p.queue {
		if w.c.Id == id {
			p.queue = append(p.queue[:i], p.queue[i+1:]...)
			return
		}
	}
	if p.cur != nil {
		delete(p.cur.pending, id)
	}
	for _, st := range p.ending {
		delete(st.pending, id) // ids are the pipe's: at most one stream has it
	}
}

// close fails every call still on the pipe and stops its sender.
func (p *pipe) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	queued := p.queue
	p.queue = nil
	p.mu.Unlock()
	p.cancel()
	<-p.done
	for _, w := range queued {
		w.ans <- pipeResult{err: status.Error(codes.Canceled, "pipe closed")}
	}
	p.breakStream(nil, status.Error(codes.Unavailable, "pipe closed with the call sent"))
}

// send is the pipe's sender: it writes what is queued as one frame,
// opening the stream first when there is none.
func (p *pipe) send() {
	defer close(p.done)
	frame := &PipeFrame{Version: cluster.ProtocolVersion}
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-p.wake:
		}
		for {
			p.closeByes()
			st, batch, err := p.take()
			if err != nil {
				// The stream could not be opened: nothing was sent. The
				// calls get gRPC's error, or go unary.
				for _, w := range batch {
					w.ans <- pipeResult{err: err}
				}
				continue
			}
			if len(batch) == 0 {
				break
			}
			frame.Calls = frame.Calls[:0]
			for _, w := range batch {
				frame.Calls = append(frame.Calls, w.c)
			}
			p.stats.frames.Add(1)
			p.stats.calls.Add(int64(len(batch)))
			if err := st.s.Send(frame); err != nil && err != io.EOF {
				p.breakStream(st, status.Errorf(codes.Unavailable, "pipe to member broke with the call sent: %v", err))
			}
			// io.EOF: the member ended the stream; its status (an old
			// build's Unimplemented, say) comes to the receiver, which
			// answers the pending calls with it.
			clear(frame.Calls)
		}
	}
}

// closeByes closes this side of the streams whose member said bye (the
// sender is a stream's only writer, so it does it, between frames).
func (p *pipe) closeByes() {
	p.mu.Lock()
	byes := p.byes
	p.byes = nil
	p.mu.Unlock()
	for _, st := range byes {
		st.s.CloseSend()
	}
}

// take returns the stream to send on and up to pipeMaxCalls queued calls,
// registered as pending on it. It opens a stream when there is none; when
// that fails, the calls come back with the error to answer them with
// (errPipePlain when the peer has no Pipe).
func (p *pipe) take() (*pipeStream, []pipeWait, error) {
	p.mu.Lock()
	if p.closed || len(p.queue) == 0 {
		p.mu.Unlock()
		return nil, nil, nil
	}
	st := p.cur
	if st == nil {
		p.mu.Unlock()
		s, err := p.cli.Pipe(p.ctx)
		p.mu.Lock()
		if err != nil {
			batch := p.queue
			p.queue = nil
			if status.Code(err) == codes.Unimplemented {
				p.plain = time.Now().Add(pipeRetryPlain)
				err = errPipePlain
			}
			p.mu.Unlock()
			return nil, batch, err
		}
		st = &pipeStream{s: s, pending: map[uint64]chan pipeResult{}}
		p.cur = st
		go p.receive(st)
	}
	now := time.Now()
	n, size := 0, 0
	for n < len(p.queue) && n < pipeMaxCalls && size < pipeMaxFrameBytes {
		w := p.queue[n]
		if !w.deadline.IsZero() {
			// What is left of the caller's deadline as it leaves, as a
			// unary call sends it: the time spent queued is not the
			// member's to use.
			w.c.TimeoutMicros = max(w.deadline.Sub(now).Microseconds(), 1)
		}
		size += w.size
		n++
	}
	batch := make([]pipeWait, n)
	copy(batch, p.queue)
	p.queue = append(p.queue[:0], p.queue[n:]...)
	for _, w := range batch {
		st.pending[w.c.Id] = w.ans
	}
	p.mu.Unlock()
	return st, batch, nil
}

// receive hands each answer on st to its call, until st ends.
func (p *pipe) receive(st *pipeStream) {
	for {
		f, err := st.s.Recv()
		if err != nil {
			if status.Code(err) == codes.Unimplemented {
				// An old member: the stream opened (gRPC opens lazily) and
				// the first frame was refused. Nothing ran there.
				p.mu.Lock()
				p.plain = time.Now().Add(pipeRetryPlain)
				p.mu.Unlock()
				p.breakStream(st, errPipePlain)
				return
			}
			p.breakStream(st, status.Errorf(codes.Unavailable, "pipe to member broke with the call sent: %v", err))
			return
		}
		p.mu.Lock()
		for _, a := range f.GetAnswers() {
			if ans, ok := st.pending[a.GetId()]; ok {
				delete(st.pending, a.GetId())
				ans <- pipeResult{a: a}
			}
		}
		if f.GetBye() && !st.bye && !st.broken {
			// The member is stopping: the next calls open another stream
			// (to wherever the member's address leads by then), and the
			// sender closes this one's side, which lets the member end it.
			st.bye = true
			if p.cur == st {
				p.cur = nil
			}
			p.byes = append(p.byes, st)
			p.ending = append(p.ending, st)
		}
		p.mu.Unlock()
		if f.GetBye() {
			select {
			case p.wake <- struct{}{}:
			default:
			}
		}
	}
}

// breakStream fails the calls pending on st (the current stream when st is
// nil) with err, once; the next call opens a new stream.
func (p *pipe) breakStream(st *pipeStream, err error) {
	p.mu.Lock()
	if st == nil {
		st = p.cur
	}
	if st == nil || st.broken {
		p.mu.Unlock()
		return
	}
	st.broken = true
	if p.cur == st {
		p.cur = nil
	}
	for i, e := range p.ending {
		if e == st {
			p.ending = append(p.ending[:i], p.ending[i+1:]...)
			break
		}
	}
	pending := st.pending
	st.pending = nil
	queued := len(p.queue) > 0
	p.mu.Unlock()
	for _, ans := range pending {
		ans <- pipeResult{err: err}
	}
	if queued {
		p.signal()
	}
}

// Pipe implements NodeServer: each call runs as its unary method would,
// under its own deadline, and its answer goes back in the next frame.
func (s *Server) Pipe(stream Node_PipeServer) error { return s.servePipe(stream, s) }

// Drain asks every Pipe into this node to end: each says bye, and ends
// once its caller has closed its side (or after pipeByeWait) and the calls
// under way are answered. A grpc.Server's GracefulStop waits for its
// streams, and a Pipe is never done by itself: call Drain before it.
func (s *Server) Drain() { s.stopOnce.Do(func() { close(s.stopping) }) }

// StopServer stops g, which serves s: the pipes into it say bye (Drain),
// then g stops gracefully, cut short after wait. A caller that stopped
// reading (a frozen process) leaves its stream's last frames unsent, and
// gRPC's graceful stop would wait for them for as long as the connection
// lives: past wait, g.Stop closes the connections. It answers whether the
// stop was graceful.
func StopServer(g *grpc.Server, s *Server, wait time.Duration) (graceful bool) {
	s.Drain()
	done := make(chan struct{})
	go func() {
		g.GracefulStop()
		close(done)
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		g.Stop()
		<-done
		return false
	}
}

// DefaultStopWait is how long StopServer waits for a graceful stop: the
// pipes' bye wait and then some.
const DefaultStopWait = pipeByeWait + 5*time.Second

// pipeByeWait bounds how long a Pipe waits for its caller to close its
// side after bye (a caller that never does must not hold a node's stop).
const pipeByeWait = 5 * time.Second

// received reads a stream's messages on a goroutine of its own, so that a
// server loop can wait on them beside other things: the channel closes once
// the caller closed its side or the stream broke, or ctx ended.
func received[T any](ctx context.Context, recv func() (T, error)) <-chan T {
	ch := make(chan T)
	go func() {
		defer close(ch)
		for {
			m, err := recv()
			if err != nil {
				return
			}
			select {
			case ch <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch
}

// pipeMethods are the unary methods a Pipe's calls run: the Server's, or
// those of a NodeServer that wraps it (tests: an older build, a stalled
// answer), so that a call behaves the same whichever way it came.
type pipeMethods interface {
	Charge(context.Context, *ChargeRequest) (*ChargeReply, error)
	Evaluate(context.Context, *EvaluateRequest) (*EvaluateReply, error)
	EvaluateLeased(context.Context, *EvaluateRequest) (*EvaluateReply, error)
	Collect(context.Context, *CollectRequest) (*CollectReply, error)
}

// servePipe serves one Pipe with m's methods. It returns once the caller
// has closed its side (or the stream broke, or bye was said pipeByeWait
// ago) and the calls under way are answered.
func (s *Server) servePipe(stream Node_PipeServer, m pipeMethods) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	answers := make(chan *PipeAnswer, pipeMaxCalls)
	bye := make(chan struct{})
	sent := make(chan error, 1)
	go func() {
		err := pipeAnswers(stream, answers, bye)
		cancel() // a broken stream: the calls still running stop waiting
		sent <- err
	}()
	frames := received(ctx, stream.Recv)
	var wg sync.WaitGroup
	stopping := s.stopping
	var byeWait <-chan time.Time
	expired := false
read:
	for {
		select {
		case f, ok := <-frames:
			if !ok {
				break read
			}
			for _, c := range f.GetCalls() {
				wg.Go(func() {
					a := s.pipeCallRecovered(ctx, m, c)
					select {
					case answers <- a:
					case <-ctx.Done():
					}
				})
			}
		case <-stopping:
			stopping = nil
			close(bye)
			t := time.NewTimer(pipeByeWait)
			defer t.Stop()
			byeWait = t.C
		case <-byeWait:
			expired = true
			break read
		}
	}
	finished := make(chan error, 1)
	go func() {
		wg.Wait()
		close(answers)
		finished <- <-sent
	}()
	if byeWait == nil {
		return <-finished
	}
	// After bye the stream ends within pipeByeWait whatever the caller
	// does: one that stops reading its answers must not hold the member's
	// stop (its sender would block on the flow-control window, the calls
	// on their answers).
	if !expired {
		select {
		case err := <-finished:
			return err
		case <-byeWait:
		}
	}
	cancel() // the calls still under way drop their answers
	select {
	case err := <-finished:
		return err
	case <-time.After(time.Second):
		// The sender is stuck on a caller that does not read: returning
		// ends the stream, and that ends its Send.
		return status.Error(codes.Unavailable, "member stopping: the caller does not read its answers")
	}
}

// pipeAnswers sends the answers as they come, as many to a frame as are
// ready, and bye once it is closed, until answers is closed and drained.
func pipeAnswers(stream Node_PipeServer, answers <-chan *PipeAnswer, bye <-chan struct{}) error {
	frame := &PipeFrame{Version: cluster.ProtocolVersion}
	for {
		select {
		case a, ok := <-answers:
			if !ok {
				return nil
			}
			frame.Answers = append(frame.Answers[:0], a)
		case <-bye:
			bye = nil
			frame.Answers, frame.Bye = frame.Answers[:0], true
		}
		size := 0
		if len(frame.Answers) > 0 {
			size = proto.Size(frame.Answers[0])
		}
	gather:
		for len(frame.Answers) < pipeMaxCalls && size < pipeMaxFrameBytes {
			select {
			case a, ok := <-answers:
				if !ok {
					break gather
				}
				frame.Answers = append(frame.Answers, a)
				size += proto.Size(a)
			default:
				break gather
			}
		}
		if err := stream.Send(frame); err != nil {
			return err
		}
		clear(frame.Answers)
		frame.Bye = false
	}
}

// pipeCall runs one call of a Pipe with m's methods.
// pipeCallRecovered is pipeCall on a goroutine of the pipe's own: a panic
// in the call's handler is answered as ServerOptions' interceptor answers
// a unary method's (codes.Internal, logged with its stack), and the member
// goes on. The stream's interceptor covers only the stream's goroutine.
func (s *Server) pipeCallRecovered(ctx context.Context, m pipeMethods, c *PipeCall) (a *PipeAnswer) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("cluster: node-to-node handler panicked; the call failed, the node goes on",
				"method", "pipe", "panic", p, "stack", string(debug.Stack()))
			b, _ := proto.Marshal(status.New(codes.Internal, "the member failed to handle the call").Proto())
			a = &PipeAnswer{Id: c.GetId(), Status: b}
		}
	}()
	return pipeCall(ctx, m, c)
}

func pipeCall(ctx context.Context, m pipeMethods, c *PipeCall) *PipeAnswer {
	a := &PipeAnswer{Id: c.GetId()}
	if t := c.GetTimeoutMicros(); t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(t)*time.Microsecond)
		defer cancel()
	}
	var err error
	switch {
	case c.GetCharge() != nil:
		a.Charge, err = m.Charge(ctx, c.GetCharge())
	case c.GetEvaluate() != nil:
		a.Evaluate, err = m.Evaluate(ctx, c.GetEvaluate())
	case c.GetEvaluateLeased() != nil:
		a.Evaluate, err = m.EvaluateLeased(ctx, c.GetEvaluateLeased())
	case c.GetCollect() != nil:
		a.Collect, err = m.Collect(ctx, c.GetCollect())
	default:
		err = status.Error(codes.Unimplemented, "pipe: a call of a method this node does not know")
	}
	if err != nil {
		b, merr := proto.Marshal(status.Convert(err).Proto())
		if merr != nil {
			b, _ = proto.Marshal(status.New(codes.Internal, "pipe: unmarshallable status").Proto())
		}
		a.Status, a.Charge, a.Evaluate, a.Collect = b, nil, nil, nil
	}
	return a
}
