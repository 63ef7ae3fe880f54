package rpc

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// maxDown bounds a Health answer's list: a peer's answer is shown in this
// node's status, so a malformed one must not flood it.
const maxDown = 32

// Health implements NodeServer: this node's own down list.
func (s *Server) Health(_ context.Context, r *HealthRequest) (*HealthReply, error) {
	if r.GetVersion() == 0 {
		return nil, status.Error(codes.InvalidArgument, fmt.Sprintf("%v: health without a version", errBadRequest))
	}
	var down []string
	if s.cfg.Down != nil {
		down = s.cfg.Down()
	}
	return &HealthReply{Version: version, Node: s.cfg.Owners.Self(), Down: down}, nil
}

// MemberHealth keeps what the other members cannot vouch for, asked every
// interval (Run): a cluster node's /api/status reports the cluster, so a
// member that is degraded, or does not answer, degrades every node's
// status. The health monitor reads Down on its own tick, which must not
// wait for the network: it reads the last round's answers.
type MemberHealth struct {
	Peers *Quota
	// Shares (nil: none) reloads the accounts loaded without the share
	// of a member that answers the round (SharedStore.Returned).
	Shares *SharedStore

	mu   sync.Mutex
	down []string
}

// Down lists, sorted, "cluster member <id>: <what>" for each member that
// reported something down or did not answer in the last round.
func (h *MemberHealth) Down() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.down...)
}

// Run asks every interval until ctx ends.
func (h *MemberHealth) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		h.Round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Round asks every other live member once, in parallel, within the
// client's Timeout, and keeps the answers.
func (h *MemberHealth) Round(parent context.Context) {
	q := h.Peers
	ctx, cancel := context.WithTimeout(parent, q.cfg.Timeout)
	defer cancel()
	var down, answered []string
	eachOther(q, func(id string) ([]string, error) { return q.health(ctx, id) },
		func(id string, got []string, err error) {
			if err != nil {
				down = append(down, fmt.Sprintf("cluster member %s: not answering", id))
				return
			}
			answered = append(answered, id)
			for _, d := range got {
				down = append(down, fmt.Sprintf("cluster member %s: %s", id, d))
			}
		})
	if parent.Err() != nil {
		return // stopping: the answers say nothing of the members
	}
	sort.Strings(down)
	h.mu.Lock()
	h.down = down
	h.mu.Unlock()
	if h.Shares != nil {
		h.Shares.Returned(answered)
	}
}

func (q *Quota) health(ctx context.Context, id string) ([]string, error) {
	p, err := q.peer(id)
	if err != nil {
		return nil, err
	}
	r, err := p.cli.Health(ctx, &HealthRequest{Version: version})
	if err != nil {
		return nil, err
	}
	if r.Node != id || len(r.Down) > maxDown {
		return nil, fmt.Errorf("member %s answered health as %q with %d items: %w", id, r.Node, len(r.Down), errBadRequest)
	}
	out := make([]string, len(r.Down))
	for i, d := range r.Down {
		if len(d) > 200 {
			d = d[:200]
		}
		out[i] = d
	}
	return out, nil
}

// CheckSelf asks this node, at the address it registered for the others
// (its advertised address), who it is: nil when it answers as itself. A
// one-off connection: the peers' pool is for the other members.
func (q *Quota) CheckSelf(ctx context.Context) error {
	self := q.cfg.Owners.Self()
	addr, ok := q.cfg.Owners.Addr(self)
	if !ok {
		return fmt.Errorf("no address registered for %s", self)
	}
	conn, err := grpc.NewClient(addr, q.cfg.DialOptions...)
	if err != nil {
		return err
	}
	defer conn.Close()
	r, err := NewNodeClient(conn).Health(ctx, &HealthRequest{Version: version})
	if err != nil {
		return err
	}
	if r.GetNode() != self {
		return fmt.Errorf("%s answers as node %q", addr, r.GetNode())
	}
	return nil
}
