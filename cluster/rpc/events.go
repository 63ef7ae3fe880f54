package rpc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/actors/events"
	"github.com/fraudd/fraudd/storage"
)

// Device events in a cluster: a browser's collector report is stored at
// the owner of its account's shard (Quota.CollectEvent: in the collection
// budget's round trip), and the id minted for it names that node
// (events.Config.Node). An evaluation that sends the id to another node —
// any load balancer may — resolves it at the node that stored it, in one
// round trip (inside the Evaluate call when that node is the owner); that
// node counts the use (replays are judged where the event lives). A storing node that is down answers nothing: the evaluation's
// device evidence is unavailable (it fails open, as for a local store
// error) until the node returns.

// LocalEvents is the node's own device-event actors (*events.Client).
type LocalEvents interface {
	Collect(events.Collected) (events.EventID, error)
	Store(*storage.DeviceEvent) (events.EventID, error)
	Resolve(events.Resolve) (events.Resolved, error)
	Peek(events.Resolve) (events.Resolved, error)
	ResolveThen(events.ResolveStep)
	Unuse(id events.EventID, account string, at time.Time)
}

// NodeRoute is the route of a node id in the events it stores (never
// zero: zero is an id minted outside cluster mode).
func NodeRoute(id string) uint16 {
	// HashString mixes every bit into the top ones (ids such as node1 and
	// node2, which differ in a last byte, get different routes).
	if r := uint16(actors.HashString(id) >> 48); r != 0 {
		return r
	}
	return 1
}

// ErrStorerDown is a Resolve for an event stored by a node that is not a
// live member now.
var ErrStorerDown = errors.New("cluster rpc: the node that stored the device event is not a live member")

// Events implements the checks pipeline's device events (and its chained
// ResolveThen) across the cluster: Collect stores on this node; Resolve
// and Peek go to the node the id names.
type Events struct {
	q     *Quota
	local LocalEvents
	self  uint16
	work  chan events.ResolveStep
}

// eventWorkers carry chained resolves to other nodes, each making one
// blocking call (grpc-go has no asynchronous one); past eventQueue waiting
// steps a chained resolve fails (its evidence is then unavailable).
const eventWorkers, eventQueue = 16, 1024

// Events returns the events client over local that reaches other members
// through q's connections; its workers stop with q.
func (q *Quota) Events(local LocalEvents) *Events {
	e := &Events{q: q, local: local, self: NodeRoute(q.cfg.Owners.Self()), work: make(chan events.ResolveStep, eventQueue)}
	q.evs.Store(e)
	for range eventWorkers {
		q.wg.Go(func() {
			for {
				select {
				case <-q.done:
					// Close fails what is still queued once every worker
					// is gone: workers draining it side by side could
					// block on a queue another emptied, and Close with them.
					return
				case st := <-e.work:
					m := *st.ResolveReq()
					st.Resolved(e.remote(&m))
				}
			}
		})
	}
	return e
}

// Collect stores on this node.
func (e *Events) Collect(m events.Collected) (events.EventID, error) { return e.local.Collect(m) }

// Resolve implements the pipeline's Events.
func (e *Events) Resolve(m events.Resolve) (events.Resolved, error) {
	if e.mine(&m.ID) {
		return e.local.Resolve(m)
	}
	return e.remote(&m)
}

// Peek implements the pipeline's Events.
func (e *Events) Peek(m events.Resolve) (events.Resolved, error) {
	m.Peek = true
	return e.Resolve(m)
}

// ResolveThen is Resolve as a step of a chained call: on this node, the
// local actors' (no goroutine, no hop); elsewhere a worker makes the call
// and st.Resolved runs on it.
func (e *Events) ResolveThen(st events.ResolveStep) {
	if e.mine(&st.ResolveReq().ID) {
		e.local.ResolveThen(st)
		return
	}
	switch err := e.enqueue(st); {
	case errors.Is(err, ErrClosed):
		st.Fail(err)
	case err != nil:
		st.Resolved(events.Resolved{}, err)
	}
}

