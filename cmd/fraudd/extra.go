package main

import "io"

// runExtra dispatches subcommands that live in their own files.
func runExtra(args []string, stdout, stderr io.Writer) (int, bool) {
	return 0, false
}
