// Package traffic counts authenticated API traffic for the public threat feed
// (SPEC 2.4): totals, threats and VPN/proxy/datacenter hits in 10-minute
// buckets over a rolling week. One actor owns the buckets; requests record
// fire-and-forget into a small shared tally that the actor takes whenever it
// needs current figures (a feed, a tick, a stop), and the buckets are
// written to storage on a tick, so a restart keeps the week (losing at most
// one tick of counts: these are advisory statistics, not billing).
package traffic

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/internal/clock"
	"github.com/fraudd/fraudd/storage"
)

// Bucket is the counting granularity; "today" is the last 24 hours of buckets.
const Bucket = 10 * time.Minute

const (
	day  = 24 * time.Hour
	week = 7 * day
)

// Record is one counted call (evaluate, lookup or MCP lookup_ip on a live key).
type Record struct {
	Threat, VPN, Proxy, DCH bool
	Now                     time.Time
}

// Feed is what the threat feed reports about traffic.
type Feed struct {
	Today       storage.TrafficCounts // rolling 24 h
	WeekTotal   uint64
	WeekThreats uint64
}

// Config configures New; the zero value works (memory only).
type Config struct {
	Store      *storage.DB // nil: memory only
	Clock      clock.Clock // stamps the flush tick; nil: flush only on Stop
	FlushEvery time.Duration
	Logger     *slog.Logger
}

// Counter is the typed client of the traffic actor.
type Counter struct {
	shards *actors.Shards
	feeds  *actors.Calls[time.Time, Feed]
	st     *state
	tally  *tally
}

// tally holds the counts recorded since the actor last took them. A request
// adds to it under a mutex instead of sending the actor a message: one
// message per counted call cost an allocation and a wake-up of the actor's
// worker, more than the counting itself.
type tally struct {
	mu      sync.Mutex
	buckets []pendingBucket // few: the calls of one tick fall in one or two buckets
	spare   []pendingBucket // the actor's: swapped in by drain
}

type pendingBucket struct {
	start  int64 // bucket start, Unix seconds
	counts storage.TrafficCounts
}

// maxPendingBuckets bounds the tally: records whose times spread over more
// buckets than this (a test clock jumping about) are handed to the actor
// at once instead.
const maxPendingBuckets = 64

func (t *tally) add(r *Record) (full bool) {
	k := r.Now.Truncate(Bucket).Unix()
	t.mu.Lock()
	defer t.mu.Unlock()
	var b *storage.TrafficCounts
	for i := len(t.buckets) - 1; i >= 0; i-- {
		if t.buckets[i].start == k {
			b = &t.buckets[i].counts
			break
		}
	}
	if b == nil {
		t.buckets = append(t.buckets, pendingBucket{start: k})
		b = &t.buckets[len(t.buckets)-1].counts
	}
	b.Total++
	if r.Threat {
		b.Threats++
	}
	if r.VPN {
		b.VPN++
	}
	if r.Proxy {
		b.Proxy++
	}
	if r.DCH {
		b.DCH++
	}
	return len(t.buckets) >= maxPendingBuckets
}

// drain adds the tally into st and empties it. Only the actor drains, so
// spare (the buffer Record fills next time) needs no lock of its own.
func (t *tally) drain(st *state) {
	t.mu.Lock()
	bs := t.buckets
	t.buckets = t.spare[:0]
	t.mu.Unlock()
	for i := range bs {
		st.add(bs[i].start, &bs[i].counts)
	}
	t.spare = bs[:0]
}

// drainReq asks the actor to take the tally now (it grew full).
type drainReq struct{}

type state struct {
	buckets map[int64]*storage.TrafficCounts // bucket start (Unix seconds) → counts
	dirty   map[int64]bool
	store   *storage.DB
	log     *slog.Logger
}

type feedCall = actors.Call[time.Time, Feed]

type flush struct{ done chan error }

type owner struct {
	st    *state
	tally *tally
}

// New loads the last week from the store and spawns the actor.
func New(root *actor.RootContext, cfg Config) (*Counter, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.FlushEvery == 0 {
		cfg.FlushEvery = 10 * time.Second
	}
	st := &state{store: cfg.Store, log: cfg.Logger}
	now := func() time.Time {
		if cfg.Clock != nil {
			return cfg.Clock.Now()
		}
		return time.Now()
	}
	if err := st.load(now()); err != nil {
		return nil, err
	}
	c := &Counter{st: st, feeds: actors.NewCalls[time.Time, Feed](0), tally: &tally{}}
	opts := []actors.ShardOption{actors.Named("traffic"), actors.WithLogger(cfg.Logger)}
	if cfg.Store != nil {
		// After a panic the actor reads the week from the store again; the
		// counts of the last tick not yet written are lost, as on a crash.
		opts = append(opts, actors.OnRestart(func(int) {
			if err := st.load(now()); err != nil {
				cfg.Logger.Warn("traffic: counts not reloaded after a restart; starting empty", "err", err)
			}
		}))
	}
	c.shards = actors.SpawnShards(root, 1, func(int) actor.Actor { return owner{st, c.tally} }, opts...)
	c.shards.Tick(cfg.Clock, cfg.FlushEvery)
	return c, nil
}

