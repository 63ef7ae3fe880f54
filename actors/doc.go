// Package actors owns the service's mutable state. Each entity (account quota,
// source address, device) belongs to exactly one shard actor; handlers reach
// them through typed clients and never hold a PID.
package actors
