package actors

import (
	"fmt"
	"path"
	"reflect"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/extensions"
)

// StuckAfter is how long one message may take before its shard counts as
// down: far beyond a Call's 5 s timeout, so every caller has already given up.
var StuckAfter = 10 * time.Second

// Kinds is the set of shard sets spawned on one actor system, each named by
// its kind (the package of its actor type: quota, device, …). Readiness asks
// it whether any shard is down; metrics read mailbox depths from it.
type Kinds struct {
	mu   sync.Mutex
	sets []*Shards
	// watch holds the busy run each dispatcher was last seen in (Down).
	watchMu sync.Mutex
	watch   map[*workerDispatcher]stuckWatch
}

var (
	kindsID = extensions.NextExtensionID()
	kindsMu sync.Mutex
)

// ExtensionID implements extensions.Extension: the registry lives on the
// actor system, so two systems in one process (tests) never mix.
func (k *Kinds) ExtensionID() extensions.ExtensionID { return kindsID }

// KindsOf returns system's registry, creating it on first use.
func KindsOf(system *actor.ActorSystem) *Kinds {
	kindsMu.Lock()
	defer kindsMu.Unlock()
	if k, ok := system.Extensions.Get(kindsID).(*Kinds); ok && k != nil {
		return k
	}
	k := &Kinds{}
	system.Extensions.Register(k)
	return k
}

func (k *Kinds) add(s *Shards) {
	k.mu.Lock()
	k.sets = append(k.sets, s)
	k.mu.Unlock()
}

func (k *Kinds) each(fn func(*Shards)) {
	k.mu.Lock()
	sets := append([]*Shards(nil), k.sets...)
	k.mu.Unlock()
	for _, s := range sets {
		fn(s)
	}
}

// Down lists the shards that cannot serve: stopped by their supervisor (a
// shard that panics ten times in ten seconds is stopped for good) or stuck on
// one message for longer than StuckAfter (a mailbox run that keeps handling
// messages is busy, not stuck). Shard sets stopped on purpose
// (shutdown) are skipped. It sends no message, so it is cheap enough for
// every readiness probe.
func (k *Kinds) Down() []string {
	var out []string
	now := time.Now()
	k.each(func(s *Shards) {
		if s.stopping.Load() {
			return
		}
		for i := range s.slots {
			if s.slots[i].down.Load() {
				out = append(out, fmt.Sprintf("%s shard %d stopped", s.kind, i))
				continue
			}
			if d, stuck := k.stuck(s.dispatchers[i], now); stuck {
				out = append(out, fmt.Sprintf("%s shard %d stuck for %s", s.kind, i, d.Round(time.Second)))
			}
		}
	})
	return out
}

// stuck reports whether d has been on one message of a mailbox run for
// longer than StuckAfter, timing it from the first Down call that saw it: probes
// call Down every few seconds, so a stuck shard is reported at most one
// probe interval late, and the worker itself reads no clock.
func (k *Kinds) stuck(d *workerDispatcher, now time.Time) (time.Duration, bool) {
	seq, busy := d.running()
	k.watchMu.Lock()
	defer k.watchMu.Unlock()
	if !busy {
		delete(k.watch, d)
		return 0, false
	}
	w, ok := k.watch[d]
	if !ok || w.seq != seq {
		if k.watch == nil {
			k.watch = map[*workerDispatcher]stuckWatch{}
		}
		k.watch[d] = stuckWatch{seq: seq, seen: now}
		return 0, false
	}
	since := now.Sub(w.seen)
	return since, since > StuckAfter
}

// Depths calls fn with each kind's total mailbox depth (messages waiting),
// kinds in spawn order; a kind spawned twice is reported twice.
func (k *Kinds) Depths(fn func(kind string, depth int)) {
	k.each(func(s *Shards) {
		if s.stopping.Load() {
			return
		}
		n := 0
		for i := range s.mailboxes {
			if m := s.mailboxes[i].Load(); m != nil {
				n += (*m).UserMessageCount()
			}
		}
		fn(s.kind, n)
	})
}

// protoactorPkg is the package of protoactor's own actor types.
var protoactorPkg = reflect.TypeOf(actor.ReceiveFunc(nil)).PkgPath()

// kindOf names a shard set by the package of its actor type. A function
// actor (actor.ReceiveFunc, the mailer's) is of protoactor's package, which
// says nothing to an operator ("actor" in the metrics and /readyz): its
// set's name (Named) is its kind then.
func kindOf(a actor.Actor, name string) string {
	t := reflect.TypeOf(a)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && t.PkgPath() == protoactorPkg && name != "" {
		return name
	}
	if t == nil || t.PkgPath() == "" {
		return "unknown"
	}
	return path.Base(t.PkgPath())
}
