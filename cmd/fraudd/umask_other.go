//go:build !unix

package main

// restrictUmask has nothing to restrict where there is no umask.
func restrictUmask() {}
