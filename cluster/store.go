package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// ErrConflict is a write refused by its revision check: the record changed
// (or appeared, or went) since the revision the writer read.
var ErrConflict = errors.New("cluster: the record changed since it was read")

// Codec turns a record into the bytes etcd keeps and back. Unmarshal gets
// bytes from etcd, which is outside input: it must reject what it cannot
// vouch for with an error, never panic.
type Codec[T any] struct {
	Marshal   func(T) ([]byte, error)
	Unmarshal func([]byte) (T, error)
}

// Entry is one record of the local copy.
type Entry[T any] struct {
	Value T
	// Rev is the key's mod revision: what a revision-checked write compares,
	// and for an owner key the fencing token.
	Rev   int64
	Lease clientv3.LeaseID
}

// StoreConfig configures a Store.
type StoreConfig[T any] struct {
	Client *clientv3.Client
	// Prefix is the etcd prefix the store covers; its keys are named
	// relative to it.
	Prefix string
	Codec  Codec[T]
	// OnChange is called from the store's goroutine after the local copy
	// changed: the keys a watch response changed, or full after a re-read of
	// the whole prefix. It must not block.
	OnChange func(full bool, keys []string)
	Logger   *slog.Logger
}

// Store keeps a local copy of every record under a prefix current through a
// watch, and writes records with revision checks. After any watch error
// (compaction, cancel, lost leader) it re-reads the whole prefix and replaces
// its copy: it never resumes a watch blind.
type Store[T any] struct {
	cfg StoreConfig[T]
	log *slog.Logger

	mu      sync.RWMutex
	m       map[string]Entry[T]
	bad     map[string]error
	rev     int64
	revSeen chan struct{} // closed and replaced whenever rev moves

	rereads atomic.Int64
	done    chan struct{}

	// beforeWatch, when set (tests), runs before each watch is opened.
	beforeWatch func(from int64)
}

