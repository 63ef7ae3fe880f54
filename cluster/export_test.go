package cluster

// pause stops (true) or resumes (false) the member's renewals: what a
// SIGSTOP or a long pause does to a node, as seen by etcd.
func (m *Member) pause(on bool) { m.paused.Store(on) }
