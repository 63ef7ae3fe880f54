package clusterserve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// dirStamp names the cluster and the node a data dir belongs to. A node
// keeps its share of the cluster's counts in its data dir, under its node
// id (docs/cluster.md, "per-node shares"): a data dir started as another
// node answers that node's share as this one's (counted twice), and a node
// started on a data dir that is not its own answers none of what it
// acknowledged (lost, and its next charges not counted until they pass it,
// since shares merge by maximum). Either stops the start with one line.
type dirStamp struct {
	Cluster string `json:"cluster"`
	Node    string `json:"node"`
}

// checkDirStamp refuses a data dir stamped for another cluster or node,
// and an unstamped one when etcd says this node id holds a share it cannot
// have (nodes/<id>, kept until a graceful leave handed the share over). A
// data dir an older build ran this node on holds no stamp but the node's
// lease file, and is stamped as it is. It stamps what it lets through.
func checkDirStamp(ctx context.Context, cli *clientv3.Client, root string, cfg Config) error {
	if cfg.StampFile == "" {
		return nil
	}
	want := dirStamp{Cluster: cfg.Name, Node: cfg.NodeID}
	b, err := os.ReadFile(cfg.StampFile)
	switch {
	case err == nil:
		var got dirStamp
		if err := json.Unmarshal(b, &got); err != nil {
			return fmt.Errorf("cluster: %s does not read (%v): it names the node this data dir belongs to; restore it or start on the node's own data dir", cfg.StampFile, err)
		}
		if got != want {
			return fmt.Errorf("cluster: this data dir belongs to node %q of cluster %q (%s), not to node %q of cluster %q: start each node on its own data dir, under its own --cluster-node-id", got.Node, got.Cluster, cfg.StampFile, want.Node, want.Cluster)
		}
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("cluster: read %s: %w", cfg.StampFile, err)
	}
	if _, err := os.Stat(cfg.LeaseFile); cfg.LeaseFile == "" || err != nil {
		// nodes/<id> (cluster.Member.KnownIDs): the key is the cluster
		// package's layout, read here once before the node joins.
		r, err := cli.Get(ctx, root+"nodes/"+cfg.NodeID, clientv3.WithCountOnly())
		if err != nil {
			return fmt.Errorf("cluster: read whether node %q holds a share of the counts: %w", cfg.NodeID, err)
		}
		if r.Count > 0 {
			return fmt.Errorf("cluster: node %q of cluster %q keeps its share of the counts in its own data dir, and this one (%s) holds no record of being it (a new or lost data dir, or a restored backup): start it on its own data dir; if that is lost for good, run etcdctl del %snodes/%s to accept losing what it counted, then start it again", cfg.NodeID, cfg.Name, filepath.Dir(cfg.StampFile), root, cfg.NodeID)
		}
	}
	b, err = json.Marshal(want)
	if err != nil {
		return err
	}
	if err := writeSynced(cfg.StampFile, append(b, '\n')); err != nil {
		return fmt.Errorf("cluster: stamp this data dir for node %q: %w", cfg.NodeID, err)
	}
	return nil
}

// writeSynced writes path whole or not at all: a temporary file, synced,
// renamed over it, and the directory synced.
func writeSynced(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