// enqueue puts st on the workers' queue: ErrClosed once the client closed
// (no worker reads it then), ErrBusy when it is full. The read lock keeps
// Close from starting between the check and the send; the send never
// blocks.
func (e *Events) enqueue(st events.ResolveStep) error {
	e.q.mu.RLock()
	defer e.q.mu.RUnlock()
	if e.q.closed.Load() {
		return ErrClosed
	}
	select {
	case e.work <- st:
		return nil
	default:
		return fmt.Errorf("cluster rpc: too many device events being resolved at other nodes: %w", ErrBusy)
	}
}

// Unuse gives back one use of the event, counted at at for account, where
// the event is stored: here, or at the members its id names (in the
// background; a member that does not answer keeps the use, and the
// evaluation tried again reads as a replay).
func (e *Events) Unuse(id events.EventID, account string, at time.Time) {
	if e.mine(&id) {
		e.local.Unuse(id, account, at)
		return
	}
	members := e.storers(events.NodeOf(&id))
	for _, member := range members {
		e.q.background(func(ctx context.Context) {
			if err := e.unuseAt(ctx, member, id, account, at); err != nil {
				e.q.log.Warn("cluster: a device event's use not given back; the evaluation tried again reads as a replay", "node", member, "err", err)
			}
		})
	}
	if len(members) == 0 {
		// Collected here before cluster mode, as in remote.
		e.local.Unuse(id, account, at)
	}
}

// storers are the other live members whose events carry route: the node
// an id with that route names (more than one only when two members'
// routes collide).
func (e *Events) storers(route uint16) []string {
	var out []string
	for _, member := range e.q.cfg.Owners.Members() {
		if member != e.q.cfg.Owners.Self() && NodeRoute(member) == route {
			out = append(out, member)
		}
	}
	return out
}

func (e *Events) unuseAt(ctx context.Context, member string, id events.EventID, account string, at time.Time) error {
	p, err := e.q.peer(member)
	if err != nil {
		return err
	}
	_, err = p.cli.Unuse(ctx, &UnuseRequest{Version: version, Id: id[:], Account: account, UsedUnixNano: unixNano(at)})
	if status.Code(err) == codes.Unimplemented {
		return fmt.Errorf("node %s predates Unuse: %w", member, err)
	}
	return err
}

// mine reports whether the id names this node (or none: zero).
func (e *Events) mine(id *events.EventID) bool {
	r := events.NodeOf(id)
	return r == 0 || r == e.self
}

// remote resolves m at the members the id names (one, unless two members'
// routes collide). When no live member has the id's route, the event may
// still be this node's: one it collected before it ran in cluster mode,
// whose id has random bytes where a node's route goes. It is looked for
// here then, and only when it is not here is the storer down.
func (e *Events) remote(m *events.Resolve) (events.Resolved, error) {
	route := events.NodeOf(&m.ID)
	var last error = ErrStorerDown
	members := e.storers(route)
	for _, id := range members {
		res, err := e.resolveAt(id, m)
		if err == nil && res.Found {
			return res, nil
		}
		if err != nil {
			last = err
			continue
		}
		last = nil // answered: not there
	}
	if len(members) == 0 {
		if res, err := e.local.Resolve(*m); err != nil || res.Found {
			return res, err
		}
	}
	if last != nil {
		return events.Resolved{}, fmt.Errorf("device event at node route %04x: %w", route, last)
	}
	return events.Resolved{}, nil
}

