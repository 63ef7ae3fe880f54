package rpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fraudd/fraudd/cluster"
	"github.com/fraudd/fraudd/storage"
)

// LocalHistory is the node's own device history (*devicehist.Client) as the
// cluster moves it: records taken out of it to travel, records merged into
// it on arrival (or given back after a failed delivery).
type LocalHistory interface {
	Take(match func(customer string) bool, now time.Time) ([]storage.HistRecord, error)
	Merge(recs []storage.HistRecord, now time.Time) error
	// MergeParts is Merge that says which records merged when not all
	// did (nil: none).
	MergeParts(recs []storage.HistRecord, now time.Time) (merged []bool, err error)
}

// History batches: at most maxHistoryBatch records of at most
// maxHistoryParcel bytes each (a device record with every list full is
// about 10 KiB), so a batch stays well under gRPC's 4 MiB message limit.
const (
	maxHistoryBatch  = 256
	maxHistoryParcel = 16 << 10
)

// DefaultHistoryEvery is how often a node moves the history records it
// holds of shards it does not own to their owners.
const DefaultHistoryEvery = 10 * time.Second

// historyHold is how long a node leaves the records it received for a
// shard it does not own (yet) where they are: a graceful handoff sends
// them to the shard's next owner just before the old owner releases it,
// and the receiver claims the shard within a balancer pass or two. Sending
// them on at once would return them to the old owner still named in the
// view.
const historyHold = 30 * time.Second

// historyRetry is how soon a round follows a failed delivery (doubling up
// to the Run period while deliveries keep failing), and historyDown how
// long a handoff skips a member that failed one: a rebalance releases
// hundreds of shards one after another, and each must not wait out a
// timeout against a member that does not answer.
const (
	historyRetry = time.Second
	historyDown  = 5 * time.Second
)

// batchMemory is how long a receiver remembers the batches it merged (and
// which of their records), so a batch sent again (its reply was lost) is
// not counted twice. In memory: a receiver that restarts forgets them.
const batchMemory = 10 * time.Minute

// HistoryMover keeps each customer's device history at the owner of its
// account shard (docs/cluster.md, "Device history"). Evaluations of
// accounts a node does not own observe at the owner (Evaluate), so records
// of such accounts arise here only as leftovers: the shards this node
// handed over (Hand, before each release), the shards other nodes took
// over while it was gone (a node back after a failover holds their
// history as it was), and the local observations of leased evaluations
// (kept while the lease lasts: they are the holder's view). Run moves the
// leftovers to the owners; MergeHistory adds them there. A record leaves
// this node before it travels (devicehist.Take, its delete synced) and
// comes back when the receiver says it did not merge it; a batch no reply
// confirmed is sent again with the same id, which the receiver merges
// once, record by record. So each observation counts once wherever it
// ends up (docs/cluster.md says what a crash or a long outage can still
// do).
type HistoryMover struct {
	cfg   HistoryConfig
	base  uint64
	batch atomic.Uint64
	moves sync.Mutex // one move at a time

	kick chan struct{} // a handoff failed: the next round comes sooner
	// call sends one batch to a member (tests lose its replies).
	call func(ctx context.Context, to string, req *HistoryParcels) (*HistoryReply, error)

	mu       sync.Mutex
	down     map[string]time.Time    // members a handoff failed to, until when skipped
	merged   map[batchID]*batchState // batches merged here (in part), until batchMemory after
	held     map[string]*heldBatch   // per member, the batch sent it and never confirmed (under moves)
	received map[int]time.Time       // shards records arrived for, until historyHold after
}

// HistoryConfig configures NewHistoryMover.
type HistoryConfig struct {
	Local  LocalHistory
	Owners Ownership
	Peers  *Quota
	// Leased are the accounts this node charges from slices of their
	// allowance (Quota.Leased; nil: none): their records stay meanwhile.
	Leased func() map[string]bool
	// Assigned names the member the assignment gives an account shard now
	// (nil: unknown). Records of a shard assigned to this node stay: it is
	// about to claim it (a node back after a failover holds its own shards'
	// history, and the interim owner hands its part over).
	Assigned func(shard int) string
	// Now is the node's clock, which dates the history; time.Now when nil.
	Now func() time.Time
	Log *slog.Logger
}

type batchID struct {
	node  string
	batch uint64
}

// batchState is what a receiver remembers of a batch: when it last came,
// and which of its records are merged (nil: all of them).
type batchState struct {
	at   time.Time
	done []bool
}

