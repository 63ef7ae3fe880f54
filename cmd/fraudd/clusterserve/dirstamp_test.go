package clusterserve

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fraudd/fraudd/cluster"
)

// TestDirStamp: the data dir names the node it belongs to; another node id
// or cluster on it, and a node that holds a share started on a data dir
// that was never its own, are refused; a data dir an older build ran the
// node on (its lease file, no stamp) is stamped as it is.
func TestDirStamp(t *testing.T) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: etcd(t), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	name := clusterName(t)
	root, err := cluster.Root(name)
	if err != nil {
		t.Fatal(err)
	}
	cfgFor := func(dir, id string) Config {
		return Config{Name: name, NodeID: id, StampFile: filepath.Join(dir, "cluster-node"), LeaseFile: filepath.Join(dir, "cluster-lease")}
	}

	// A new node on a new data dir: stamped, and accepted again.
	a := t.TempDir()
	if err := checkDirStamp(ctx, cli, root, cfgFor(a, "a")); err != nil {
		t.Fatal(err)
	}
	if err := checkDirStamp(ctx, cli, root, cfgFor(a, "a")); err != nil {
		t.Fatalf("a's own data dir again: %v", err)
	}
	// Another node id, or another cluster, on it.
	if err := checkDirStamp(ctx, cli, root, cfgFor(a, "b")); err == nil || !strings.Contains(err.Error(), `belongs to node "a"`) {
		t.Fatalf("a's data dir as b: %v", err)
	}
	other := cfgFor(a, "a")
	other.Name = name + "-other"
	if err := checkDirStamp(ctx, cli, root, other); err == nil || !strings.Contains(err.Error(), "of cluster "+`"`+name+`"`) {
		t.Fatalf("a's data dir in another cluster: %v", err)
	}

	// b holds a share (nodes/b): a data dir that was never b's is refused.
	if _, err := cli.Put(ctx, root+"nodes/b", "b"); err != nil {
		t.Fatal(err)
	}
	if err := checkDirStamp(ctx, cli, root, cfgFor(t.TempDir(), "b")); err == nil || !strings.Contains(err.Error(), "etcdctl del "+root+"nodes/b") {
		t.Fatalf("b on an empty data dir: %v", err)
	}
	// b's data dir from an older build: its lease file, no stamp.
	old := t.TempDir()
	if err := os.WriteFile(filepath.Join(old, "cluster-lease"), []byte("1234\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := checkDirStamp(ctx, cli, root, cfgFor(old, "b")); err != nil {
		t.Fatalf("b's data dir of an older build: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(old, "cluster-node")); err != nil || !strings.Contains(string(b), `"node":"b"`) {
		t.Fatalf("b's data dir not stamped: %q %v", b, err)
	}
}
