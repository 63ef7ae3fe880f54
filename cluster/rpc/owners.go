package rpc

import (
	"context"
	"fmt"

	"github.com/fraudd/fraudd/cluster"
)

// Ownership is what the server and the client know of account-shard
// ownership: the node's own valid claims and its view of everyone's. Cluster
// is the real one; tests fake it to play a stale owner or a lagging view.
type Ownership interface {
	// Self is this node's id.
	Self() string
	// Held is this node's claim on the account shard, valid now: its
	// fencing token, or an error wrapping cluster.ErrFenced when the node
	// holds no claim or the lease it was made under may be gone.
	Held(shard int) (token int64, err error)
	// Admit is Held for a charge this node makes as the owner: done must
	// be called once the charge reached the local quota actors (queued,
	// or answered), and a release of the shard waits for it before it
	// flushes them (cluster.Balancer.Admit). done is nil with an error.
	Admit(shard int) (token int64, done func(), err error)
	// Owner is the shard's owner and token in this node's view.
	Owner(shard int) (node string, token int64, ok bool)
	// Members lists the live members' ids.
	Members() []string
	// Known lists the nodes that may hold a share of the counts, live or
	// not (cluster.Member.KnownIDs): a load notes those that are not live
	// members as missing.
	Known() []string
	// Addr is a live member's advertised gRPC address.
	Addr(node string) (string, bool)
	// Revision is the etcd revision the view reflects.
	Revision() int64
	// Wait returns once the view reflects etcd revision rev, or ctx ends.
	Wait(ctx context.Context, rev int64) error
}

// ErrNoClaim is Held's answer when this node records no claim of the shard
// (as opposed to a claim whose lease may be gone): if the view names this
// node anyway, the claim is being recorded (the Balancer's Acquired hook
// runs in between) and is worth a short wait.
var ErrNoClaim = fmt.Errorf("no claim recorded: %w", cluster.ErrFenced)

// Cluster is the Ownership of a running node: the member's lease, its
// Balancer's claims and its started owner view.
type Cluster struct {
	Member   *cluster.Member
	Balancer *cluster.Balancer
	View     *cluster.OwnerView
}

// Self implements Ownership.
func (c Cluster) Self() string { return c.Member.ID() }

// Held implements Ownership: the Balancer's claim, checked by Member.Valid
// (the local half of the fence).
func (c Cluster) Held(shard int) (int64, error) { return c.held(cluster.KindAccount, shard) }

// Admit implements Ownership.
func (c Cluster) Admit(shard int) (int64, func(), error) {
	cl, done, ok := c.Balancer.Admit(cluster.KindAccount, shard)
	if !ok {
		return 0, nil, fmt.Errorf("cluster %s/%04d: %w", cluster.KindAccount, shard, ErrNoClaim)
	}
	if err := c.Member.Valid(cl); err != nil {
		done()
		return 0, nil, err
	}
	return cl.Token, done, nil
}

// held is this node's valid claim of the shard of kind k: its token.
func (c Cluster) held(k cluster.Kind, shard int) (int64, error) {
	cl, ok := c.Balancer.Claim(k, shard)
	if !ok {
		return 0, fmt.Errorf("cluster %s/%04d: %w", k, shard, ErrNoClaim)
	}
	if err := c.Member.Valid(cl); err != nil {
		return 0, err
	}
	return cl.Token, nil
}

// Owner implements Ownership.
func (c Cluster) Owner(shard int) (string, int64, bool) {
	return c.View.Owner(cluster.KindAccount, shard)
}

// Addr implements Ownership.
func (c Cluster) Addr(node string) (string, bool) {
	mi, ok := c.Member.Info(node)
	return mi.Addr, ok && mi.Addr != ""
}

// Wait implements Ownership.
func (c Cluster) Wait(ctx context.Context, rev int64) error { return c.View.Store().Wait(ctx, rev) }

// Revision implements Ownership.
func (c Cluster) Revision() int64 { return c.View.Store().Revision() }

// Members implements Ownership.
func (c Cluster) Members() []string { return c.Member.MemberIDs() }

// Known implements Ownership.
func (c Cluster) Known() []string { return c.Member.KnownIDs() }
