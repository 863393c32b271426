//go:build race

package task_test

// raceEnabled is whether the race detector is on: it adds allocations of
// its own to some that the tests count.
const raceEnabled = true
