package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

var (
	// ErrOwned is a claim refused because another member owns the shard.
	ErrOwned = errors.New("cluster: shard is owned by another member")
	// ErrFenced is an owner-only action refused: the member's lease may be
	// gone, or the shard was claimed again since the token was issued.
	ErrFenced = errors.New("cluster: fenced: not the shard's current owner")
)

// Claim is a member's ownership of one shard.
type Claim struct {
	Kind  Kind
	Shard int
	// Token is the owner key's mod revision when it was claimed: the fencing
	// token. A later claim of the shard always has a larger one.
	Token int64
	Lease clientv3.LeaseID
}

// Claim takes a shard that nobody owns, binding the owner key to the
// member's lease. Claiming a shard the member already owns under its current
// lease returns that claim.
func (m *Member) Claim(ctx context.Context, k Kind, shard int) (Claim, error) {
	if shard < 0 || shard >= Shards(k) {
		return Claim{}, fmt.Errorf("cluster claim: shard %d of %q out of range", shard, k)
	}
	lease := m.Lease()
	if !m.Held(m.cfg.Now()) {
		return Claim{}, fmt.Errorf("cluster claim %s/%04d: membership lease not held: %w", k, shard, ErrFenced)
	}
	key := ownerKey(m.cfg.Root, k, shard)
	resp, err := m.cfg.Client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, m.cfg.ID, clientv3.WithLease(lease))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return Claim{}, fmt.Errorf("cluster claim %s/%04d: %w", k, shard, err)
	}
	if resp.Succeeded {
		return Claim{Kind: k, Shard: shard, Token: resp.Header.Revision, Lease: lease}, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 1 && string(kvs[0].Value) == m.cfg.ID && clientv3.LeaseID(kvs[0].Lease) == lease {
		return Claim{Kind: k, Shard: shard, Token: kvs[0].ModRevision, Lease: lease}, nil
	}
	owner := ""
	if len(kvs) == 1 {
		owner = string(kvs[0].Value)
	}
	return Claim{}, fmt.Errorf("cluster claim %s/%04d: owner %q: %w", k, shard, owner, ErrOwned)
}

// Valid is the local half of the fence: the member still holds the lease the
// claim was made under, with its validity deadline ahead. A node resumed
// after a pause longer than its TTL fails it before acting.
func (m *Member) Valid(c Claim) error {
	m.mu.Lock()
	lease, until := m.lease, m.validUntil
	m.mu.Unlock()
	if lease != c.Lease || !m.cfg.Now().Before(until) {
		return fmt.Errorf("cluster %s/%04d: membership lease not held: %w", c.Kind, c.Shard, ErrFenced)
	}
	return nil
}

// Fence runs ops in etcd only while c is the shard's current claim: a
// transaction comparing the owner key's mod revision with the token, after
// the local check. A stale owner's write is refused with ErrFenced and
// changes nothing.
func (m *Member) Fence(ctx context.Context, c Claim, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	if err := m.Valid(c); err != nil {
		return nil, err
	}
	key := ownerKey(m.cfg.Root, c.Kind, c.Shard)
	resp, err := m.cfg.Client.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", c.Token)).
		Then(ops...).
		Commit()
	if err != nil {
		return nil, fmt.Errorf("cluster fenced write %s/%04d: %w", c.Kind, c.Shard, err)
	}
	if !resp.Succeeded {
		return nil, fmt.Errorf("cluster fenced write %s/%04d (token %d): %w", c.Kind, c.Shard, c.Token, ErrFenced)
	}
	return resp, nil
}

// Release hands a shard back: a fenced delete of its owner key. Flush the
// shard's state before calling it; the next owner claims when it sees the
// delete.
func (m *Member) Release(ctx context.Context, c Claim) error {
	_, err := m.Fence(ctx, c, clientv3.OpDelete(ownerKey(m.cfg.Root, c.Kind, c.Shard)))
	return err
}

// OwnerView is a node's local copy of who owns which shard, with the tokens.
type OwnerView struct{ s *Store[string] }

// NewOwnerView watches every owner key of the cluster under root. Start it
// with Start.
func NewOwnerView(cli *clientv3.Client, root string) (*OwnerView, error) {
	s, err := NewStore(StoreConfig[string]{
		Client: cli, Prefix: root + "owners/",
		Codec: Codec[string]{
			Marshal: func(s string) ([]byte, error) { return []byte(s), nil },
			Unmarshal: func(b []byte) (string, error) {
				if len(b) == 0 {
					return "", errors.New("owner record: empty node id")
				}
				return string(b), nil
			},
		},
	})
	if err != nil {
		return nil, err
	}
	return &OwnerView{s: s}, nil
}

// Start loads the view and keeps it current until ctx ends.
func (v *OwnerView) Start(ctx context.Context) error { return v.s.Start(ctx) }

// Store is the underlying store (revision, Wait).
func (v *OwnerView) Store() *Store[string] { return v.s }

// Owner is the shard's current owner and token; ok false when unowned.
func (v *OwnerView) Owner(k Kind, shard int) (node string, token int64, ok bool) {
	e, ok := v.s.Get(viewKey(k, shard))
	return e.Value, e.Rev, ok
}

// Current is the receiver's half of the fence: a message from the owner of
// a shard carries its token, and the receiver accepts it only if the token is
// the shard's current claim. A token newer than the view waits (within ctx)
// for the view to catch up; a stale owner's older token is refused with
// ErrFenced.
func (v *OwnerView) Current(ctx context.Context, k Kind, shard int, token int64) error {
	if token > v.s.Revision() {
		if err := v.s.Wait(ctx, token); err != nil {
			return fmt.Errorf("cluster %s/%04d token %d: %w", k, shard, token, err)
		}
	}
	if _, cur, ok := v.Owner(k, shard); !ok || cur != token {
		return fmt.Errorf("cluster %s/%04d token %d (current %d): %w", k, shard, token, cur, ErrFenced)
	}
	return nil
}

// Owners maps every owned shard of kind k to its owner.
func (v *OwnerView) Owners(k Kind) map[int]string {
	out := map[int]string{}
	pre := string(k) + "/"
	for _, key := range v.s.Keys() {
		rest, found := strings.CutPrefix(key, pre)
		if !found {
			continue
		}
		shard, err := parseShard(rest, k)
		if err != nil {
			continue
		}
		if e, ok := v.s.Get(key); ok {
			out[shard] = e.Value
		}
	}
	return out
}
