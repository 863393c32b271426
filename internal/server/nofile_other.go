//go:build !unix

package server

// FileLimit is unknown here: the connection cap takes its default for an
// unknown limit.
func FileLimit() uint64 { return 0 }
