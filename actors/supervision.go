package actors

import (
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/extensions"
)

// Supervision is one actor system's register of its shard sets: which have a
// shard down (for /api/status) and how soon a stopped shard is spawned again.
// It rides on the actor system as a protoactor extension, so every package
// that spawns shards reports into it without being handed one.
type Supervision struct {
	mu       sync.Mutex
	sets     []*Shards
	minDelay time.Duration
	maxDelay time.Duration
}

var (
	supervisionID = extensions.NextExtensionID()
	supervisionMu sync.Mutex
)

// ExtensionID implements extensions.Extension.
func (*Supervision) ExtensionID() extensions.ExtensionID { return supervisionID }

// Default delays before a shard its supervisor stopped is spawned again: the
// first after MinRestartDelay, doubling while it keeps failing, at most
// MaxRestartDelay.
const (
	MinRestartDelay = time.Second
	MaxRestartDelay = 30 * time.Second
)

// SupervisionOf returns sys's register, creating it on first use.
func SupervisionOf(sys *actor.ActorSystem) *Supervision {
	supervisionMu.Lock()
	defer supervisionMu.Unlock()
	if s, ok := sys.Extensions.Get(supervisionID).(*Supervision); ok {
		return s
	}
	s := &Supervision{minDelay: MinRestartDelay, maxDelay: MaxRestartDelay}
	sys.Extensions.Register(s)
	return s
}

// SetRestartDelays changes the delays before stopped shards are spawned
// again (tests shorten them). Values ≤ 0 keep the current ones.
func (s *Supervision) SetRestartDelays(lo, hi time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if lo > 0 {
		s.minDelay = lo
	}
	if hi > 0 {
		s.maxDelay = hi
	}
	s.maxDelay = max(s.maxDelay, s.minDelay)
}

func (s *Supervision) delays() (time.Duration, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.minDelay, s.maxDelay
}

func (s *Supervision) add(sh *Shards) {
	s.mu.Lock()
	s.sets = append(s.sets, sh)
	s.mu.Unlock()
}

func (s *Supervision) remove(sh *Shards) {
	s.mu.Lock()
	s.sets = slices.DeleteFunc(s.sets, func(x *Shards) bool { return x == sh })
	s.mu.Unlock()
}

// Down names the shard sets that have a shard down right now, sorted; empty
// when every shard runs.
func (s *Supervision) Down() []string {
	s.mu.Lock()
	sets := slices.Clone(s.sets)
	s.mu.Unlock()
	var out []string
	for _, sh := range sets {
		if sh.Down() > 0 {
			out = append(out, sh.Name())
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