// NewHistoryMover returns the mover of cfg.Local's records; Run drives its
// rounds.
func NewHistoryMover(cfg HistoryConfig) *HistoryMover {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	m := &HistoryMover{
		cfg: cfg,
		// Batch ids of a restarted node must not repeat the ones its last
		// run used: the receivers still remember those.
		base:   rand.Uint64() &^ (1<<32 - 1),
		kick:   make(chan struct{}, 1),
		down:   map[string]time.Time{},
		merged: map[batchID]*batchState{}, held: map[string]*heldBatch{}, received: map[int]time.Time{},
	}
	m.call = m.callPeer
	return m
}

// callPeer sends one batch to member to over gRPC.
func (m *HistoryMover) callPeer(ctx context.Context, to string, req *HistoryParcels) (*HistoryReply, error) {
	p, err := m.cfg.Peers.peer(to)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errNotSent, err)
	}
	cctx, cancel := context.WithTimeout(ctx, max(m.cfg.Peers.cfg.Timeout, 2*time.Second))
	defer cancel()
	return p.cli.MergeHistory(cctx, req)
}

// Hand moves the history of an account shard to node to: the shard's next
// owner, before this node releases its claim. A record that cannot be
// delivered stays here, Hand answers the error, and the next round of Run
// comes within historyRetry to move it to whoever owns the shard by then.
// After a failed handoff to a member, Hand skips it for historyDown.
func (m *HistoryMover) Hand(ctx context.Context, shard int, to string) error {
	if to == "" || to == m.cfg.Owners.Self() {
		return nil
	}
	m.moves.Lock()
	defer m.moves.Unlock()
	now := m.cfg.Now()
	m.mu.Lock()
	until, down := m.down[to]
	m.mu.Unlock()
	if down && time.Now().Before(until) {
		m.wake()
		return fmt.Errorf("cluster: device history of %s/%04d stays for now: %s failed a handoff moments ago", cluster.KindAccount, shard, to)
	}
	recs, err := m.cfg.Local.Take(func(c string) bool { return cluster.ShardOf(cluster.KindAccount, c) == shard }, now)
	if len(recs) > 0 {
		if derr := m.deliver(ctx, to, recs, now); derr != nil {
			m.mu.Lock()
			m.down[to] = time.Now().Add(historyDown)
			m.mu.Unlock()
			m.wake()
			err = errors.Join(err, derr)
		}
	}
	if err != nil {
		return fmt.Errorf("cluster: hand device history of %s/%04d to %s: %w", cluster.KindAccount, shard, to, err)
	}
	return nil
}

func (m *HistoryMover) wake() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// Run moves leftovers every `every` (the first round after a fifth of it)
// until ctx ends. After a failed delivery, or a failed handoff, the next
// round comes within historyRetry, then twice that, up to every.
func (m *HistoryMover) Run(ctx context.Context, every time.Duration) {
	next, retry := time.Now().Add(every/5), historyRetry
	t := time.NewTimer(every / 5)
	defer t.Stop()
	defer func() { m.release(m.cfg.Now()) }()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.kick:
			if soon := time.Now().Add(historyRetry); soon.Before(next) {
				next = soon
				t.Reset(historyRetry)
			}
			continue
		case <-t.C:
		}
		n, err := m.MoveLeftovers(ctx)
		switch {
		case err != nil:
			m.cfg.Log.Warn("cluster: device history not moved to its owners (tried again soon)", "err", err, "in", retry)
			next = time.Now().Add(retry)
			retry = min(2*retry, every)
		default:
			if n > 0 {
				m.cfg.Log.Info("cluster: device history moved to its owners", "records", n)
			}
			next, retry = time.Now().Add(every), historyRetry
		}
		t.Reset(time.Until(next))
	}
}

