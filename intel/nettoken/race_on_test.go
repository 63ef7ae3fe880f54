//go:build race

package nettoken

// raceEnabled: sync.Pool drops items at random under the race detector, so
// allocation counts are not asserted then.
const raceEnabled = true