// NewStore checks cfg; Start loads and watches.
func NewStore[T any](cfg StoreConfig[T]) (*Store[T], error) {
	if cfg.Client == nil || cfg.Prefix == "" || cfg.Codec.Marshal == nil || cfg.Codec.Unmarshal == nil {
		return nil, errors.New("cluster store: client, prefix and codec are required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Store[T]{cfg: cfg, log: log.With("prefix", cfg.Prefix), m: map[string]Entry[T]{}, revSeen: make(chan struct{}), done: make(chan struct{})}, nil
}

// Start reads the whole prefix (its error is returned: a node that cannot
// read its configuration does not start), then keeps the copy current until
// ctx ends.
func (s *Store[T]) Start(ctx context.Context) error {
	if err := s.reread(ctx); err != nil {
		close(s.done)
		return err
	}
	go s.run(ctx)
	return nil
}

// Done is closed when the store's goroutine has ended.
func (s *Store[T]) Done() <-chan struct{} { return s.done }

func (s *Store[T]) run(ctx context.Context) {
	defer close(s.done)
	backoff := 50 * time.Millisecond
	for {
		err := s.watch(ctx)
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("cluster watch ended; re-reading the prefix", "err", err)
		for {
			if err := s.reread(ctx); err == nil {
				backoff = 50 * time.Millisecond
				break
			} else if ctx.Err() != nil {
				return
			} else {
				s.log.Warn("cluster re-read failed", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
		}
	}
}

func (s *Store[T]) reread(ctx context.Context) error {
	resp, err := s.cfg.Client.Get(ctx, s.cfg.Prefix, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("read %s: %w", s.cfg.Prefix, err)
	}
	m := make(map[string]Entry[T], len(resp.Kvs))
	bad := map[string]error{}
	for _, kv := range resp.Kvs {
		k := strings.TrimPrefix(string(kv.Key), s.cfg.Prefix)
		v, err := s.cfg.Codec.Unmarshal(kv.Value)
		if err != nil {
			bad[k] = err
			s.log.Error("cluster record cannot be decoded; it is left out", "key", k, "err", err)
			continue
		}
		m[k] = Entry[T]{Value: v, Rev: kv.ModRevision, Lease: clientv3.LeaseID(kv.Lease)}
	}
	s.mu.Lock()
	s.m, s.bad = m, bad
	s.setRevLocked(resp.Header.Revision)
	s.mu.Unlock()
	s.rereads.Add(1)
	if s.cfg.OnChange != nil {
		s.cfg.OnChange(true, nil)
	}
	return nil
}

// setRevLocked moves the applied revision forward and wakes Wait.
func (s *Store[T]) setRevLocked(rev int64) {
	if rev <= s.rev {
		return
	}
	s.rev = rev
	close(s.revSeen)
	s.revSeen = make(chan struct{})
}

func (s *Store[T]) watch(ctx context.Context) error {
	s.mu.RLock()
	from := s.rev + 1
	s.mu.RUnlock()
	if s.beforeWatch != nil {
		s.beforeWatch(from)
	}
	// WithRequireLeader: a member cut off from its cluster's leader ends the
	// watch with an error instead of going quiet.
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range s.cfg.Client.Watch(wctx, s.cfg.Prefix, clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithProgressNotify()) {
		if err := resp.Err(); err != nil {
			return err
		}
		keys := make([]string, 0, len(resp.Events))
		// A response with events vouches only for them: a watch catching
		// up gets its events in batches of at most 1,000 revisions, each
		// stamped with etcd's current revision. Only a response without
		// events (a progress notification, sent once the watch is caught
		// up) vouches for its header revision.
		rev := resp.Header.Revision
		if n := len(resp.Events); n > 0 {
			rev = resp.Events[n-1].Kv.ModRevision
		}
		s.mu.Lock()
		for _, ev := range resp.Events {
			k := strings.TrimPrefix(string(ev.Kv.Key), s.cfg.Prefix)
			keys = append(keys, k)
			delete(s.bad, k)
			if ev.Type == clientv3.EventTypeDelete {
				delete(s.m, k)
				continue
			}
			v, err := s.cfg.Codec.Unmarshal(ev.Kv.Value)
			if err != nil {
				delete(s.m, k)
				s.bad[k] = err
				s.log.Error("cluster record cannot be decoded; it is left out", "key", k, "err", err)
				continue
			}
			s.m[k] = Entry[T]{Value: v, Rev: ev.Kv.ModRevision, Lease: clientv3.LeaseID(ev.Kv.Lease)}
		}
		s.setRevLocked(rev)
		s.mu.Unlock()
		if len(keys) > 0 && s.cfg.OnChange != nil {
			s.cfg.OnChange(false, keys)
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.New("watch channel closed")
}

// Get returns the local copy of key.
func (s *Store[T]) Get(key string) (Entry[T], bool) {
	s.mu.RLock()
	e, ok := s.m[key]
	s.mu.RUnlock()
	return e, ok
}

// Keys lists the keys of the local copy, sorted.
func (s *Store[T]) Keys() []string {
	s.mu.RLock()
	out := make([]string, 0, len(s.m))
	for k := range s.m {
		out = append(out, k)
	}
	s.mu.RUnlock()
	sort.Strings(out)
	return out
}

// Undecodable lists the keys whose records were left out, sorted.
func (s *Store[T]) Undecodable() []string {
	s.mu.RLock()
	out := make([]string, 0, len(s.bad))
	for k := range s.bad {
		out = append(out, k)
	}
	s.mu.RUnlock()
	sort.Strings(out)
	return out
}

// Revision is the etcd revision the local copy reflects.
func (s *Store[T]) Revision() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.rev
}

// Rereads counts full reads of the prefix, the first included.
func (s *Store[T]) Rereads() int64 { return s.rereads.Load() }

// Wait returns once the local copy reflects revision rev: an admin write
// waits on it to read its own write on this node.
func (s *Store[T]) Wait(ctx context.Context, rev int64) error {
	for {
		s.mu.RLock()
		cur, ch := s.rev, s.revSeen
		s.mu.RUnlock()
		if cur >= rev {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("wait for revision %d (at %d): %w", rev, cur, ctx.Err())
		}
	}
}

// Create writes key only if it does not exist, and returns its revision.
func (s *Store[T]) Create(ctx context.Context, key string, v T) (int64, error) {
	return s.put(ctx, key, v, clientv3.Compare(clientv3.CreateRevision(s.cfg.Prefix+key), "=", 0))
}

// Update writes key only if its mod revision is still rev.
func (s *Store[T]) Update(ctx context.Context, key string, v T, rev int64) (int64, error) {
	return s.put(ctx, key, v, clientv3.Compare(clientv3.ModRevision(s.cfg.Prefix+key), "=", rev))
}

func (s *Store[T]) put(ctx context.Context, key string, v T, cmp clientv3.Cmp) (int64, error) {
	b, err := s.cfg.Codec.Marshal(v)
	if err != nil {
		return 0, fmt.Errorf("encode %s: %w", key, err)
	}
	resp, err := s.cfg.Client.Txn(ctx).If(cmp).Then(clientv3.OpPut(s.cfg.Prefix+key, string(b))).Commit()
	if err != nil {
		return 0, fmt.Errorf("write %s: %w", key, err)
	}
	if !resp.Succeeded {
		return 0, fmt.Errorf("write %s: %w", key, ErrConflict)
	}
	return resp.Header.Revision, nil
}

// Delete removes key only if its mod revision is still rev.
func (s *Store[T]) Delete(ctx context.Context, key string, rev int64) (int64, error) {
	resp, err := s.cfg.Client.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(s.cfg.Prefix+key), "=", rev)).
		Then(clientv3.OpDelete(s.cfg.Prefix + key)).Commit()
	if err != nil {
		return 0, fmt.Errorf("delete %s: %w", key, err)
	}
	if !resp.Succeeded {
		return 0, fmt.Errorf("delete %s: %w", key, ErrConflict)
	}
	return resp.Header.Revision, nil
}

// Tx is a read-modify-write over several records of one store.
type Tx[T any] struct {
	s   *Store[T]
	stm concurrency.STM
}

// Get reads key inside the transaction.
func (t *Tx[T]) Get(key string) (T, bool, error) {
	var zero T
	raw := t.stm.Get(t.s.cfg.Prefix + key)
	if raw == "" {
		return zero, false, nil
	}
	v, err := t.s.cfg.Codec.Unmarshal([]byte(raw))
	if err != nil {
		return zero, false, fmt.Errorf("decode %s: %w", key, err)
	}
	return v, true, nil
}

// Put writes key when the transaction commits.
func (t *Tx[T]) Put(key string, v T) error {
	b, err := t.s.cfg.Codec.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", key, err)
	}
	t.stm.Put(t.s.cfg.Prefix+key, string(b))
	return nil
}

// Delete removes key when the transaction commits.
func (t *Tx[T]) Delete(key string) { t.stm.Del(t.s.cfg.Prefix + key) }

// Modify runs fn as a serializable transaction (concurrency.NewSTM): every
// key fn read is checked at commit, and fn runs again on a conflict. fn may
// run several times and must only act through tx. It returns the commit's
// revision.
func (s *Store[T]) Modify(ctx context.Context, fn func(tx *Tx[T]) error) (int64, error) {
	resp, err := concurrency.NewSTM(s.cfg.Client, func(stm concurrency.STM) error {
		return fn(&Tx[T]{s: s, stm: stm})
	}, concurrency.WithAbortContext(ctx))
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

// revChanged is closed when the applied revision next moves.
func (s *Store[T]) revChanged() <-chan struct{} {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.revSeen
}
