package embedetcd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Growing an etcd cluster of embedded members: a new member is added to
// the running cluster first (as a learner, which takes no part in quorum
// until it has caught up, so a new member that fails to start never costs
// the cluster its quorum), then started with the cluster's member list,
// then promoted to a voting member. A member that restarts on its data
// directory is already known to the cluster and only starts.

// joinTimeout bounds the whole join: the add, the start and the promotion.
const joinTimeout = 60 * time.Second

// hasData reports whether dir already holds a member's data.
func hasData(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "member"))
	return err == nil
}

// joinClient is a client of the running cluster a member joins.
func joinClient(endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

// addLearner adds peer as a learner of the cluster at endpoints and
// answers the initial-cluster string the new member starts with, and its
// member id. A learner with the same peer URL already there (an earlier
// join that failed before the start) is reused.
func addLearner(ctx context.Context, endpoints []string, name, peer string) (initial string, id uint64, err error) {
	cli, err := joinClient(endpoints)
	if err != nil {
		return "", 0, err
	}
	defer cli.Close()
	list, err := cli.MemberList(ctx)
	if err != nil {
		return "", 0, fmt.Errorf("list the members at %s: %w", strings.Join(endpoints, ","), err)
	}
	found := false
	for _, m := range list.Members {
		for _, u := range m.PeerURLs {
			if u == peer {
				if !m.IsLearner || (m.Name != "" && m.Name != name) {
					return "", 0, fmt.Errorf("peer URL %s is already member %q of the cluster: start it on its own data directory instead of joining again", peer, m.Name)
				}
				id, found = m.ID, true
			}
		}
	}
	members := list.Members
	if !found {
		resp, err := cli.MemberAddAsLearner(ctx, []string{peer})
		if err != nil {
			return "", 0, fmt.Errorf("add %s as a learner: %w", peer, err)
		}
		id, members = resp.Member.ID, resp.Members
	}
	var parts []string
	for _, m := range members {
		n := m.Name
		if m.ID == id {
			n = name
		}
		if n == "" {
			continue // another member added but not started: not ours to name
		}
		for _, u := range m.PeerURLs {
			parts = append(parts, n+"="+u)
		}
	}
	return strings.Join(parts, ","), id, nil
}

// promote makes the learner id a voting member once it has caught up with
// the leader (etcd refuses until then), trying until ctx ends.
func promote(ctx context.Context, endpoints []string, id uint64) error {
	cli, err := joinClient(endpoints)
	if err != nil {
		return err
	}
	defer cli.Close()
	for {
		_, err := cli.MemberPromote(ctx, id)
		if err == nil || strings.Contains(err.Error(), "is not a learner") {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(fmt.Errorf("promote member %x", id), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
