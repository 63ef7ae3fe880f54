// Package storage is the only package that talks to Pebble. It owns the key
// schema and the binary record codecs of everything the service persists.
package storage
