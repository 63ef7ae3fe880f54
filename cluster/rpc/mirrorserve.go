package rpc

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fraudd/fraudd/actors/devicehist"
	"github.com/fraudd/fraudd/actors/events"
	"github.com/fraudd/fraudd/cluster"
	"github.com/fraudd/fraudd/storage"
)

// The owner's end of a Mirror stream (mirror.go has the holder's): the
// history's shards hand each change of a watched account's records to the
// stream of the watcher that asked, in their order, and the stream sends
// them on. A holder that does not read fast enough fills its queue and its
// stream is ended (it drops its mirrors and asks again), so a slow holder
// never holds up a shard.

// mirrorQueue bounds the pushes waiting for one holder's stream.
const mirrorQueue = 1 << 14

// mirrorOptionalBytes bounds the bytes queued for one holder's stream
// past which an optional push (the records in memory sent with a first
// watch: up to 8,192 records each, 512 KiB to a push) is dropped rather
// than queued: many first watches at once (a holder's lease calls after a
// restart) would otherwise queue gigabytes, or end the stream, and with it
// every mirror of the holder, which would then watch again. Other pushes
// are queued whatever their bytes: each change must reach the holder.
const mirrorOptionalBytes = 64 << 20

// mirrorMaxPushes bounds the pushes in one frame (and mirrorMaxFrameBytes
// their bytes, past one push alone): a device record with every list full
// is about 10 KiB, an existence filter at most 3 MiB, and a frame must stay
// under gRPC's 4 MiB limit.
const (
	mirrorMaxPushes     = 256
	mirrorMaxFrameBytes = 1 << 20
)

// mirrorConns are the watchers of this node's history: one per Mirror
// stream into it.
type mirrorConns struct {
	// dropped counts the optional pushes dropped (deliver).
	dropped atomic.Int64
	mu      sync.RWMutex
	next    uint64
	conns   map[uint64]*mirrorConn
	runs    map[mirrorRunKey]*mirrorRun
}

type mirrorConn struct {
	out      chan devicehist.MirrorPush
	full     chan struct{} // closed when out overflowed
	fullOnce sync.Once
	// applied is the holder run's highest observation recorded, sent with
	// every frame (the acknowledgement).
	applied atomic.Uint64
	// queued is about the bytes of the pushes in out (pushSize).
	queued atomic.Int64
}

// What a holder that begins to mirror an account is sent of the events
// stored before: those of the last mirrorBackfillFor, the newest
// mirrorBackfillMax of them.
const (
	mirrorBackfillFor = 10 * time.Minute
	mirrorBackfillMax = 4096
)

// mirrorRun is what an owner remembers of one run of a holder: the
// highest observation number it recorded, so that observations sent again
// on a later stream (their acknowledgement was lost with the last one)
// count once. Kept for batchMemory after its last use.
type mirrorRun struct {
	mu      sync.Mutex // held while the run's observations are recorded
	applied uint64
	// used is when it was last used (Unix nanoseconds): read without mu by
	// the sweep in run, which holds the runs' lock. Taking mu there would
	// wait for a recording, whose history pushes wait for the runs' lock
	// (deliver): a deadlock.
	used atomic.Int64
}

type mirrorRunKey struct {
	node string
	run  uint64
}

// run is the state of a holder's run, made on first use; runs unused for
// batchMemory are forgotten.
func (mc *mirrorConns) run(k mirrorRunKey, now time.Time) *mirrorRun {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	if mc.runs == nil {
		mc.runs = map[mirrorRunKey]*mirrorRun{}
	}
	r := mc.runs[k]
	if r == nil {
		for k2, r2 := range mc.runs {
			if now.Sub(time.Unix(0, r2.used.Load())) > batchMemory {
				delete(mc.runs, k2)
			}
		}
		r = &mirrorRun{}
		r.used.Store(now.UnixNano()) // in use from now: not swept by the next new run
		mc.runs[k] = r
	}
	return r
}

// historyPush is the history's sink. A registration's start (Begins: the
// watcher's first watch of the account, or its first since an unwatch or
// a reset, as the history's shard alone knows) has the account's recent
// events sent after it; every other push goes to its watcher's stream.
// It never blocks.
func (s *Server) historyPush(p devicehist.MirrorPush) {
	if p.Begins {
		if s.cfg.Recent != nil && s.cfg.Events != nil {
			// Off the shard: a resolve each. The shard registered the
			// watcher before it said so, so these pushes follow the
			// registration's snapshot.
			go s.backfillEvents(p.Watcher, p.Customer)
		}
		return
	}
	s.mirrors.deliver(p)
}

// deliver sends a push to its watcher's stream, or ends that stream when
// its queue is full. An optional push that would take the stream's queued
// bytes past mirrorOptionalBytes is dropped instead (and counted). It
// never blocks.
func (mc *mirrorConns) deliver(p devicehist.MirrorPush) {
	mc.mu.RLock()
	c := mc.conns[p.Watcher]
	mc.mu.RUnlock()
	if c == nil {
		return
	}
	size := int64(pushSize(&p))
	if p.Optional && c.queued.Load()+size > mirrorOptionalBytes {
		mc.dropped.Add(1)
		return
	}
	c.queued.Add(size)
	select {
	case c.out <- p:
	default:
		c.queued.Add(-size)
		c.fullOnce.Do(func() { close(c.full) })
	}
}

