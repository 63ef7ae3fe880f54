// Package cluster is the etcd side of cluster mode (docs/cluster.md): a node's
// membership under a lease it renews itself, fenced ownership of account and
// address shards, the rendezvous assignment that moves the fewest shards, and
// a store that keeps a local copy of a key prefix current through a watch.
//
// It imports nothing of the service; the wiring behind the pipeline's typed
// clients does. Single-node mode never links it.
package cluster