// MoveLeftovers moves every record of a customer whose shard another node
// owns to that owner, in batches, and answers how many were delivered.
// Records stay while the shard has no owner, while they await this node's
// own claim, and while this node leases the account.
func (m *HistoryMover) MoveLeftovers(ctx context.Context) (int, error) {
	m.moves.Lock()
	defer m.moves.Unlock()
	now, wall := m.cfg.Now(), time.Now()
	self := m.cfg.Owners.Self()
	m.mu.Lock()
	for s, t := range m.received {
		if wall.Sub(t) > historyHold {
			delete(m.received, s)
		}
	}
	held := make(map[int]bool, len(m.received))
	for s := range m.received {
		held[s] = true
	}
	m.mu.Unlock()
	var leased map[string]bool
	if m.cfg.Leased != nil {
		leased = m.cfg.Leased()
	}
	// customer → owner to send to. match runs on this goroutine with a
	// store, and on the history's shards without one.
	var ownersMu sync.Mutex
	owners := map[string]string{}
	match := func(c string) bool {
		shard := cluster.ShardOf(cluster.KindAccount, c)
		if held[shard] {
			return false
		}
		if _, err := m.cfg.Owners.Held(shard); err == nil {
			return false
		}
		if m.cfg.Assigned != nil && m.cfg.Assigned(shard) == self {
			return false
		}
		owner, _, ok := m.cfg.Owners.Owner(shard)
		if !ok || owner == "" || owner == self {
			return false
		}
		if leased[c] {
			return false
		}
		ownersMu.Lock()
		owners[c] = owner
		ownersMu.Unlock()
		return true
	}
	recs, err := m.cfg.Local.Take(match, now)
	byOwner := map[string][]storage.HistRecord{}
	for _, r := range recs {
		c := storage.HistCustomerOf(r)
		byOwner[owners[c]] = append(byOwner[owners[c]], r)
	}
	for to := range m.held {
		if _, ok := byOwner[to]; !ok {
			if rerr := m.resend(ctx, to, now); rerr != nil {
				err = errors.Join(err, fmt.Errorf("to %s: %w", to, rerr))
			}
		}
	}
	n := 0
	for to, rs := range byOwner {
		if derr := m.deliver(ctx, to, rs, now); derr != nil {
			err = errors.Join(err, derr)
			continue
		}
		n += len(rs)
	}
	return n, err
}

// deliver sends recs to node to in batches. A batch to (sent before,
// whose delivery this node could not confirm) goes first. A batch the
// receiver refuses, or merges in part, and every one after it, is merged
// back here (its merged part not); a batch whose delivery stays
// unconfirmed (no reply came) is kept to be sent again with the same id.
// It runs under m.moves.
func (m *HistoryMover) deliver(ctx context.Context, to string, recs []storage.HistRecord, now time.Time) error {
	if err := m.resend(ctx, to, now); err != nil {
		m.giveBack(to, recs, now)
		return fmt.Errorf("to %s: %w", to, err)
	}
	for len(recs) > 0 {
		n := min(len(recs), maxHistoryBatch)
		req, err := m.batchOf(recs[:n])
		if err != nil {
			m.giveBack(to, recs, now)
			return fmt.Errorf("to %s: %w", to, err)
		}
		rest, unsure, err := m.send(ctx, to, req)
		switch {
		case unsure:
			m.held[to] = &heldBatch{req: req, recs: recs[:n], since: time.Now()}
			m.giveBack(to, recs[n:], now)
			return fmt.Errorf("to %s: batch %d unconfirmed, kept to send again: %w", to, req.Batch, err)
		case err != nil:
			m.giveBack(to, recs, now)
			return fmt.Errorf("to %s: %w", to, err)
		case len(rest) > 0:
			m.giveBack(to, append(pick(recs[:n], rest), recs[n:]...), now)
			return fmt.Errorf("to %s: %d of the %d records of batch %d not merged", to, len(rest), n, req.Batch)
		}
		recs = recs[n:]
	}
	return nil
}

// heldBatch is a batch whose delivery its sender could not confirm: every
// attempt went unanswered, so the receiver may have merged it. Merged back
// here it would count twice if so; it is sent again instead, with the same
// id, until the receiver answers (within heldFor).
type heldBatch struct {
	req   *HistoryParcels
	recs  []storage.HistRecord
	since time.Time
}

// heldFor is how long a sender keeps sending an unconfirmed batch again
// before it gives the records back to its own history: well within
// batchMemory, so the receiver still remembers the batch if it merged it.
const heldFor = batchMemory / 2