// take is a push taken off c's queue.
func (c *mirrorConn) take(p *devicehist.MirrorPush) *devicehist.MirrorPush {
	c.queued.Add(-int64(pushSize(p)))
	return p
}

func (mc *mirrorConns) add() (uint64, *mirrorConn) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	if mc.conns == nil {
		mc.conns = map[uint64]*mirrorConn{}
	}
	mc.next++
	c := &mirrorConn{out: make(chan devicehist.MirrorPush, mirrorQueue), full: make(chan struct{})}
	mc.conns[mc.next] = c
	return mc.next, c
}

func (mc *mirrorConns) remove(id uint64) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	delete(mc.conns, id)
}

// Mirror implements NodeServer.
func (s *Server) Mirror(stream Node_MirrorServer) error {
	h := s.cfg.Mirror
	if h == nil {
		return status.Error(codes.Unavailable, "cluster rpc: this node keeps no device history to mirror")
	}
	id, c := s.mirrors.add()
	defer func() {
		s.mirrors.remove(id)
		h.UnwatchAll(id)
	}()
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	sent := make(chan error, 1)
	last := make(chan struct{})
	go func() { sent <- mirrorSend(ctx, stream, c, last) }()
	ups := received(ctx, stream.Recv)
	var err error
loop:
	for {
		select {
		case u, ok := <-ups:
			if !ok {
				break loop // the holder closed its side, or the stream broke
			}
			s.mirrorUp(id, c, u)
		case <-c.full:
			err = status.Error(codes.ResourceExhausted, "cluster rpc: the mirror's changes came faster than the holder read them; ask again")
			cancel()
			<-sent
			return err
		case <-s.stopping:
			err = status.Error(codes.Unavailable, "cluster rpc: this node is stopping")
			break loop
		case err = <-sent:
			return err
		}
	}
	// No observation is recorded from here on: the sender's last frame
	// acknowledges all those that were. Without it a holder would send
	// them again on its next stream, and the owner that gets them (this
	// node after a restart, or the next owner, which this node's history
	// moves to) would record them twice. A stopping node's stop stores
	// what it recorded; a holder that stopped reading is cut off by the
	// server's stop (StopServer), which ends the send.
	close(last)
	if serr := <-sent; err == nil {
		err = serr
	}
	return err
}

// mirrorSend sends c's pushes, as many to a frame as are waiting, until
// ctx ends or a send fails; once last is closed it sends one frame more,
// with no pushes (the holder drops its mirrors as the stream ends) and the
// acknowledgement of everything recorded, and ends.
func mirrorSend(ctx context.Context, stream Node_MirrorServer, c *mirrorConn, last <-chan struct{}) error {
	var next *devicehist.MirrorPush // taken for a frame it did not fit in
	for {
		select {
		case <-last:
			return stream.Send(&MirrorDown{Version: version, Applied: c.applied.Load()})
		default:
		}
		if next == nil {
			select {
			case <-ctx.Done():
				return nil
			case <-last:
				continue
			case p := <-c.out:
				next = c.take(&p)
			}
		}
		f := &MirrorDown{Version: version}
		size := 0
		for next != nil {
			if next.Customer != "" {
				n := pushSize(next)
				if len(f.Pushes) > 0 && size+n > mirrorMaxFrameBytes {
					break // it goes first in the next frame
				}
				f.Pushes = append(f.Pushes, pushMsg(next))
				size += n
			}
			next = nil
			if len(f.Pushes) >= mirrorMaxPushes || size >= mirrorMaxFrameBytes {
				break
			}
			select {
			case p := <-c.out:
				next = c.take(&p)
			default:
			}
		}
		f.Applied = c.applied.Load()
		if err := stream.Send(f); err != nil {
			return err
		}
	}
}

// pushSize is about what p adds to a frame: its records, event and filter.
func pushSize(p *devicehist.MirrorPush) int {
	n := len(p.Customer) + len(p.Event) + len(p.Filter)
	for _, r := range p.Records {
		n += len(r.Parcel) + 4
	}
	return n
}

func pushMsg(p *devicehist.MirrorPush) *MirrorPush {
	m := &MirrorPush{Customer: p.Customer, Reset_: p.Reset, Event: p.Event, Filter: p.Filter}
	if len(p.Records) > 0 {
		m.Records = make([][]byte, len(p.Records))
		m.Absent = make([]bool, len(p.Records))
		for i, r := range p.Records {
			m.Records[i], m.Absent[i] = r.Parcel, r.Absent
		}
	}
	return m
}

