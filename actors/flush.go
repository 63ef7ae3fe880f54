package actors

import "time"

// FlushReq asks a shard to hand what changed since its last flush to its
// group committer; the channel gets one value once that is stored.
type FlushReq chan struct{}

// FlushPending sends a FlushReq to every shard i for which pending(i) holds
// and waits until each has answered or timeout has passed; it reports
// whether all answered. Stores run it before each group sync, so that what
// the shards gathered in memory is in the synced batch.
//
// A shard that is down is skipped: it holds its changes until it restarts
// (its restart stores them), and waiting for it would stall every sync. Each
// call has its own channel, so an answer that comes after the wait gave up
// cannot be taken for the next call's.
func (s *Shards) FlushPending(pending func(i int) bool, timeout time.Duration) bool {
	var todo []int
	for i := range s.slots {
		if pending(i) && !s.IsDown(i) {
			todo = append(todo, i)
		}
	}
	if len(todo) == 0 {
		return true
	}
	acks := make(FlushReq, len(todo))
	for _, i := range todo {
		s.Send(uint64(i), acks)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	for range todo {
		select {
		case <-acks:
		case <-t.C:
			return false
		}
	}
	return true
}
