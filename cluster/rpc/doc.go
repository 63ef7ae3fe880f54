// Package rpc is the node-to-node service of cluster mode,
// fraudd.cluster.v1.Node (node.proto), and the routing quota client the
// pipeline calls in a cluster (docs/cluster.md, "Per-account state and the
// gRPC service").
//
// The Server answers Charge and Usage for the account shards this node owns,
// from the node's own quota actors, after checking before each charge that
// its claim of the shard is still valid (the member's lease held, the claim
// the one the Balancer made); otherwise it refuses with FailedPrecondition
// and a NotOwner detail naming the owner and token in its view. Shares
// answers what this node's own store holds of an account, for a new owner's
// G-counter rebuild.
//
// The Quota client implements checks.Quota and the chained ChargeThen: per
// account it finds the shard's owner in the owner view; the owner charges in
// its local actors with no hop, any other node makes one gRPC call to the
// owner (one connection per member, reused), refreshes its view and retries
// once when the owner refuses, and answers an error (503
// storage_unavailable, nothing charged: the pipeline's rule for a quota
// error) when no owner answers within the call deadline.
//
// SharedStore is the quota actors' store on a cluster node: each node
// writes only its own share, and loading an account sums every member's
// (the G-counter), so a new owner starts from the whole count.
//
// An evaluation on a non-owner that carries a device event or a history
// observation goes as one Evaluate call (evaluate.go): the owner charges,
// resolves the event and observes the customer's device history it keeps,
// and the admin device list reads it there (DeviceList). Per-address
// limits are summed off the request path (addrlimits.go): every node
// reports what it admitted to the address shards' owners each 100 ms
// (AddrReporter) and takes the others' part and the lockouts from the
// answers (AddrTotals). The operator lists each node keeps of what it
// handled (recent evaluations, webhook deliveries, the outbox) are read
// through any node as every member's, merged (lists.go: EvaluationList,
// DeliveryList, MailList).
//
// Generated code (node.pb.go, node_grpc.pb.go) is committed; CI never runs
// protoc. To regenerate after editing node.proto, with protoc 3.21 (Debian
// bookworm: apt-get install protobuf-compiler) and the plugins at the
// versions go.mod pins:
//
//	go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.11
//	go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
//	go generate ./cluster/rpc/
package rpc

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative node.proto
