package events

import (
	"strings"
	"sync"
	"time"
)

// The events this node stored last, by account, for a cluster owner: a
// lease holder that begins to mirror an account's history is sent the
// account's recent events with it, so that its evaluations of events
// collected before it watched need not ask the owner either
// (docs/cluster.md, "Device history with a lease"). A fixed ring, written
// by Store: the newest KeepRecent events of all accounts, whatever their
// shard.

// recentEvent is one stored event in the ring.
type recentEvent struct {
	account string
	id      EventID
	at      int64 // Created, Unix nanoseconds
}

type recentRing struct {
	mu   sync.Mutex
	ents []recentEvent
	next int
	n    int
	// last is the account of the latest entry, shared by the entries of a
	// run of one account's events: an account's events mostly come in
	// runs, and a clone per event would be an allocation per collect.
	last string
}

func newRecentRing(size int) *recentRing {
	return &recentRing{ents: make([]recentEvent, size)}
}

func (r *recentRing) add(account string, id EventID, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if account != r.last {
		r.last = strings.Clone(account) // the caller's may view a request's buffer
	}
	r.ents[r.next] = recentEvent{account: r.last, id: id, at: at.UnixNano()}
	r.next = (r.next + 1) % len(r.ents)
	r.n = min(r.n+1, len(r.ents))
}

// Recent is the ids of the account's events stored here since since, newest
// first, at most max of them; none when Config.KeepRecent is zero. The ring
// holds the newest KeepRecent events of all accounts, so a busy account's
// older events may have left it.
func (c *Client) Recent(account string, since time.Time, max int) []EventID {
	r := c.recent
	if r == nil || max <= 0 {
		return nil
	}
	from := since.UnixNano()
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []EventID
	for i := 1; i <= r.n && len(ids) < max; i++ {
		e := &r.ents[(r.next-i+len(r.ents))%len(r.ents)]
		if e.account == account && e.at >= from {
			ids = append(ids, e.id)
		}
	}
	return ids
}
