//go:build !race

package devicehist

const raceEnabled = false
