//go:build race

package httpapi_test

// raceEnabled is whether the race detector is on: heavy tests do less
// under it (it makes decoding about 20 times slower).
const raceEnabled = true
