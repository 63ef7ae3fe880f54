package quota

import (
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fraudd/fraudd/actors"
	"github.com/fraudd/fraudd/storage"
)

// newCommitter returns the group committer shared by all quota shards: it
// writes every delta queued since its last commit as one batch (synced or
// not, as the store's Durability says), then answers the charges that
// waited for them. On failure each waiting charge
// gets ErrUnavailable and its shard is told to undo the increment, so the
// shard's memory stays "stored + in flight". A charge answered ahead of its
// commit (AheadStore) was served: it stays counted in memory, so the limits
// stay exact while the process runs, and its increment is lost to the
// store as a crash would lose it. failed stays set from a failed group to
// the next that succeeds, and the charges made meanwhile wait for their
// commit: a failing store loses the charges answered ahead until its
// first failure is known (that group's, and those queued while it ran; a
// lingering group is applied at the latest at the next group sync).
func newCommitter(root *actor.RootContext, store Store, cfg actors.GroupConfig, log *slog.Logger, failed *atomic.Bool) *actors.GroupCommitter[pending] {
	var deltas []storage.UsageDelta
	apply := func(ps []pending) error {
		deltas = deltas[:0]
		for i := range ps {
			deltas = append(deltas, ps[i].delta)
		}
		err := store.ApplyUsage(deltas)
		clear(deltas) // drop account strings for the GC
		return err
	}
	done := func(ps []pending, err error) {
		if err == nil {
			if failed.Load() {
				failed.Store(false)
			}
			for i := range ps {
				p := &ps[i]
				p.ent.inflight.Add(-1)
				if p.call != nil {
					p.call.Charged(p.res, nil)
				}
			}
			return
		}
		failed.Store(true)
		ahead := 0
		for i := range ps {
			if ps[i].ahead {
				ahead++
			}
		}
		log.Error("quota: usage not stored; charges refused with 503 until the store takes writes again", "deltas", len(ps),
			"answered_ahead", ahead, "err", err)
		err = fmt.Errorf("%w: %w", ErrUnavailable, err)
		for i := range ps {
			p := ps[i]
			if p.ahead {
				p.ent.inflight.Add(-1)
				continue
			}
			call := p.call
			p.call = nil
			// Undo first: the rollback is in the shard's mailbox before the
			// caller can send its next message there.
			root.Send(p.shard, &rollback{p: p})
			if call != nil {
				call.Charged(ChargeResult{}, err)
			}
		}
	}
	return actors.NewGroupCommitter(cfg, apply, done)
}
