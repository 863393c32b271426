//go:build race

package pebblestore

// raceEnabled is whether the race detector is on: it makes sync.Pool drop
// some of what it is given, so allocation counts are not exact under it.
const raceEnabled = true
