//go:build !race

package fastapi

const raceEnabled = false
