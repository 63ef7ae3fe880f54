package iplimit

import (
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/internal/clock"
)

// ErrStopped is returned after Stop.
var ErrStopped = fmt.Errorf("iplimit: stopped: %w", actors.ErrUnavailable)

// Take asks the address's shard to take one request from each limiter in Kinds.
type Take struct {
	Kinds Kinds
	Addr  netip.Addr
	Now   time.Time
}

type takeCall = actors.Call[Take, Verdict]

// TakeStep is a Take that is one step of a chained call (actors/checks): the
// shard hands the verdict to Taken on its own goroutine instead of answering
// a waiting caller, and Taken sends the chain on or answers it. Taken must
// not block. While the shard is down or stopping, Fail gets the error
// instead (on the sender's goroutine).
type TakeStep interface {
	actors.Failer
	TakeReq() *Take
	Taken(Verdict)
}

// failMsg records one invalid credential (fire-and-forget).
type failMsg struct {
	kind Kind
	addr netip.Addr
	now  time.Time
}

// lenProbe asks a shard for its entry count (tests).
type lenProbe chan int

// exportMsg asks a shard for what it counted since the last export.
type exportMsg chan []Count

// absorbMsg hands a shard the owner's sums and lockouts for its addresses.
type absorbMsg struct {
	sums  []Sum
	locks []Lock
	now   int64
}

type shard struct{ l *limiter }

func (s shard) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *takeCall:
		m.Reply(s.l.take(m.Req.Kinds, m.Req.Addr, m.Req.Now), nil)
	case *failMsg:
		s.l.fail(m.kind, m.addr, m.now)
	case TakeStep:
		r := m.TakeReq()
		m.Taken(s.l.take(r.Kinds, r.Addr, r.Now))
	case actors.Tick:
		s.l.sweep(m.Now)
	case lenProbe:
		m <- s.l.held()
	case exportMsg:
		m <- s.l.export(nil)
	case *absorbMsg:
		s.l.absorb(m.sums, m.locks, m.now)
	}
}

// Config configures New; the zero value works.
type Config struct {
	Shards     int           // shard actors (power of two); 0 = 2×GOMAXPROCS
	Clock      clock.Clock   // stamps the sweep tick; nil: no automatic sweeps
	SweepEvery time.Duration // 0 = 30 s
	Timeout    time.Duration // one Take round trip; 0 = 5 s
	// MaxEntries bounds the counters held over all shards (about 100 bytes
	// each); when a shard is full it drops ended windows, then the least-used
	// counters. 0 = DefaultMaxEntries; < 0 = no bound.
	MaxEntries int
	// Shared keeps what each shard counts for Export (cluster mode): the
	// address shards' owners sum every node's counts.
	Shared bool
}

// DefaultMaxEntries is the counters held when Config.MaxEntries is 0: about
// 50 MB at most. Anonymous callers fill the table (every address that calls
// /api/lookup holds its day's window, four counters for IPv6), and the whole
// process must stay within 300 MB of RSS with its feeds (about 180 MB)
// loaded: 2,000,000 counters took it to 390 MB. The relief order (ended
// windows, then one-off addresses) keeps heavy hitters' counts and every
// lockout's count at this size too.
const DefaultMaxEntries = 500_000

// Client is the typed per-address limiter client; safe for concurrent use.
type Client struct {
	shards  *actors.Shards
	calls   *actors.Calls[Take, Verdict]
	timeout time.Duration
	stopped atomic.Bool
}

