//go:build unix

package main

import "syscall"

// restrictUmask makes every file the process creates 0600 and every
// directory 0700, as PostgreSQL does for its data directory.
func restrictUmask() { syscall.Umask(0o077) }
