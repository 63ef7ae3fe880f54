package actors

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrUnavailable is wrapped by every error that means an actor could not
// answer (timeout, shard down): the edge answers 503, as for an unreadable
// store, and the caller may retry.
var ErrUnavailable = errors.New("actor unavailable")

// ErrTimeout is returned by Calls.Wait when no answer came in time. The
// request may still be carried out afterwards.
var ErrTimeout = fmt.Errorf("%w: did not answer in time", ErrUnavailable)

// ErrShardDown answers a call to a shard its supervisor stopped, until the
// shard is restarted. The request was not carried out.
var ErrShardDown = fmt.Errorf("%w: shard down, restarting", ErrUnavailable)

// ErrStopped answers a call sent after the shards began to stop.
var ErrStopped = fmt.Errorf("%w: stopped", ErrUnavailable)

// Call carries one request to an actor and its answer back on a buffered
// channel: protoactor's Send plus a channel costs about half a RequestFuture
// and avoids its open data race (protoactor-go #1145). Calls are pooled.
//
// Whoever holds a Call after the client sent it — the owning actor, or a
// delegate such as a group committer — must call Reply exactly once and must
// not touch the Call afterwards.
type Call[Req, Resp any] struct {
	Req   Req
	reply chan answer[Resp]
	timer *time.Timer
}

type answer[Resp any] struct {
	v   Resp
	err error
}

// Reply answers the call. It never blocks.
func (c *Call[Req, Resp]) Reply(v Resp, err error) {
	c.reply <- answer[Resp]{v, err}
}

// Fail answers the call with err; for Shards.Send, which holds a call it
// could not deliver.
func (c *Call[Req, Resp]) Fail(err error) {
	var zero Resp
	c.Reply(zero, err)
}

// Calls is a pool of Call values for one request type. The zero value is not
// ready; use NewCalls.
type Calls[Req, Resp any] struct {
	pool    sync.Pool
	timeout time.Duration
}

// NewCalls returns a pool whose Wait gives up after timeout (≤ 0 means 5 s).
func NewCalls[Req, Resp any](timeout time.Duration) *Calls[Req, Resp] {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	return &Calls[Req, Resp]{timeout: timeout}
}

// Get returns a Call carrying req, ready to be sent.
func (p *Calls[Req, Resp]) Get(req Req) *Call[Req, Resp] {
	c, _ := p.pool.Get().(*Call[Req, Resp])
	if c == nil {
		c = &Call[Req, Resp]{reply: make(chan answer[Resp], 1)}
	}
	c.Req = req
	return c
}

// Wait blocks until c is answered or the pool's timeout passes. An answered
// Call goes back to the pool; a timed-out one is abandoned (a late Reply lands
// in its buffer and is collected with it), so c must not be used after Wait.
func (p *Calls[Req, Resp]) Wait(c *Call[Req, Resp]) (Resp, error) {
	select { // fast path: already answered, no timer needed
	case a := <-c.reply:
		p.put(c)
		return a.v, a.err
	default:
	}
	if c.timer == nil {
		c.timer = time.NewTimer(p.timeout)
	} else {
		c.timer.Reset(p.timeout)
	}
	select {
	case a := <-c.reply:
		c.timer.Stop()
		p.put(c)
		return a.v, a.err
	case <-c.timer.C:
		var zero Resp
		return zero, ErrTimeout
	}
}

func (p *Calls[Req, Resp]) put(c *Call[Req, Resp]) {
	var zero Req
	c.Req = zero
	p.pool.Put(c)
}
