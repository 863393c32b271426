//go:build !race

package pebblestore

const raceEnabled = false