// load replaces the buckets with the stored week as of now (empty without a
// store or on a failure).
func (st *state) load(now time.Time) error {
	st.buckets, st.dirty = map[int64]*storage.TrafficCounts{}, map[int64]bool{}
	if st.store == nil {
		return nil
	}
	bs, err := st.store.Traffic(now.Add(-week - Bucket))
	if err != nil {
		return fmt.Errorf("load traffic counts: %w", err)
	}
	for _, b := range bs {
		c := b.Counts
		st.buckets[b.Start.Unix()] = &c
	}
	return nil
}

// Record counts one call, fire-and-forget.
func (c *Counter) Record(r Record) {
	if c.tally.add(&r) {
		c.shards.Send(0, drainReq{})
	}
}

// Feed returns the traffic figures as of now.
func (c *Counter) Feed(now time.Time) (Feed, error) {
	call := c.feeds.Get(now)
	c.shards.Send(0, call)
	return c.feeds.Wait(call)
}

// Stop writes the last counts and stops the actor. It waits at most 30 s
// for the write (the actor may be down, or the store stuck).
func (c *Counter) Stop() error { return c.StopBy(time.Time{}) }

// lastWriteWait bounds Stop's wait for the last counts' write.
const lastWriteWait = 30 * time.Second

// StopBy is Stop keeping to by: it waits for the last write and the actor
// only until then (a zero by: lastWriteWait, then actors.StopTimeout).
func (c *Counter) StopBy(by time.Time) error {
	done := make(chan error, 1)
	c.shards.Send(0, &flush{done: done})
	wait := actors.StopWaitAtMost(by, lastWriteWait)
	t := time.NewTimer(wait)
	defer t.Stop()
	var err error
	select {
	case err = <-done:
	case <-t.C:
		err = fmt.Errorf("traffic: last counts not written within %v: %w", wait, actors.ErrTimeout)
	}
	if serr := c.shards.StopBy(by); err == nil {
		err = serr
	}
	return err
}

func (o owner) Receive(ctx actor.Context) {
	st := o.st
	switch m := ctx.Message().(type) {
	case drainReq:
		o.tally.drain(st)
	case *feedCall:
		o.tally.drain(st)
		m.Reply(st.feed(m.Req), nil)
	case actors.Tick:
		o.tally.drain(st)
		st.flush(m.Now)
	case *flush:
		o.tally.drain(st)
		m.done <- st.flush(time.Time{})
	}
}

// add counts one bucket's tally.
func (st *state) add(k int64, c *storage.TrafficCounts) {
	b := st.buckets[k]
	if b == nil {
		b = &storage.TrafficCounts{}
		st.buckets[k] = b
	}
	b.Total += c.Total
	b.Threats += c.Threats
	b.VPN += c.VPN
	b.Proxy += c.Proxy
	b.DCH += c.DCH
	st.dirty[k] = true
}

// feed sums the buckets inside the rolling day and week ending at now.
func (st *state) feed(now time.Time) Feed {
	var f Feed
	dayFrom := now.Add(-day).Unix()
	weekFrom := now.Add(-week).Unix()
	end := now.Unix()
	for start, c := range st.buckets {
		// A bucket counts when it ends inside the window; the current one
		// always counts.
		if start+int64(Bucket/time.Second) <= weekFrom || start > end {
			continue
		}
		f.WeekTotal += c.Total
		f.WeekThreats += c.Threats
		if start+int64(Bucket/time.Second) > dayFrom {
			f.Today.Total += c.Total
			f.Today.Threats += c.Threats
			f.Today.VPN += c.VPN
			f.Today.Proxy += c.Proxy
			f.Today.DCH += c.DCH
		}
	}
	return f
}

// flush writes dirty buckets and forgets those older than a week (as of now;
// a zero now keeps everything in memory).
func (st *state) flush(now time.Time) error {
	if !now.IsZero() {
		cut := now.Add(-week - Bucket).Unix()
		for k := range st.buckets {
			if k < cut {
				delete(st.buckets, k)
				delete(st.dirty, k)
			}
		}
	}
	if st.store == nil || len(st.dirty) == 0 {
		return nil
	}
	out := make([]storage.TrafficBucket, 0, len(st.dirty))
	for k := range st.dirty {
		if c := st.buckets[k]; c != nil {
			out = append(out, storage.TrafficBucket{Start: time.Unix(k, 0).UTC(), Counts: *c})
		}
	}
	before := time.Unix(0, 0)
	if !now.IsZero() {
		before = now.Add(-week - Bucket)
	}
	if err := st.store.PutTraffic(out, before); err != nil {
		st.log.Warn("traffic counts not stored; will retry", "err", err)
		return err
	}
	clear(st.dirty)
	return nil
}