// mirrorUp does what a holder's frame asks: unwatches, watches (of
// accounts this node owns; any other is answered reset), and its
// observations, recorded here at this node's clock. An observation of an
// account this node no longer owns is recorded all the same: it is then a
// leftover, which HistoryMover moves to the owner, as the holder's own
// records would be.
func (s *Server) mirrorUp(id uint64, c *mirrorConn, u *MirrorUp) {
	h := s.cfg.Mirror
	for _, account := range u.GetUnwatch() {
		h.Unwatch(account, id)
	}
	for _, w := range u.GetWatches() {
		keys, err := mirrorKeysOf(w)
		if err == nil {
			_, err = s.cfg.Owners.Held(cluster.ShardOf(cluster.KindAccount, w.GetCustomer()))
		}
		if err == nil {
			err = h.Watch(w.GetCustomer(), id, keys)
		}
		if err != nil {
			s.log.Debug("cluster rpc: a mirror watch refused", "account", w.GetCustomer(), "err", err)
			s.mirrors.deliver(devicehist.MirrorPush{Watcher: id, Customer: w.GetCustomer(), Reset: true})
		}
	}
	ops := u.GetOps()
	if len(ops) == 0 {
		return
	}
	var run *mirrorRun
	if u.GetRun() != 0 && u.GetFirstOp() != 0 {
		run = s.mirrors.run(mirrorRunKey{u.GetNode(), u.GetRun()}, time.Now())
		run.mu.Lock()
		defer func() {
			run.used.Store(time.Now().UnixNano())
			c.applied.Store(run.applied)
			run.mu.Unlock()
			// The acknowledgement goes with the next frame: a marker
			// wakes the sender when no push would (a full queue has
			// frames to carry it already).
			select {
			case c.out <- devicehist.MirrorPush{}:
			default:
			}
		}()
	}
	for i, op := range ops {
		if run != nil {
			n := u.GetFirstOp() + uint64(i)
			if n <= run.applied {
				continue // recorded already: sent again after a stream broke
			}
			run.applied = n
		}
		account := op.GetCustomer()
		if account == "" || len(account) > storage.MaxHistCustomer {
			continue
		}
		now := s.cfg.Now()
		if id := op.GetUseEvent(); len(id) == storage.EventIDLen && s.cfg.Events != nil {
			// The holder answered its first use: count it here, where the
			// event is stored. Used already (here, or by another holder
			// within the push's way there), that answer missed a replay.
			r := events.Resolve{Account: account, Now: now}
			copy(r.ID[:], id)
			if res, err := s.cfg.Events.Resolve(r); err == nil && res.Replayed {
				s.mirrorLateUses.Add(1)
				s.log.Debug("cluster rpc: a holder answered an event's first use after another", "account", account)
			}
		}
		if op.GetObservation() == nil {
			continue
		}
		o, err := observationOf(op.GetObservation(), account)
		if err != nil || o.Test {
			continue
		}
		o.Now = now
		if _, err := h.Observe(*o); err != nil {
			s.log.Warn("cluster rpc: a holder's observation was not recorded", "account", o.Customer, "err", err)
		}
	}
}

// backfillEvents sends watcher the account's events this node stored
// before it watched (ServerConfig.Recent), as the owner's pushes of events
// it stores: unused ones fresh, used ones as replays, each with its
// device's record, in the history shard's order. So a holder's first
// evaluation of an event collected before it began to mirror the account
// needs no round trip either. A resolve that counts no use reads each.
func (s *Server) backfillEvents(watcher uint64, account string) {
	now := s.cfg.Now()
	for _, id := range s.cfg.Recent.Recent(account, now.Add(-mirrorBackfillFor), mirrorBackfillMax) {
		if r, b, ok := mirrorEventOf(s.cfg.Events.Resolve, account, id, now); ok {
			s.cfg.Mirror.PushEventTo(account, r.Event.VisitorID, watcher, b)
		}
	}
}

// MirrorLateUses counts the first uses of pushed events that holders
// answered although the event had been used already (docs/cluster.md: the
// replay window of a pushed event).
func (s *Server) MirrorLateUses() int64 { return s.mirrorLateUses.Load() }

// MirrorDroppedPushes counts the optional pushes (records in memory sent
// with a first watch) dropped because a holder's stream was too far
// behind (mirrorOptionalBytes).
func (s *Server) MirrorDroppedPushes() int64 { return s.mirrors.dropped.Load() }

func mirrorKeysOf(w *MirrorWatch) (devicehist.MirrorKeys, error) {
	keys := devicehist.MirrorKeys{DeviceID: w.GetDeviceId(), AccountID: w.GetAccountId(), SharedExit: w.GetSharedExit()}
	if len(w.GetIp()) > 0 {
		ip, ok := netip.AddrFromSlice(w.GetIp())
		if !ok {
			return keys, fmt.Errorf("%w: a %d-byte address", errBadRequest, len(w.GetIp()))
		}
		keys.IP = ip
	}
	if len(keys.DeviceID) > storage.MaxHistDevice || len(keys.AccountID) > maxObsAccountID {
		return keys, fmt.Errorf("%w: a watch's device id of %d bytes, account id of %d", errBadRequest, len(keys.DeviceID), len(keys.AccountID))
	}
	return keys, nil
}
