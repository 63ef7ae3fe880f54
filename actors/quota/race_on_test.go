//go:build race

package quota

// raceEnabled: sync.Pool drops items at random under the race detector, so
// allocation counts are not asserted then.
const raceEnabled = true