// resend sends the batch held for to again, if any; an error means it is
// still unconfirmed (or was refused: its records are back here then).
// It runs under m.moves.
func (m *HistoryMover) resend(ctx context.Context, to string, now time.Time) error {
	h := m.held[to]
	if h == nil {
		return nil
	}
	if time.Since(h.since) > heldFor {
		delete(m.held, to)
		m.cfg.Log.Warn("cluster: device history batch never confirmed; its records are kept here (counted twice if the member merged them)", "to", to, "batch", h.req.Batch, "records", len(h.recs))
		m.giveBack(to, h.recs, now)
		return nil
	}
	rest, unsure, err := m.send(ctx, to, h.req)
	if unsure || errors.Is(err, errNotSent) {
		// Not sent (the member is not live for now) tells nothing of
		// the first attempts, which may have merged it: still held.
		return fmt.Errorf("batch %d still unconfirmed: %w", h.req.Batch, err)
	}
	delete(m.held, to)
	switch {
	case err != nil:
		m.giveBack(to, h.recs, now)
		return err
	case len(rest) > 0:
		m.giveBack(to, pick(h.recs, rest), now)
	}
	return nil
}

// releaseWait bounds the last resend of the held batches at Run's end.
const releaseWait = 2 * time.Second

// release sends the held batches one last time and gives those still
// unconfirmed back to this node's history (Run's end: the node stops, and
// what is only in memory would be lost).
func (m *HistoryMover) release(now time.Time) {
	m.moves.Lock()
	defer m.moves.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), releaseWait)
	defer cancel()
	for to, h := range m.held {
		if err := m.resend(ctx, to, now); err == nil || m.held[to] == nil {
			continue
		}
		delete(m.held, to)
		m.cfg.Log.Warn("cluster: device history batch unconfirmed at stop; its records are kept here (counted twice if the member merged them)", "to", to, "batch", h.req.Batch, "records", len(h.recs))
		m.giveBack(to, h.recs, now)
	}
}

// giveBack merges undelivered records back into this node's history.
func (m *HistoryMover) giveBack(to string, recs []storage.HistRecord, now time.Time) {
	if len(recs) == 0 {
		return
	}
	if err := m.cfg.Local.Merge(recs, now); err != nil {
		// The records are gone from here and did not arrive: the
		// one way history is lost, on a node whose own store fails.
		m.cfg.Log.Error("cluster: device history neither delivered nor kept", "records", len(recs), "to", to, "err", err)
	}
}

// pick returns the records of recs at the indexes rest names.
func pick(recs []storage.HistRecord, rest []int) []storage.HistRecord {
	out := make([]storage.HistRecord, 0, len(rest))
	for _, i := range rest {
		out = append(out, recs[i])
	}
	return out
}

// batchOf encodes recs as one batch under a new id.
func (m *HistoryMover) batchOf(recs []storage.HistRecord) (*HistoryParcels, error) {
	req := &HistoryParcels{Version: version, Node: m.cfg.Owners.Self(), Batch: m.base | m.batch.Add(1), KeepsRest: true,
		Records: make([][]byte, 0, len(recs))}
	for _, r := range recs {
		b, err := storage.AppendHistParcel(nil, r)
		if err != nil {
			return nil, err // a record this node holds is always valid; never sent half
		}
		req.Records = append(req.Records, b)
	}
	return req, nil
}

// errNotSent: a batch could not go out (no connection to the member).
var errNotSent = errors.New("history batch not sent")

// send delivers one batch, trying a lost reply again with the same batch
// id (the receiver merges it once). It answers the indexes of the records
// the receiver did not merge (it keeps none of them), or an error: unsure
// when an attempt may have reached the receiver and no answer came, so the
// batch may be merged there.
func (m *HistoryMover) send(ctx context.Context, to string, req *HistoryParcels) (rest []int, unsure bool, err error) {
	for attempt := range 3 {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return nil, unsure, errors.Join(err, ctx.Err())
			case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
			}
		}
		var rep *HistoryReply
		rep, err = m.call(ctx, to, req)
		switch {
		case err == nil:
			seen := make([]bool, len(req.Records))
			for _, i := range rep.GetRest() {
				if int(i) < len(seen) && !seen[i] {
					seen[i] = true
					rest = append(rest, int(i))
				}
			}
			return rest, false, nil
		case status.Code(err) == codes.InvalidArgument || status.Code(err) == codes.Unimplemented:
			// Refused whole: nothing of it merged, now or before (the
			// same batch is refused the same way).
			return nil, false, err
		case errors.Is(err, errNotSent):
		default:
			unsure = true
		}
	}
	return nil, unsure, err
}

