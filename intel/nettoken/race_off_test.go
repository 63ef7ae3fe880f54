//go:build !race

package nettoken

const raceEnabled = false