// New spawns the limiter shards.
func New(root *actor.RootContext, cfg Config) *Client {
	if cfg.SweepEvery == 0 {
		cfg.SweepEvery = 30 * time.Second
	}
	if cfg.MaxEntries == 0 {
		cfg.MaxEntries = DefaultMaxEntries
	}
	n := actors.ShardCount(cfg.Shards)
	per := 0
	if cfg.MaxEntries > 0 {
		per = max(cfg.MaxEntries/n, 64)
	}
	// The limiters outlive a restarted actor: they are the only copy of the
	// counts and lockouts, and an attacker who could crash a shard must not
	// wipe its lockouts by doing so.
	ls := make([]*limiter, n)
	for i := range ls {
		ls[i] = newLimiter(per, cfg.Shared)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	c := &Client{
		shards:  actors.SpawnShards(root, n, func(i int) actor.Actor { return shard{ls[i]} }, actors.Named("iplimit"), actors.InlineRuns()),
		calls:   actors.NewCalls[Take, Verdict](cfg.Timeout),
		timeout: cfg.Timeout,
	}
	c.shards.Tick(cfg.Clock, cfg.SweepEvery)
	return c
}

// Take takes one request from every limiter in kinds for addr, in one hop:
// all of them or (on a refusal) none.
func (c *Client) Take(kinds Kinds, addr netip.Addr, now time.Time) (Verdict, error) {
	if c.stopped.Load() {
		return Verdict{}, ErrStopped
	}
	call := c.calls.Get(Take{Kinds: kinds, Addr: addr, Now: now})
	c.shards.Send(shardHash(addr), call)
	return c.calls.Wait(call)
}

// TakeThen is Take as a step of a chained call: it sends st to the
// address's shard and returns at once; the shard calls st.Taken.
func (c *Client) TakeThen(st TakeStep) {
	if c.stopped.Load() {
		st.Fail(ErrStopped)
		return
	}
	c.shards.Send(shardHash(st.TakeReq().Addr), st)
}

// Check reports whether addr is locked out (Take of AuthFail alone).
func (c *Client) Check(addr netip.Addr, now time.Time) (Verdict, error) {
	return c.Take(Of(AuthFail), addr, now)
}

// Fail records an invalid credential from addr against lockout k (AuthFail
// for API keys and tokens, AdminFail for operator tokens): the caller is
// locked out once the lockout's window fills. Fire-and-forget; a Take sent
// afterwards by the same goroutine sees it.
func (c *Client) Fail(k Kind, addr netip.Addr, now time.Time) {
	if k >= NumKinds || Rules[k].LockFor == 0 {
		return
	}
	if !c.stopped.Load() {
		c.shards.Send(shardHash(addr), &failMsg{kind: k, addr: addr, now: now})
	}
}

// Sweep asks every shard to drop ended windows as of now.
func (c *Client) Sweep(now time.Time) {
	if !c.stopped.Load() {
		c.shards.Broadcast(actors.Tick{Now: now})
	}
}

// Export collects what every shard counted since the last Export (empty
// unless Config.Shared). A shard that does not answer within the Take
// timeout is left out, and what it hands over when it does answer is lost
// (nobody reads this Export's channel any more): the others' view of those
// addresses errs permissive by it, as when a member does not answer.
func (c *Client) Export() ([]Count, error) {
	if c.stopped.Load() {
		return nil, ErrStopped
	}
	n := c.shards.Len()
	ch := make(exportMsg, n)
	c.shards.Broadcast(ch)
	t := time.NewTimer(c.timeout)
	defer t.Stop()
	var out []Count
	for range n {
		select {
		case got := <-ch:
			out = append(out, got...)
		case <-t.C:
			return out, fmt.Errorf("iplimit: export: a shard did not answer within %v: %w", c.timeout, actors.ErrUnavailable)
		}
	}
	return out, nil
}

// Absorb hands the owners' sums and lockouts to the shards of their
// addresses, fire-and-forget: a Take sent afterwards by the same goroutine
// sees them.
func (c *Client) Absorb(sums []Sum, locks []Lock, now time.Time) {
	if c.stopped.Load() || len(sums)+len(locks) == 0 {
		return
	}
	n := c.shards.Len()
	by := make([]absorbMsg, n)
	for _, s := range sums {
		i := c.shards.Index(actors.Mix64(s.Key.Route()))
		by[i].sums = append(by[i].sums, s)
	}
	for _, l := range locks {
		i := c.shards.Index(actors.Mix64(l.Route()))
		by[i].locks = append(by[i].locks, l)
	}
	ns := now.UnixNano()
	for i := range by {
		if len(by[i].sums)+len(by[i].locks) > 0 {
			m := &by[i]
			m.now = ns
			c.shards.Send(uint64(i), m) // index i is its own hash
		}
	}
}

// entries counts the counters held over all shards (tests).
func (c *Client) entries() int {
	ch := make(lenProbe, c.shards.Len())
	c.shards.Broadcast(ch)
	n := 0
	for range c.shards.Len() {
		n += <-ch
	}
	return n
}

// Stop stops the shards after their mailboxes are handled.
func (c *Client) Stop() error { return c.StopBy(time.Time{}) }

// StopBy is Stop waiting for the shards only until by (actors.StopWait).
func (c *Client) StopBy(by time.Time) error {
	if c.stopped.Swap(true) {
		return nil
	}
	if err := c.shards.StopBy(by); err != nil {
		return fmt.Errorf("iplimit: %w", err)
	}
	return nil
}
