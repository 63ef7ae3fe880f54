package cluster

import "go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

// pause stops (true) or resumes (false) the member's renewals: what a
// SIGSTOP or a long pause does to a node, as seen by etcd.
func (m *Member) pause(on bool) { m.paused.Store(on) }

// onWatch sets a hook that runs before each watch the store opens.
func (s *Store[T]) onWatch(f func(from int64)) { s.beforeWatch = f }

var rpcCompacted = rpctypes.ErrCompacted