// receive merges a batch another node sent, each of its records once per
// batch id: a batch merged in part (a read failed on one of the history's
// shards) merges only the rest when it comes again, and one merged whole
// answers false.
func (m *HistoryMover) receive(ctx context.Context, r *HistoryParcels) (merged bool, rest []uint32, err error) {
	recs := make([]storage.HistRecord, len(r.Records))
	for i, b := range r.Records {
		if len(b) > maxHistoryParcel {
			return false, nil, fmt.Errorf("%w: a history record of %d bytes", errBadRequest, len(b))
		}
		rec, err := storage.ParseHistParcel(b)
		if err != nil {
			return false, nil, fmt.Errorf("%w: %w", errBadRequest, err)
		}
		recs[i] = rec
	}
	id := batchID{r.Node, r.Batch}
	// The node's clock dates the history; the wall clock times what this
	// node remembers of batches and shards (a test clock may stand still).
	now, wall := m.cfg.Now(), time.Now()
	m.mu.Lock()
	defer m.mu.Unlock() // merges of batches run one at a time: a retry waits for the first
	if err := ctx.Err(); err != nil {
		// The sender gave up on this attempt while it waited for the lock:
		// it has sent the batch again, or taken back what a later attempt
		// answered as rest, which merging now would count twice.
		return false, nil, fmt.Errorf("history batch %d of %q: the sender gave up on this attempt: %w", r.Batch, r.Node, err)
	}
	for k, b := range m.merged {
		if wall.Sub(b.at) > batchMemory {
			delete(m.merged, k)
		}
	}
	b := m.merged[id]
	if b != nil && b.done == nil {
		b.at = wall
		return false, nil, nil
	}
	if b != nil && len(b.done) != len(recs) {
		// Not the batch merged in part under this id: a sender sends
		// the same records again.
		return false, nil, fmt.Errorf("%w: history batch %d of %q with %d records, merged in part with %d", errBadRequest, r.Batch, r.Node, len(recs), len(b.done))
	}
	// A batch merged in part before merges only its rest now.
	todo, at := recs, []int(nil)
	if b != nil {
		todo = todo[:0:0]
		for i, done := range b.done {
			if !done {
				todo, at = append(todo, recs[i]), append(at, i)
			}
		}
	}
	parts, err := m.cfg.Local.MergeParts(todo, now)
	if parts == nil { // nothing merged now
		for i := range recs {
			if b == nil || !b.done[i] {
				rest = append(rest, uint32(i))
			}
		}
		return false, rest, err
	}
	if b == nil {
		b = &batchState{done: make([]bool, len(recs))}
		m.merged[id] = b
	}
	b.at = wall
	for k, ok := range parts {
		i := k
		if at != nil {
			i = at[k]
		}
		if ok {
			b.done[i] = true
			m.received[cluster.ShardOf(cluster.KindAccount, storage.HistCustomerOf(recs[i]))] = wall
		}
	}
	for i, done := range b.done {
		if !done {
			rest = append(rest, uint32(i))
		}
	}
	if len(rest) > 0 {
		return false, rest, fmt.Errorf("history batch %d of %q merged in part: %w", r.Batch, r.Node, err)
	}
	b.done = nil
	return true, nil, nil
}

// MergeHistory implements NodeServer.
func (s *Server) MergeHistory(ctx context.Context, r *HistoryParcels) (*HistoryReply, error) {
	if s.cfg.History == nil {
		return nil, status.Error(codes.Unavailable, "cluster rpc: this node keeps no device history")
	}
	return s.cfg.History.mergeHistory(ctx, r)
}

// mergeHistory answers MergeHistory.
func (m *HistoryMover) mergeHistory(ctx context.Context, r *HistoryParcels) (*HistoryReply, error) {
	if r.GetVersion() == 0 || r.GetNode() == "" || r.GetBatch() == 0 || len(r.GetRecords()) == 0 || len(r.Records) > maxHistoryBatch {
		return nil, status.Error(codes.InvalidArgument, fmt.Sprintf("%v: history batch %d of %q with %d records", errBadRequest, r.GetBatch(), r.GetNode(), len(r.GetRecords())))
	}
	merged, rest, err := m.receive(ctx, r)
	switch {
	case errors.Is(err, errBadRequest):
		return nil, status.Error(codes.InvalidArgument, err.Error())
	case err != nil && r.KeepsRest && len(rest) > 0:
		// The sender keeps what did not merge: a definite answer, where
		// an error would leave it unsure whether anything merged.
		return &HistoryReply{Version: version, Rest: rest}, nil
	case err != nil:
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return &HistoryReply{Version: version, Merged: merged}, nil
}