func (e *Events) resolveAt(id string, m *events.Resolve) (events.Resolved, error) {
	p, err := e.q.peer(id)
	if err != nil {
		return events.Resolved{}, err
	}
	timeout := e.q.cfg.Timeout
	if !m.Deadline.IsZero() {
		left := time.Until(m.Deadline)
		if left <= 0 {
			return events.Resolved{}, fmt.Errorf("device event at node %s: %w", id, context.DeadlineExceeded)
		}
		timeout = min(timeout, left)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	e.q.remote.Add(1)
	rep, err := p.cli.Resolve(ctx, &ResolveRequest{Version: version, Id: m.ID[:], Account: m.Account, Peek: m.Peek})
	if err != nil {
		return events.Resolved{}, err
	}
	return resolvedOf(rep)
}

// resolvedOf checks and converts a member's answer.
func resolvedOf(r *ResolveReply) (events.Resolved, error) {
	if !r.GetFound() {
		return events.Resolved{}, nil
	}
	ev, err := storage.UnmarshalEvent(r.GetEvent())
	if err != nil {
		return events.Resolved{}, fmt.Errorf("cluster rpc: resolve reply: %w", err)
	}
	if r.GetTimesSeen() < 0 || len(r.GetVisitor()) > storage.MaxVisitorLen {
		return events.Resolved{}, fmt.Errorf("cluster rpc: resolve reply: sightings %d of a %d-byte visitor", r.GetTimesSeen(), len(r.GetVisitor()))
	}
	return events.Resolved{Found: true, Event: *ev, Replayed: r.Replayed, Sightings: storage.Sightings{
		Visitor: r.Visitor, FirstSeen: fromUnixNano(r.FirstSeenUnixNano), LastSeen: fromUnixNano(r.LastSeenUnixNano), TimesSeen: r.TimesSeen,
	}}, nil
}

// Resolve implements NodeServer: an event this node stored, for an
// evaluation on another node; the use counts here.
func (s *Server) Resolve(_ context.Context, r *ResolveRequest) (*ResolveReply, error) {
	if r.GetVersion() == 0 || r.GetAccount() == "" || len(r.GetId()) != storage.EventIDLen {
		return nil, status.Error(codes.InvalidArgument, fmt.Sprintf("%v: resolve for %q", errBadRequest, r.GetAccount()))
	}
	if s.cfg.Events == nil {
		return nil, status.Error(codes.Unavailable, "cluster rpc: this node keeps no device events")
	}
	m := events.Resolve{Account: r.Account, Now: s.cfg.Now(), Peek: r.Peek}
	copy(m.ID[:], r.Id)
	res, err := s.cfg.Events.Resolve(m)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return resolveReply(&res), nil
}

// Unuse implements NodeServer: one use of an event this node stores,
// given back because the evaluation that used it was settled.
func (s *Server) Unuse(_ context.Context, r *UnuseRequest) (*UnuseReply, error) {
	if r.GetVersion() == 0 || r.GetAccount() == "" || len(r.GetAccount()) > maxObsAccountID || len(r.GetId()) != storage.EventIDLen || r.GetUsedUnixNano() <= 0 {
		return nil, status.Error(codes.InvalidArgument, fmt.Sprintf("%v: unuse for %q", errBadRequest, r.GetAccount()))
	}
	if s.cfg.Events == nil {
		return nil, status.Error(codes.Unavailable, "cluster rpc: this node keeps no device events")
	}
	var id events.EventID
	copy(id[:], r.Id)
	s.cfg.Events.Unuse(id, r.Account, fromUnixNano(r.UsedUnixNano))
	return &UnuseReply{Version: version}, nil
}

func resolveReply(res *events.Resolved) *ResolveReply {
	reply := &ResolveReply{Version: version, Found: res.Found}
	if !res.Found {
		return reply
	}
	reply.Replayed = res.Replayed
	reply.Event = storage.MarshalEvent(nil, &res.Event)
	sg := &res.Sightings
	reply.Visitor, reply.FirstSeenUnixNano, reply.LastSeenUnixNano, reply.TimesSeen = sg.Visitor, unixNano(sg.FirstSeen), unixNano(sg.LastSeen), sg.TimesSeen
	return reply
}
